"""The leasectl console: k9s-like, keyboard first, honest about what it knows and when."""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar

import platformdirs
from rich.segment import Segment
from rich.text import Text
from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.color import Color
from textual.css.query import NoMatches
from textual.filter import LineFilter
from textual.notifications import SeverityLevel
from textual.screen import Screen

from console.db.session import ConsoleSession
from console.operator.tui.messages import DbChanged, ListenerState
from console.operator.tui.screens.approvals import ApprovalsScreen
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.screens.calls import CallsScreen
from console.operator.tui.screens.fleet import FleetScreen
from console.operator.tui.screens.help import HelpScreen
from console.operator.tui.screens.reconciliations import ReconciliationsScreen
from console.operator.tui.screens.triage import TriageScreen
from console.operator.tui.widgets.status import StatusBar, TroubleBanner
from console.shared.clock import Clock
from console.shared.errors import DatabaseUnavailable, LeasectlError, SchemaError
from console.shared.text import sanitize, terminal_safe


def write_crash_log(error: BaseException | None) -> Path:
    directory = Path(platformdirs.user_log_dir("leasectl"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"crash-{time.strftime('%Y%m%d-%H%M%S')}.log"
    lines = traceback.format_exception(error) if error else ["(no exception recorded)\n"]
    path.write_text("".join(lines))
    return path


CRUMB_SEPARATOR = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "
SCREEN_TITLES = {"triage": "1 Triage", "calls": "2 Calls", "approvals": "3 Approvals", "fleet": "4 Fleet",
                 "reconciliations": "5 Reconciliations"}


class TerminalSafe(LineFilter):
    """The terminal's last line of defence: every drawn segment passes `terminal_safe`, so text a
    screen forgot to sanitize shows as text and never acts on the terminal (see console.shared.text)."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return [segment if segment.control or segment.text.isprintable()
                else Segment(terminal_safe(segment.text), segment.style, segment.control)
                for segment in segments]


class LeasectlApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "leasectl"
    MODES: ClassVar[dict[str, type[Screen[None]]]] = {  # type: ignore[assignment]
        "triage": TriageScreen,
        "calls": CallsScreen,
        "approvals": ApprovalsScreen,
        "fleet": FleetScreen,
        "reconciliations": ReconciliationsScreen,
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "switch_mode('triage')", "Triage", tooltip="Calls that need attention, worst first"),
        Binding("2", "switch_mode('calls')", "Calls", tooltip="All calls, filterable, paged"),
        Binding("3", "switch_mode('approvals')", "Approvals", tooltip="Outcome unknown: a human decides"),
        Binding("4", "switch_mode('fleet')", "Fleet", tooltip="The agent tree and shutdowns: drain or abort"),
        Binding("5", "switch_mode('reconciliations')", "Reconciliations",
                tooltip="What each shutdown left: unaccounted agents, every call, every grant"),
        Binding("question_mark", "help", "Help", tooltip="Every key binding"),
        Binding("r", "refresh", "Refresh", show=False, tooltip="Fetch now"),
        Binding("q", "quit", "Quit", tooltip="Leave leasectl"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True, tooltip="Leave leasectl"),
    ]

    def __init__(self, session: ConsoleSession, *, clock: Clock | None = None, poll_seconds: float = 2.0,
                 listen: bool = True) -> None:
        super().__init__()
        self.session = session
        self.clock = clock or Clock()
        self.poll_seconds = poll_seconds
        self.listen_enabled = listen
        self.listening = False
        self.last_db_now: datetime | None = None
        self.last_fetch_monotonic: float | None = None
        self.trouble: LeasectlError | None = None
        self.trouble_since: datetime | None = None
        self.failures = 0
        self._stop_listening = threading.Event()
        self._last_wake = 0.0
        self._terminal_safe = TerminalSafe()

    def get_line_filters(self) -> Sequence[LineFilter]:
        return [*super().get_line_filters(), self._terminal_safe]

    # ------------------------------------------------------------------ crashes
    def _handle_exception(self, error: Exception) -> None:
        self._crash = error
        super()._handle_exception(error)

    def _fatal_error(self) -> None:
        """A bug, not a user error: no traceback with local variables on screen (they may hold
        a DSN's password, or a payload); one line, and the details in a log file."""
        if os.environ.get("LEASECTL_DEBUG"):
            super()._fatal_error()
            return
        error = getattr(self, "_crash", None)
        path = write_crash_log(error)
        self.bell()
        self._exit_renderables.append(Text(
            f"leasectl stopped on an internal error ({type(error).__name__ if error else 'unknown'}). "
            f"Nothing was changed by it. Details: {path}. Please report it.", style="bold red"))
        self._close_messages_no_wait()

    # ------------------------------------------------------------------ lifecycle
    def get_default_screen(self) -> Screen[None]:
        return Screen()

    async def on_mount(self) -> None:
        self.set_interval(1.0, self.tick)
        self.open_session()
        await self.switch_mode("triage")
        if self.listen_enabled:
            self.listen_for_changes()

    @work(thread=True, group="session", exit_on_error=False)
    def open_session(self) -> None:
        try:
            self.session.open()
        except LeasectlError as exc:
            self.call_from_thread(self.data_failed, exc)
            return
        self.call_from_thread(self.refresh_status)

    @work(thread=True, group="listen", exit_on_error=False)
    def listen_for_changes(self) -> None:
        def changed(payload: dict) -> None:
            self.post_message(DbChanged(payload))

        def state(connected: bool) -> None:
            self.post_message(ListenerState(connected))

        self.session.listen(changed, self._stop_listening, on_state=state)

    async def action_quit(self) -> None:
        self._stop_listening.set()
        self.session.close()
        self.exit()

    def on_unmount(self) -> None:
        self._stop_listening.set()

    # ------------------------------------------------------------------ freshness
    def data_arrived(self, db_now: datetime) -> None:
        self.last_db_now = db_now
        self.last_fetch_monotonic = self.clock.monotonic()
        self.trouble = None
        self.trouble_since = None
        self.failures = 0
        self.refresh_status()

    def data_failed(self, error: LeasectlError) -> None:
        if self.trouble is None:
            self.trouble_since = self.db_time()
        self.trouble = error
        self.failures += 1
        self.refresh_status()

    def retry_seconds(self) -> float:
        return min(1.0 * 2 ** max(self.failures - 1, 0), 10.0)

    def db_time(self) -> datetime | None:
        """The database's clock now: the last fetch's now() plus monotonic time since."""
        if self.last_db_now is None or self.last_fetch_monotonic is None:
            return None
        return self.last_db_now + timedelta(seconds=self.clock.monotonic() - self.last_fetch_monotonic)

    def data_age(self) -> float | None:
        if self.last_fetch_monotonic is None:
            return None
        return self.clock.monotonic() - self.last_fetch_monotonic

    @property
    def stale(self) -> bool:
        age = self.data_age()
        return self.trouble is not None or age is None or age > max(3 * self.poll_seconds, 10.0)

    def why_no_actions(self) -> str | None:
        if self.session.read_only_reason:
            return f"Read-only console: {self.session.read_only_reason}. Actions are disabled."
        if self.trouble is not None:
            return "The database is not answering: actions are disabled until fresh data arrives."
        if self.stale:
            return "The data on screen is stale: actions are disabled until it is refreshed."
        return None

    # ------------------------------------------------------------------ status
    def refresh_status(self) -> None:
        # Every screen of the stack: a dialog leaves the one below visible, and its clock must keep
        # ticking while the operator types a reason. Each header names the path up to its own
        # screen, so the list under a call's detail never shows that call once the detail is gone.
        trouble = self.trouble_message()
        path = [SCREEN_TITLES.get(self.current_mode or "", "")]
        for screen in self.screen_stack:
            if crumb := getattr(screen, "crumb", None):
                path.append(crumb)
            for bar in screen.query(StatusBar):
                bar.render_status(
                    screen=CRUMB_SEPARATOR.join(path),
                    database=self.session.display_name,
                    operator=self.session.operator,
                    read_only=self.session.read_only_reason,
                    db_time=self.db_time(),
                    age=self.data_age(),
                    stale=self.stale,
                    listening=self.listening,
                )
            for banner in screen.query(TroubleBanner):
                banner.show_trouble(trouble)

    def trouble_message(self) -> str | None:
        if self.trouble is None:
            if self.last_fetch_monotonic is not None and self.stale:
                return "Data is stale: the last refresh is too old. Actions are disabled."
            return None
        since = self.trouble_since.strftime("%H:%M:%S") if self.trouble_since else "start"
        last = self.last_db_now.strftime("%H:%M:%S") if self.last_db_now else "never"
        what = sanitize(str(self.trouble))
        if isinstance(self.trouble, DatabaseUnavailable):
            return (f"DATABASE UNREACHABLE since {since} — showing data from {last}. "
                    f"Actions disabled. Reconnecting… ({what})")
        if isinstance(self.trouble, SchemaError):
            hint = f" — {self.trouble.hint}" if self.trouble.hint else ""
            return f"SCHEMA PROBLEM: {what}{hint}"
        return f"CANNOT REFRESH since {since} — showing data from {last}. Actions disabled. ({what})"

    def tick(self) -> None:
        now = self.db_time()
        if now is not None:
            for screen in self.screen_stack:
                # only a screen that has shown data has the widgets a tick updates
                if isinstance(screen, PollingScreen) and screen.loaded_once:
                    try:
                        screen.tick(now)
                    except NoMatches:
                        # a screen being torn down (quit, or popped) loses its widgets before it
                        # leaves the stack; a tick in between has nothing to update
                        continue
        self.refresh_status()

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Toasts never interpret markup: their text may carry ids, reasons or filters people typed."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # ------------------------------------------------------------------ notifications
    def on_db_changed(self, message: DbChanged) -> None:
        # a burst of changes wakes the poll once, not once per row
        if time.monotonic() - self._last_wake < 0.2:
            self.set_timer(0.2, self._wake_screens)
            return
        self._wake_screens()

    def _wake_screens(self) -> None:
        self._last_wake = time.monotonic()
        for screen in self.screen_stack:
            if isinstance(screen, PollingScreen):
                screen.wake()

    def on_listener_state(self, message: ListenerState) -> None:
        self.listening = message.connected
        self.refresh_status()

    # ------------------------------------------------------------------ actions
    def action_refresh(self) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, PollingScreen):
                screen.wake()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield SystemCommand("Triage", "Calls that need attention, worst first (1)",
                            lambda: self.run_action("switch_mode('triage')"))
        yield SystemCommand("Calls", "All calls, filterable (2)", lambda: self.run_action("switch_mode('calls')"))
        yield SystemCommand("Approvals", "Calls whose outcome is unknown (3)",
                            lambda: self.run_action("switch_mode('approvals')"))
        yield SystemCommand("Fleet", "The agent tree and shutdowns (4)",
                            lambda: self.run_action("switch_mode('fleet')"))
        yield SystemCommand("Reconciliations", "What each shutdown left behind (5)",
                            lambda: self.run_action("switch_mode('reconciliations')"))
        if isinstance(screen, FleetScreen) and (agent := screen.selected_agent()) is not None:
            yield SystemCommand(f"Drain the subtree of {agent.id}", "Calls finish in a window (d)",
                                screen.action_drain)
            yield SystemCommand(f"Abort the subtree of {agent.id}", "Cancel now, fence the unconfirmed (x)",
                                screen.action_abort)
        if isinstance(screen, PollingScreen) and screen.selected_job() is not None:
            job = screen.selected_job()
            assert job is not None
            yield SystemCommand(f"Cancel call {job.short_id}", "Request a cancel (c)", screen.action_cancel_call)
            yield SystemCommand(f"Mark call {job.short_id} terminal", "After checking outside (t)",
                                screen.action_mark_terminal)
            yield SystemCommand(f"Approve a retry of {job.short_id}", "Outcome unknown only (a)",
                                screen.action_approve_retry)
        yield SystemCommand("Refresh", "Fetch now (r)", self.action_refresh)
        yield SystemCommand("Help", "Every key binding (?)", self.action_help)
        yield from super().get_system_commands(screen)
