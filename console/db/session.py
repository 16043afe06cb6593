"""The console's own session: separate connections for reads, actions and LISTEN, each with
our limits; reconnection after a failure; read-only mode enforced in the database."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from console.core.models import DbInfo
from console.db.connect import Conn, connect, ping, run, translate_error
from console.db.migrate import check_compatible
from console.db.reads import db_info
from console.shared.config import CONSOLE_LIMITS, SessionLimits
from console.shared.errors import DatabaseUnavailable, LeasectlError, ReadOnlySession

T = TypeVar("T")
log = logging.getLogger("leasectl.session")


class ConsoleSession:
    def __init__(self, dsn: str, *, operator: str, read_only: bool = False, clock: str | None = None,
                 label: str | None = None, limits: SessionLimits = CONSOLE_LIMITS,
                 shown_dsn: str | None = None) -> None:
        self.dsn = dsn
        self.shown_dsn = shown_dsn  # what `?` shows instead of the DSN (the pictures pin it)
        self.operator = operator
        self.read_only_requested = read_only
        self.clock = clock
        self.label = label
        self.limits = limits
        self.info: DbInfo | None = None
        self.read_only_reason: str | None = "started with --read-only" if read_only else None
        self._read: Conn | None = None
        self._act: Conn | None = None
        self._read_lock = threading.Lock()
        self._act_lock = threading.Lock()

    # ------------------------------------------------------------------ connections
    def _connect(self, *, for_actions: bool = False) -> Conn:
        conn = connect(self.dsn, limits=self.limits, read_only=self.read_only_requested)
        try:
            if self.read_only_requested:
                run(conn, "meta/assume_auditor")
            if self.clock is not None and not for_actions:
                run(conn, "meta/display_clock", clock=self.clock)
        except BaseException:
            conn.close()
            raise
        return conn

    def open(self) -> DbInfo:
        """Connect, check the schema, and learn whether this session may act at all."""
        return self.read(self._load_info)

    def _load_info(self, conn: Conn) -> DbInfo:
        check_compatible(conn)
        info = db_info(conn)
        self.info = info
        if self.read_only_requested:
            self.read_only_reason = "started with --read-only"
        elif info.session_read_only:
            self.read_only_reason = "the database session is read-only"
        elif not info.can_act:
            self.read_only_reason = f"role {info.role} may not act (no EXECUTE on the operator functions)"
        else:
            self.read_only_reason = None
        return info

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    @property
    def display_name(self) -> str:
        if self.label:
            return self.label
        return self.info.database if self.info else "?"

    def read(self, fn: Callable[[Conn], T]) -> T:
        """Run a read (fn must change nothing: it may run twice). A connection that died while idle
        -- a server restart, pg_terminate_backend -- is found dead only when used: the read then
        runs once more on a fresh connection, so that a database that is back is not reported
        unreachable. A fresh connection that fails is an outage: DatabaseUnavailable."""
        with self._read_lock:
            reused = self._usable(self._read)
            try:
                return self._use("_read", fn, for_actions=False)
            except DatabaseUnavailable as exc:
                if not reused:
                    raise
                log.info("the read connection was dead (%s); reading again on a fresh one", exc)
                return self._use("_read", fn, for_actions=False)

    def act(self, fn: Callable[[Conn], T]) -> T:
        """Run an action. It is never sent twice: a connection that is reused is first asked
        whether it is alive (meta/ping, one round trip) and made again if not -- nothing of the
        action has left yet, so that is the one retry. If the connection dies once the action was
        sent, the action's own transaction says whether it cannot have committed
        (DatabaseUnavailable: nothing applied) or may have (OutcomeUnknown: look at the journal)."""
        if self.read_only_reason:
            raise ReadOnlySession(f"refused: this console is read-only ({self.read_only_reason})")
        with self._act_lock:
            conn = self._act
            if conn is not None and self._usable(conn):
                try:
                    ping(conn)
                except DatabaseUnavailable as exc:
                    log.info("the action connection was dead (%s); the action goes on a fresh one", exc)
                    self._drop("_act")
            return self._use("_act", fn, for_actions=True)

    @staticmethod
    def _usable(conn: Conn | None) -> bool:
        return conn is not None and not conn.closed and not conn.broken

    def _use(self, attr: str, fn: Callable[[Conn], T], *, for_actions: bool) -> T:
        """Run fn on that connection (made again if it is gone); drop it when the database went
        away. A driver error from outside `run` (a transaction's BEGIN or COMMIT) that says the
        connection was lost is translated here: whoever called sees DatabaseUnavailable, never
        psycopg's AdminShutdown or "server closed the connection"."""
        conn = getattr(self, attr)
        if not self._usable(conn):
            conn = self._connect(for_actions=for_actions)
            setattr(self, attr, conn)
        try:
            return fn(conn)
        except DatabaseUnavailable:
            self._drop(attr)
            raise
        except psycopg.Error as exc:
            error = translate_error(exc, "the console")
            if isinstance(error, DatabaseUnavailable) or not self._usable(conn):
                self._drop(attr)
            if isinstance(error, DatabaseUnavailable):
                raise error from exc
            raise  # any other driver error is a bug of ours: it stays what it is

    def _drop(self, attr: str) -> None:
        conn = getattr(self, attr)
        setattr(self, attr, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - it is already broken
                pass

    def close(self) -> None:
        with self._read_lock:
            self._drop("_read")
        with self._act_lock:
            self._drop("_act")

    # ------------------------------------------------------------------ LISTEN/NOTIFY
    def listen(self, on_change: Callable[[dict[str, Any]], None], stop: threading.Event,
               on_state: Callable[[bool], None] | None = None) -> None:
        """Block, calling on_change for each state/owner change notified, until `stop`. Reconnects
        with backoff; on_state(False/True) reports the listener losing/regaining its connection.
        The caller keeps polling either way: NOTIFY only wakes the poll early."""
        backoff = 0.5
        while not stop.is_set():
            try:
                conn = connect(self.dsn, limits=self.limits, application_name="leasectl-listen")
            except LeasectlError:
                if on_state:
                    on_state(False)
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            try:
                run(conn, "meta/listen")
                run(conn, "meta/listen_fleet")  # shutdowns, agents' states, grants
                if on_state:
                    on_state(True)
                backoff = 0.5
                while not stop.is_set():
                    for note in conn.notifies(timeout=0.5, stop_after=64):
                        try:
                            payload = json.loads(note.payload)
                        except ValueError:
                            payload = {}
                        on_change(payload)
            except Exception as exc:  # noqa: BLE001 - any failure: reconnect
                log.info("listener lost its connection: %s", exc)
                if on_state:
                    on_state(False)
                stop.wait(backoff)
            finally:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass



