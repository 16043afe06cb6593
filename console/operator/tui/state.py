"""What the screens may know of the app they run in, and the freshness every header shows.

State flows one way: screens post what they fetched (messages.DataArrived / DataFailed), the app
turns it into a new `Freshness` (a reactive), and the widgets that show it watch that reactive, as
Textual's Header watches `app.title`. Screens never call into the app and never import it; they
read it through the `ConsoleApp` interface below.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from console.db.session import ConsoleSession
from console.operator.tui.clock import Clock
from console.shared.errors import DatabaseUnavailable, SchemaError


@dataclass(frozen=True)
class Freshness:
    """How fresh the data on screen is, by the database's clock: the last good fetch, and the
    trouble since, if any. Immutable: each change is a new value, so watchers see every one."""

    db_now: datetime | None = None        # now() of the last good fetch
    fetched_at: float | None = None       # our monotonic clock when it arrived
    trouble: str | None = None            # what went wrong since (a person's words)
    trouble_kind: str | None = None       # "unreachable", "schema" or "refresh"
    trouble_since: datetime | None = None
    listening: bool = False               # the LISTEN connection is up
    listener_known: bool = False          # the listener has reported at least once
    listener_lost_at: float | None = None  # our monotonic clock when the listener lost its connection

    def arrived(self, db_now: datetime, at: float) -> Freshness:
        return replace(self, db_now=db_now, fetched_at=at, trouble=None, trouble_kind=None, trouble_since=None)

    def failed(self, error: BaseException, at: float, *, since: float | None = None) -> Freshness:
        """`at`: when the failure was reported; `since`: when the request that failed was sent.
        The trouble dates from the first sign of it: that request, or the listener losing its
        connection, whichever came first after the last good data -- not from the moment the
        request gave up (after reconnection attempts and timeouts, 20 s and more later)."""
        kind = ("unreachable" if isinstance(error, DatabaseUnavailable) else
                "schema" if isinstance(error, SchemaError) else "refresh")
        if self.trouble is not None:
            began = self.trouble_since
        else:
            last_good = self.fetched_at if self.fetched_at is not None else float("-inf")
            first = min(at, since if since is not None else at)
            lost = self.listener_lost_at
            if kind == "unreachable" and lost is not None and lost > last_good:  # an older loss is not this outage
                first = min(first, lost)
            began = self.db_time(max(first, last_good))  # never before the last data that did arrive
        hint = getattr(error, "hint", None)
        words = str(error) + (f" — {hint}" if kind == "schema" and hint else "")
        return replace(self, trouble=words, trouble_kind=kind, trouble_since=began)

    def with_listener(self, connected: bool, at: float | None = None) -> Freshness:
        if connected:
            lost_at = None
        elif self.listening or self.listener_lost_at is None:
            lost_at = at  # the first report of the loss counts, not the retries that follow it
        else:
            lost_at = self.listener_lost_at
        return replace(self, listening=connected, listener_known=True, listener_lost_at=lost_at)

    def db_time(self, at: float) -> datetime | None:
        """The database's clock at our monotonic instant `at`: the last fetch's now() plus the time since."""
        if self.db_now is None or self.fetched_at is None:
            return None
        return self.db_now + timedelta(seconds=at - self.fetched_at)

    def age(self, at: float) -> float | None:
        return None if self.fetched_at is None else at - self.fetched_at

    def stale(self, at: float, poll_seconds: float) -> bool:
        age = self.age(at)
        return self.trouble is not None or age is None or age > max(3 * poll_seconds, 10.0)

    def live(self, at: float, poll_seconds: float) -> bool:
        """Honest "● live": the listener is up AND the data is fresh (never under a trouble banner)."""
        return self.listening and not self.stale(at, poll_seconds)


class ConsoleApp(Protocol):
    """The app as screens see it: the session, the clock, the poll interval, and freshness."""

    session: ConsoleSession
    clock: Clock
    poll_seconds: float
    freshness: Freshness


def why_no_actions(app: ConsoleApp) -> str | None:
    """Why an action may not start now, or None: read-only, unreachable, or stale data."""
    if app.session.read_only_reason:
        return f"Read-only console: {app.session.read_only_reason}. Actions are disabled."
    if app.freshness.trouble is not None:
        return "The database is not answering: actions are disabled until fresh data arrives."
    if app.freshness.stale(app.clock.monotonic(), app.poll_seconds):
        return "The data on screen is stale: actions are disabled until it is refreshed."
    return None


def trouble_banner(app: ConsoleApp) -> str | None:
    """The loud line under the header: what is wrong, since when, and what is shown meanwhile."""
    f = app.freshness
    now = app.clock.monotonic()
    if f.trouble is None:
        if f.fetched_at is not None and f.stale(now, app.poll_seconds):
            return "Data is stale: the last refresh is too old. Actions are disabled."
        return None
    since = f.trouble_since.strftime("%H:%M:%S") if f.trouble_since else "start"
    last = f.db_now.strftime("%H:%M:%S") if f.db_now else "never"
    if f.trouble_kind == "unreachable":
        return (f"DATABASE UNREACHABLE since {since} — showing data from {last}. "
                f"Actions disabled. Reconnecting… ({f.trouble})")
    if f.trouble_kind == "schema":
        return f"SCHEMA PROBLEM: {f.trouble}"
    return f"CANNOT REFRESH since {since} — showing data from {last}. Actions disabled. ({f.trouble})"
