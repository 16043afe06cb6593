"""Messages between the database threads and the screens."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from textual.message import Message

from console.shared.errors import LeasectlError


class Loaded(Message):
    """A thread worker fetched fresh data for a screen."""

    def __init__(self, data: Any, db_now: datetime) -> None:
        super().__init__()
        self.data = data
        self.db_now = db_now


class LoadFailed(Message):
    """A thread worker could not fetch; the screen keeps its last good data."""

    def __init__(self, error: LeasectlError) -> None:
        super().__init__()
        self.error = error


class DbChanged(Message):
    """LISTEN/NOTIFY: a call changed state or owner; refresh early."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__()
        self.payload = payload


class ListenerState(Message):
    def __init__(self, connected: bool) -> None:
        super().__init__()
        self.connected = connected


class ActionDone(Message):
    """An operator action came back (Applied, Refused) or failed before its guard."""

    def __init__(self, result: Any = None, error: LeasectlError | None = None) -> None:
        super().__init__()
        self.result = result
        self.error = error
