"""What every live screen shares.

* Polling: a one-shot timer, re-armed only after a fetch has come back, so a slow database
  never gets overlapping polls from us; LISTEN/NOTIFY only makes the next poll come sooner.
* Database work runs in a thread worker and comes back as a message; widgets are touched
  on the UI thread only.
* Actions go through one place that refuses them on a read-only session or stale data.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from textual import work
from textual.screen import Screen
from textual.timer import Timer

from console.db.connect import Conn
from console.operator.tui.messages import Loaded, LoadFailed
from console.operator.tui.state import ConsoleApp
from console.shared.errors import LeasectlError
from console.shared.models import JobSummary


class PollingScreen(Screen[None]):
    """Subclasses implement `load(conn)` (worker thread) and `show(data)` (UI thread)."""

    poll_seconds: float | None = None  # None: the app's interval
    # Where a pushed screen sits under its mode ("call 1a2b3c4d"): the header shows "1 Triage > call
    # 1a2b3c4d", so nobody mistakes a call's detail for the list it was opened from.
    crumb: str | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: Timer | None = None
        self._in_flight = False
        self._again = False
        self.loaded_once = False

    @property
    def lapp(self) -> ConsoleApp:
        return cast(ConsoleApp, self.app)

    # ------------------------------------------------------------------ polling
    def on_mount(self) -> None:
        self.schedule(0)

    def on_screen_resume(self) -> None:
        self.schedule(0)

    def on_screen_suspend(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def schedule(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.stop()
        # a zero interval divides by zero inside textual.timer: "now" is one millisecond
        self._timer = self.set_timer(max(delay, 0.001), self.fetch)

    def fetch(self) -> None:
        if self._in_flight:
            self._again = True
            return
        self._in_flight = True
        self._fetch_in_thread()

    def wake(self) -> None:
        """Data changed in the database (NOTIFY): fetch now, or right after the one in flight."""
        if self._in_flight:
            self._again = True
        else:
            self.schedule(0.05)

    @work(thread=True, exclusive=True, group="poll", exit_on_error=False)
    def _fetch_in_thread(self) -> None:
        try:
            data, db_now = self.lapp.session.read(self._load_with_clock)
        except LeasectlError as exc:
            self.post_message(LoadFailed(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a bug must not kill the console; show it
            self.post_message(LoadFailed(LeasectlError(f"{type(exc).__name__}: {exc}")))
            return
        self.post_message(Loaded(data, db_now))

    def _load_with_clock(self, conn: Conn) -> tuple[Any, datetime]:
        data = self.load(conn)
        return data, self.db_now_of(data)

    def on_loaded(self, message: Loaded) -> None:
        message.stop()
        self._in_flight = False
        self.loaded_once = True
        self.lapp.data_arrived(message.db_now)
        self.show(message.data)
        self.schedule(0 if self._again else self.lapp.poll_seconds)
        self._again = False

    def on_load_failed(self, message: LoadFailed) -> None:
        message.stop()
        self._in_flight = False
        self._again = False
        self.lapp.data_failed(message.error)
        self.schedule(self.lapp.retry_seconds())

    # ------------------------------------------------------------------ to implement
    def load(self, conn: Conn) -> Any:
        raise NotImplementedError

    def show(self, data: Any) -> None:
        raise NotImplementedError

    def db_now_of(self, data: Any) -> datetime:
        raise NotImplementedError

    def tick(self, now: datetime) -> None:
        """Every second, with the database's clock: re-render ages."""

    # ------------------------------------------------------------------ actions
    def selected_job(self) -> JobSummary | None:
        return None

    def action_cancel_call(self) -> None:
        self._open_action("cancel")

    def action_mark_terminal(self) -> None:
        self._open_action("mark_terminal")

    def action_approve_retry(self) -> None:
        self._open_action("approve_retry")

    def actions_allowed(self) -> bool:
        """False (and says why) on a read-only session, an unreachable database or stale data."""
        refusal = self.lapp.why_no_actions()
        if refusal:
            self.app.notify(refusal, title="Not allowed", severity="error")
        return refusal is None

    def _open_action(self, action: str) -> None:
        job = self.selected_job()
        if job is None:
            self.app.notify("Select a call first.", severity="warning")
            return
        if not self.actions_allowed():
            return
        problem = action_not_possible(action, job)
        if problem:
            self.app.notify(problem, title="Nothing to do", severity="warning")
            return
        from console.operator.tui.screens.action import ActionDialog

        self.app.push_screen(ActionDialog(action, job, seen_at=self.lapp.data_age()),
                             lambda _result: self.wake())


def action_not_possible(action: str, job: JobSummary) -> str | None:
    """Say so before opening a dialog whose guard could only refuse."""
    if action == "cancel" and job.state not in ("queued", "running"):
        if job.state == "cancel_requested":
            return "A cancel is already requested; the worker has not confirmed it yet."
        return f"A {job.state.replace('_', ' ')} call cannot be cancelled."
    if action == "approve_retry" and job.state != "outcome_unknown":
        return "Only a call whose outcome is unknown needs an approval to retry."
    if action == "mark_terminal" and job.state in ("succeeded", "failed", "cancelled"):
        return f"This call is already {job.state}."
    return None
