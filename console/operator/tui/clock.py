"""Time as the console sees it: a monotonic clock that tests and screenshots can freeze.

Ages on screen are the database's clock at the last fetch plus the monotonic time since.
"""

from __future__ import annotations

import time


class Clock:
    def monotonic(self) -> float:
        return time.monotonic()


class FrozenClock(Clock):
    """Never moves: snapshot tests and screenshots render one fixed instant."""

    def __init__(self, at: float = 1_000.0) -> None:
        self.at = at

    def monotonic(self) -> float:
        return self.at
