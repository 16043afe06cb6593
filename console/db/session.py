"""The console's own session: separate connections for reads, actions and LISTEN, each with
our limits; reconnection after a failure; read-only mode enforced in the database."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from console.db.connect import Conn, connect, run
from console.db.migrate import check_compatible
from console.db.reads import db_info
from console.shared.config import CONSOLE_LIMITS, SessionLimits
from console.shared.errors import DatabaseUnavailable, LeasectlError, ReadOnlySession
from console.shared.models import DbInfo

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
        with self._read_lock:
            return self._use("_read", fn, for_actions=False)

    def act(self, fn: Callable[[Conn], T]) -> T:
        if self.read_only_reason:
            raise ReadOnlySession(f"refused: this console is read-only ({self.read_only_reason})")
        with self._act_lock:
            return self._use("_act", fn, for_actions=True)

    def _use(self, attr: str, fn: Callable[[Conn], T], *, for_actions: bool) -> T:
        """Run fn on that connection (made again if it is gone); drop it when the database went away."""
        conn = getattr(self, attr)
        if conn is None or conn.closed or conn.broken:
            conn = self._connect(for_actions=for_actions)
            setattr(self, attr, conn)
        try:
            return fn(conn)
        except DatabaseUnavailable:
            self._drop(attr)
            raise

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



