"""The console's own session: separate connections for reads, actions and LISTEN, each a lane
(console.db.lane: our limits, made again after a loss, one backoff); read-only mode enforced in
the database."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from console.core.models import DbInfo
from console.db.connect import Conn, run
from console.db.lane import Lane
from console.db.migrate import check_compatible
from console.db.reads import db_info
from console.shared.config import CONSOLE_LIMITS, SessionLimits
from console.shared.errors import DatabaseUnavailable, ReadOnlySession

T = TypeVar("T")
log = logging.getLogger("leasectl.session")


def _subscribe(conn: Conn) -> None:
    run(conn, "meta/listen")
    run(conn, "meta/listen_fleet")  # shutdowns, agents' states, grants


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
        # three connections, so that a slow read never holds up an action, and LISTEN has one
        # of its own; reads show the database's clock as the pictures pin it, when asked
        self.read_lane = Lane(dsn, limits=limits, read_only=read_only, setup=self._display_clock)
        self.action_lane = Lane(dsn, limits=limits, read_only=read_only)
        self.listen_lane = Lane(dsn, limits=limits, application_name="leasectl-listen", setup=_subscribe)

    def _display_clock(self, conn: Conn) -> None:
        if self.clock is not None:
            run(conn, "meta/display_clock", clock=self.clock)

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
        """Run a read (fn must change nothing: it may run twice, Lane.read says when)."""
        return self.read_lane.read(fn)

    def act(self, fn: Callable[[Conn], T]) -> T:
        """Run an action, never sent twice (Lane.act says how)."""
        if self.read_only_reason:
            raise ReadOnlySession(f"refused: this console is read-only ({self.read_only_reason})")
        return self.action_lane.act(fn)

    def close(self) -> None:
        self.read_lane.close()
        self.action_lane.close()

    # ------------------------------------------------------------------ LISTEN/NOTIFY
    def listen(self, on_change: Callable[[dict[str, Any]], None], stop: threading.Event,
               on_state: Callable[[bool], None] | None = None) -> None:
        """Block, calling on_change for each state/owner change notified, until `stop`. Reconnects
        after the lane's backoff; on_state(False/True) reports the listener losing/regaining its
        connection. The caller keeps polling either way: NOTIFY only wakes the poll early."""
        try:
            while not stop.is_set():
                try:
                    with self.listen_lane.use() as conn:
                        if on_state:
                            on_state(True)
                        _relay(conn, on_change, stop)
                except Exception as exc:  # noqa: BLE001 - any failure: reconnect
                    log.info("listener lost its connection: %s", exc)
                    if not isinstance(exc, DatabaseUnavailable):  # a loss is counted by the lane itself
                        self.listen_lane.drop(failure=exc)
                    if on_state:
                        on_state(False)
                    self.listen_lane.pause(stop)
        finally:
            self.listen_lane.close()


def _relay(conn: Conn, on_change: Callable[[dict[str, Any]], None], stop: threading.Event) -> None:
    """Hand each notification's payload to on_change until `stop` (or the connection fails)."""
    while not stop.is_set():
        for note in conn.notifies(timeout=0.5, stop_after=64):
            try:
                payload = json.loads(note.payload)
            except ValueError:
                payload = {}
            on_change(payload)
