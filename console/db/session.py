"""The console's own session: separate connections for reads, actions and LISTEN, each a lane
(console.db.lane: our limits, made again after a loss, one backoff); read-only mode enforced in
the database. Behind a connection pooler in transaction mode there is no LISTEN: the console
polls, and says so (console.db.pooler)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from console.core.models import DbInfo
from console.db.connect import Conn, run, run_one, set_display_clock
from console.db.lane import Lane
from console.db.migrate import check_compatible
from console.db.pooler import Pooler, can_listen
from console.db.reads import db_info
from console.shared.config import CONSOLE_LIMITS, SessionLimits
from console.shared.contexts import Context, Overrides, load_contexts, settle
from console.shared.errors import DatabaseUnavailable, LeasectlError, ReadOnlySession

T = TypeVar("T")
log = logging.getLogger("leasectl.session")


def polling_note(pooler: Pooler, poll_seconds: float | None = None) -> str:
    """What the console says when it cannot LISTEN: why, and what it does instead."""
    every = f" every {poll_seconds:g} s" if poll_seconds else ""
    return (f"No live updates: the database is reached through a connection pooler in transaction mode "
            f"({pooler.how}), which cannot carry LISTEN/NOTIFY. The console polls{every} instead.")


def _subscribe(conn: Conn) -> None:
    if not can_listen(conn):  # behind a transaction pooler the subscription would hear nothing
        return
    run(conn, "meta/listen")
    run(conn, "meta/listen_fleet")  # shutdowns, agents' states, grants


class ReplicaState(BaseModel):
    """meta/replica_lag.sql's answer: whether reads come from a replica, and how far behind it is."""

    replica: bool
    caught_up: bool
    lag_seconds: float | None = None


class SessionRetired(LeasectlError):
    """The console has left this session's database (another context was chosen): it connects no more."""


