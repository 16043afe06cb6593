"""Messages of the console: what screens tell the app, and what the listener tells everyone."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from textual.message import Message


class DataArrived(Message):
    """A screen fetched fresh data (bubbles up to the app, which updates the freshness)."""

    def __init__(self, db_now: datetime) -> None:
        super().__init__()
        self.db_now = db_now


class DataFailed(Message):
    """A screen could not fetch; it keeps its last good data (bubbles up to the app).

    `since`: the instant (the console's monotonic clock) the request that failed was sent. The
    failure is reported when the request gives up -- after the data layer's reconnection, a
    connect timeout -- which can be many seconds later; the trouble began no later than `since`."""

    def __init__(self, error: BaseException, *, since: float | None = None) -> None:
        super().__init__()
        self.error = error
        self.since = since


class DbChanged(Message):
    """LISTEN/NOTIFY: a call or the fleet changed; refresh early."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__()
        self.payload = payload


class ListenerState(Message):
    def __init__(self, connected: bool) -> None:
        super().__init__()
        self.connected = connected
