"""Reads beside a screen's own: every call a filter matches (Calls' mark-all), a payload's preview
(the detail's `p`), the marked calls of a bulk dialog read again.

Each runs in a thread worker of its own group on the console's session, like the polls
(console.operator.tui.screens.base); its answer or its failure comes back as the worker's
StateChanged message, and the screen's handler hands that to `Aside.handle`, which calls what the
read was started with, on the UI thread: widgets are touched there only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from textual.screen import Screen
from textual.worker import Worker, WorkerState

from console.db.connect import Conn
from console.operator.tui.state import ConsoleApp

T = TypeVar("T")
Failed = Callable[[BaseException | None], None]


class Aside:
    """The reads of one screen, by worker group: a new read of a group replaces the one in flight."""

    def __init__(self, screen: Screen[Any]) -> None:
        self._screen = screen
        self._answers: dict[str, tuple[Callable[[Any], None], Failed]] = {}

    def read(self, group: str, read: Callable[[Conn], T], done: Callable[[T], None], failed: Failed) -> None:
        """`read` on the session, off the UI thread; then `done(what it read)`, or `failed(the error)`."""
        self._answers[group] = (done, failed)
        screen = self._screen
        screen.run_worker(lambda: cast(ConsoleApp, screen.app).session.read(read), group=group, thread=True,
                          exclusive=True, exit_on_error=False)

    def handle(self, event: Worker.StateChanged) -> None:
        """A worker's new state: a read of ours that succeeded or failed is answered; anything else is not ours."""
        answers = self._answers.get(event.worker.group)
        if answers is None:
            return
        done, failed = answers
        if event.state == WorkerState.SUCCESS:
            done(event.worker.result)
        elif event.state == WorkerState.ERROR:
            failed(event.worker.error)