class ConsoleSession:
    """`context`: the context it was opened for (console.shared.contexts; None: --dsn or the
    environment), named in the header; `overrides`: what the command line said, kept for a switch
    to another context (`switched_to`); `read_only_because`: why it is read-only before it asks the
    database (default: --read-only); `known_contexts`: where ctrl+o finds the others;
    `contexts_withheld`: why ctrl+o and screen 9 offer none (the web console's tab is its database's
    only), said instead of where a contexts file would be -- a path on the server is not the
    browser user's business."""

    def __init__(self, dsn: str, *, operator: str, read_only: bool = False, clock: str | None = None,
                 label: str | None = None, limits: SessionLimits = CONSOLE_LIMITS,
                 shown_dsn: str | None = None, context: Context | None = None,
                 overrides: Overrides | None = None, read_only_because: str | None = None,
                 known_contexts: Callable[[], dict[str, Context]] = load_contexts,
                 first: ConsoleSession | None = None, read_dsn: str | None = None,
                 contexts_withheld: str | None = None) -> None:
        self.dsn = dsn
        self.contexts_withheld = contexts_withheld
        # a replica for the reads (the context's read_dsn); actions, their guards and LISTEN stay
        # on dsn, the primary: a stale read can only get an action refused by its guard
        self.read_dsn = read_dsn
        self.replica: ReplicaState | None = None
        self.shown_dsn = shown_dsn  # what `?` shows instead of the DSN (the pictures pin it)
        self.operator = operator
        self.context = context
        self.overrides = overrides or Overrides(operator=operator, read_only=read_only)
        self.known_contexts = known_contexts
        # where the console opened (its context, None for none; its DSN, label and pinned DSN), offered
        # by the picker even when the file does not name it: the way back is always there
        self.first_context: Context | None = first.first_context if first is not None else context
        self.first_dsn: str = first.first_dsn if first is not None else dsn
        self.first_label: str | None = first.first_label if first is not None else label
        self.first_shown_dsn: str | None = first.first_shown_dsn if first is not None else shown_dsn
        self.asked_read_only = read_only_because or ("started with --read-only" if read_only else None)
        self.read_only_requested = self.asked_read_only is not None
        self.clock = clock
        self.label = label
        self.limits = limits
        self.info: DbInfo | None = None
        self.read_only_reason: str | None = self.asked_read_only
        self.retired = False
        # why the console polls without LISTEN (a connection pooler in transaction mode), once known
        self.polling_reason: str | None = None
        read_only = self.read_only_requested
        # three connections, so that a slow read never holds up an action, and LISTEN has one
        # of its own; reads show the database's clock as the pictures pin it, when asked
        self.read_lane = Lane(read_dsn or dsn, limits=limits, read_only=read_only, setup=self._display_clock)
        self.action_lane = Lane(dsn, limits=limits, read_only=read_only, setup=self._still_current)
        self.listen_lane = Lane(dsn, limits=limits, application_name="leasectl-listen", setup=self._subscribe)

    @property
    def dsn_overridden(self) -> bool:
        """Opened for a context, on another DSN (--dsn beat the context's)."""
        return self.context is not None and self.dsn != self.context.dsn

    def is_first(self, context: Context | None) -> bool:
        """Whether `context` is the one the console opened with (None: it opened without one)."""
        first = self.first_context
        if first is None or context is None:
            return first is None and context is None
        return first.name == context.name

    def switched_to(self, context: Context | None) -> ConsoleSession:
        """A new session for `context` (None: where the console opened without one), under the same
        --operator and --read-only; the DSN the console opened on (--dsn, the demo's) stays with the
        place it opened in, every other context connects to its own dsn."""
        first = self.is_first(context)
        dsn = self.first_dsn if first or context is None else context.dsn
        settled = settle(context, self.overrides.model_copy(update={"dsn": dsn}))
        return ConsoleSession(settled.dsn, operator=settled.operator, read_only_because=settled.read_only_reason,
                              clock=self.clock, limits=self.limits, context=context, overrides=self.overrides,
                              known_contexts=self.known_contexts, contexts_withheld=self.contexts_withheld,
                              first=self, read_dsn=settled.read_dsn,
                              label=self.first_label if first else None,
                              shown_dsn=self.first_shown_dsn if first else None)

    def retire(self) -> None:
        """This session is done for good (the console switched away): its connections are closed and
        none is made again, even by a read already on its way (it fails with SessionRetired)."""
        self.retired = True
        self.close()

    def _still_current(self, conn: Conn) -> None:
        """Every new connection's first check: a retired session opens none."""
        if self.retired:
            raise SessionRetired("the console has left this database (another context was chosen)")

    def _display_clock(self, conn: Conn) -> None:
        self._still_current(conn)
        if self.clock is not None:
            set_display_clock(conn, self.clock)

    def _subscribe(self, conn: Conn) -> None:
        self._still_current(conn)
        _subscribe(conn)

    def open(self) -> DbInfo:
        """Connect, check the schema, and learn whether this session may act at all (on the primary:
        a replica's sessions are read-only whoever asks)."""
        if self.read_dsn:
            info = self.action_lane.read(self._load_info)
            self.read(check_compatible)  # the replica holds the same schema
            return info
        return self.read(self._load_info)

    def _load_info(self, conn: Conn) -> DbInfo:
        check_compatible(conn)
        info = db_info(conn)
        self.info = info
        if self.asked_read_only:
            self.read_only_reason = self.asked_read_only
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
        """Run a read (fn must change nothing: it may run twice, Lane.read says when). On a replica,
        how far behind it is comes with every read (the header shows it)."""
        if not self.read_dsn:
            return self.read_lane.read(fn)

        def and_lag(conn: Conn) -> T:
            answer = fn(conn)
            row = run_one(conn, "meta/replica_lag")
            self.replica = ReplicaState.model_validate(row) if row else None
            return answer

        return self.read_lane.read(and_lag)

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
               on_state: Callable[[bool], None] | None = None, on_note: Callable[[str], None] | None = None,
               poll_seconds: float | None = None) -> None:
        """Block, calling on_change for each state/owner change notified, until `stop`. Reconnects
        after the lane's backoff; on_state(False/True) reports the listener losing/regaining its
        connection. The caller keeps polling either way: NOTIFY only wakes the poll early.

        Behind a connection pooler in transaction mode LISTEN hears nothing: the listener says so
        once (on_note, and the log), lets its connection go and waits for `stop`; on_state is never
        called, so the header shows polling, never live."""
        polling = None
        try:
            while not stop.is_set() and polling is None:
                try:
                    with self.listen_lane.use() as conn:
                        if not can_listen(conn):
                            polling = self.listen_lane.pooler
                            continue
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
        if polling is not None:
            self.polling_reason = polling_note(polling, poll_seconds)
            log.warning("%s", self.polling_reason)
            if on_note:
                on_note(self.polling_reason)
            stop.wait()


def _relay(conn: Conn, on_change: Callable[[dict[str, Any]], None], stop: threading.Event) -> None:
    """Hand each notification's payload to on_change until `stop` (or the connection fails)."""
    while not stop.is_set():
        for note in conn.notifies(timeout=0.5, stop_after=64):
            try:
                payload = json.loads(note.payload)
            except ValueError:
                payload = {}
            on_change(payload)
