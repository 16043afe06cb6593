"""What the screens may know of the app they run in: an interface, so that screens never import
the app (which imports them). The app implements it; screens and widgets only read it."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from console.db.session import ConsoleSession
from console.shared.clock import Clock
from console.shared.errors import LeasectlError


class ConsoleApp(Protocol):
    session: ConsoleSession
    clock: Clock
    poll_seconds: float

    def data_arrived(self, db_now: datetime) -> None: ...
    def data_failed(self, error: LeasectlError) -> None: ...
    def retry_seconds(self) -> float: ...
    def db_time(self) -> datetime | None: ...
    def data_age(self) -> float | None: ...
    def why_no_actions(self) -> str | None: ...
