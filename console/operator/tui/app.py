"""The leasectl console: k9s-like, keyboard first, honest about what it knows and when.

The app owns the session, the listener and the `freshness` every header watches; screens post
what they fetched (DataArrived / DataFailed) and never call back into it.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import ClassVar

from rich.segment import Segment
from rich.text import Text
from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.color import Color
from textual.filter import LineFilter
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from console.db.session import ConsoleSession
from console.operator.present.contexts import (
    NO_CONTEXTS_HINT,
    SWITCH_FROM_A_SCREEN,
    no_contexts,
    switched_words,
    switching_words,
)
from console.operator.tui.clock import Clock
from console.operator.tui.failures import describe_failure, ensure_log_file, log_dir
from console.operator.tui.messages import DataArrived, DataFailed, DbChanged, ListenerState
from console.operator.tui.screens.action import GuardedDialog
from console.operator.tui.screens.approvals import ApprovalsScreen
from console.operator.tui.screens.audit import AuditScreen
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.screens.calls import CallsScreen
from console.operator.tui.screens.chains import ChainsScreen
from console.operator.tui.screens.contexts import SWITCHING_MODE, ContextChoice, ContextPicker, SwitchingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.screens.everywhere import AllContextsScreen
from console.operator.tui.screens.fleet import FleetScreen
from console.operator.tui.screens.help import HelpScreen
from console.operator.tui.screens.metrics import MetricsScreen
from console.operator.tui.screens.operations import BulkOperationsScreen
from console.operator.tui.screens.reconciliations import ReconciliationsScreen, RecordScreen
from console.operator.tui.screens.triage import TriageScreen
from console.operator.tui.state import Freshness
from console.shared.contexts import Context, contexts_path
from console.shared.errors import LeasectlError
from console.shared.text import terminal_safe

# NOTIFY wakes the screens at most this often (seconds): a storm of changes costs a few fetches a
# second per console, and no change waits longer than this after the previous wake
WAKE_EVERY = 0.2


def write_crash_log(error: BaseException | None) -> Path:
    directory = log_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"crash-{time.strftime('%Y%m%d-%H%M%S')}.log"
    lines = traceback.format_exception(error) if error else ["(no exception recorded)\n"]
    path.write_text("".join(lines))
    return path


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
    # the classes screens' CSS can use for a small terminal (80x24 is the size that must work)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]
    MODES: ClassVar[dict[str, type[Screen[None]]]] = {  # type: ignore[assignment]
        "triage": TriageScreen,
        "calls": CallsScreen,
        "approvals": ApprovalsScreen,
        "fleet": FleetScreen,
        "reconciliations": ReconciliationsScreen,
        "audit": AuditScreen,
        "metrics": MetricsScreen,
        "chains": ChainsScreen,
        "everywhere": AllContextsScreen,
    }
    SCREEN_TITLES: ClassVar[dict[str, str]] = {
        "triage": "1 Triage", "calls": "2 Calls", "approvals": "3 Approvals", "fleet": "4 Fleet",
        "reconciliations": "5 Reconciliations", "audit": "6 Audit", "metrics": "7 Metrics",
        "chains": "8 Chains", "everywhere": "9 All contexts"}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "switch_mode('triage')", "Triage", tooltip="Calls that need attention, worst first"),
        Binding("2", "switch_mode('calls')", "Calls", tooltip="All calls, filterable, paged"),
        Binding("3", "switch_mode('approvals')", "Approvals", tooltip="Outcome unknown: a human decides"),
        Binding("4", "switch_mode('fleet')", "Fleet", tooltip="The agent tree and shutdowns: drain or abort"),
        Binding("5", "switch_mode('reconciliations')", "Reconciliations",
                tooltip="What each shutdown left: unaccounted agents, every call, every grant"),
        Binding("6", "switch_mode('audit')", "Audit", show=False, tooltip="Who held a call when, the journal, export"),
        Binding("7", "switch_mode('metrics')", "Metrics", show=False, tooltip="Metrics by tool, model, provider"),
        Binding("8", "switch_mode('chains')", "Chains", show=False,
                tooltip="Chains of calls: their deadline, the stage they are at, the slowest stage"),
        Binding("9", "switch_mode('everywhere')", "All contexts", show=False,
                tooltip="Triage in every context at once: a context that does not answer is named DOWN"),
        Binding("ctrl+o", "contexts", "Contexts", show=False,
                tooltip="Switch to another context: every screen reconnects"),
        Binding("0", "bulk_operations", "Bulk ops", show=False,
                tooltip="Bulk operations (over 1,000 calls): their progress; stop one"),
        Binding("question_mark", "help", "Help", tooltip="Every key binding, and what the words mean"),
        Binding("r", "refresh", "Refresh", show=False, tooltip="Fetch now"),
        Binding("q", "quit", "Quit", tooltip="Leave leasectl"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True, tooltip="Leave leasectl"),
        # reached only when a screen does not offer the key: on a read-only session, say why
        Binding("c,t,a,d,x", "not_offered", show=False),
    ]

    freshness: reactive[Freshness] = reactive(Freshness, always_update=True)

    def __init__(self, session: ConsoleSession, *, clock: Clock | None = None, poll_seconds: float = 2.0,
                 listen: bool = True) -> None:
        super().__init__()
        self.session = session
        self.clock = clock or Clock()
        self.poll_seconds = poll_seconds
        self.listen_enabled = listen
        self._stop_listening = threading.Event()
        self._last_wake = 0.0
        self._wake_pending = False
        self._terminal_safe = TerminalSafe()
        self._opening: GuardedDialog | None = None

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
        ensure_log_file()
        self.open_session()
        await self.switch_mode("triage")
        if self.listen_enabled:
            self.listen_for_changes()

    @work(thread=True, group="session", exit_on_error=False)
    def open_session(self) -> None:
        self.session.open()

    @work(thread=True, group="listen", exit_on_error=False)
    def listen_for_changes(self) -> None:
        def changed(payload: dict) -> None:
            self.post_message(DbChanged(payload))

        def state(connected: bool) -> None:
            self.post_message(ListenerState(connected))

        def note(text: str) -> None:  # no LISTEN behind a transaction pooler: say why "● live" never shows
            self.notify(text, title="Polling", severity="warning", timeout=30)

        self.session.listen(changed, self._stop_listening, on_state=state, on_note=note,
                            poll_seconds=self.poll_seconds)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The app's own workers (opening the session, the listener) fail through the same place."""
        if event.worker.group == "session" and event.state == WorkerState.SUCCESS:
            for screen in self.screen_stack:  # a role that may not act: its footer offers no action
                screen.refresh_bindings()
            return
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        if not isinstance(error, LeasectlError):
            error = LeasectlError(describe_failure(error, f"the console's {event.worker.group}"))
        self.freshness = self.freshness.failed(error, self.clock.monotonic())

    async def action_quit(self) -> None:
        self._stop_listening.set()
        self.session.close()
        self.exit()

    def on_unmount(self) -> None:
        self._stop_listening.set()

    # ------------------------------------------------------------------ freshness (one way: in by message)
    def on_data_arrived(self, message: DataArrived) -> None:
        self.freshness = self.freshness.arrived(message.db_now, self.clock.monotonic())

    def on_data_failed(self, message: DataFailed) -> None:
        self.freshness = self.freshness.failed(message.error, self.clock.monotonic(), since=message.since)

    def on_listener_state(self, message: ListenerState) -> None:
        self.freshness = self.freshness.with_listener(message.connected, self.clock.monotonic())

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Toasts never interpret markup: their text may carry ids, reasons or filters people typed."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # ------------------------------------------------------------------ keys
    def push_screen(self, screen, *args, **kwargs):
        if isinstance(screen, GuardedDialog):
            self._opening = screen  # from now on, keys of the burst that opened it are its to ignore
        return super().push_screen(screen, *args, **kwargs)

    async def on_event(self, event: events.Event) -> None:
        # A dialog that changes data hears no key typed before it appeared (GuardedDialog.swallows),
        # including the keys that arrive between the key that opened it and its first frame: on a
        # busy machine `e`, `a` or `enter` would otherwise reach the screen below.
        if isinstance(event, events.Key) and not event.is_forwarded:
            dialog = self.screen if isinstance(self.screen, GuardedDialog) else self._opening
            if dialog is not None and not dialog.closed and dialog.swallows(event):
                return
        await super().on_event(event)

    # ------------------------------------------------------------------ notifications
    def on_db_changed(self, message: DbChanged) -> None:
        # A burst of changes wakes the screens at most once per WAKE_EVERY (one fetch, not one per
        # row), and a change is never held longer than that after the last wake: the deferred wake
        # is due at last wake + WAKE_EVERY, and one is pending at a time.
        if self._wake_pending:
            return
        wait = self._last_wake + WAKE_EVERY - time.monotonic()
        if wait <= 0:
            self._wake_screens()
        else:
            self._wake_pending = True
            self.set_timer(wait, self._wake_screens)

    def _wake_screens(self) -> None:
        self._wake_pending = False
        self._last_wake = time.monotonic()
        for screen in self.screen_stack:
            if isinstance(screen, PollingScreen):
                screen.wake()

    # ------------------------------------------------------------------ actions
    def action_refresh(self) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, PollingScreen):
                screen.wake()

    def action_not_offered(self) -> None:
        if self.session.read_only_reason:
            self.notify(f"Read-only console: {self.session.read_only_reason}. Actions are disabled.",
                        title="Not allowed", severity="error")

    def action_bulk_operations(self) -> None:
        if not isinstance(self.screen, BulkOperationsScreen):
            self.push_screen(BulkOperationsScreen())

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen, screens=[*self.MODES.values(), DetailScreen, RecordScreen],
                                        app_bindings=self.BINDINGS, session=self.session))

    # ------------------------------------------------------------------ contexts (ctrl+o)
    def action_contexts(self) -> None:
        """ctrl+o: the picker (console.operator.tui.screens.contexts); the one chosen becomes the console's."""
        if isinstance(self.screen, ContextPicker):
            return
        if not isinstance(self.screen, PollingScreen):  # a dialog or the help: its business first
            self.notify(SWITCH_FROM_A_SCREEN, title="Contexts", severity="warning")
            return
        if self.session.contexts_withheld:
            self.notify(self.session.contexts_withheld, title="Contexts", severity="warning")
            return
        try:
            known = self.session.known_contexts()
        except LeasectlError as exc:  # contexts.toml that does not parse: say where and why
            self.notify(f"{exc}" + (f"\n{exc.hint}" if exc.hint else ""), title="Contexts", severity="error",
                        timeout=15)
            return
        if not known:
            self.notify(f"{no_contexts(str(contexts_path()))}. {NO_CONTEXTS_HINT}.", title="Contexts",
                        severity="warning", timeout=15)
            return
        self.push_screen(ContextPicker(self.session, known), self._context_chosen)

    async def _context_chosen(self, choice: ContextChoice | None) -> None:
        if choice is not None:
            await self.switch_context(choice.context)

    async def switch_context(self, context: Context | None) -> None:
        """The console on another context: a new session (its DSN, operator, read-only), every screen
        made anew on it -- nothing of the old database stays on screen, and the old screens' workers
        are cancelled as the screens go -- the listener moved, the old session retired off the UI
        thread (it makes no connection again, not even for a read already on its way)."""
        old, mode = self.session, self.current_mode or "triage"
        new = old.switched_to(context)
        self._stop_listening.set()
        self.workers.cancel_group(self, "session")
        self.add_mode(SWITCHING_MODE, lambda: SwitchingScreen(switching_words(context, new.dsn)))
        await self.switch_mode(SWITCHING_MODE)
        for name, screen in self.MODES.items():
            await self.remove_mode(name)
            self.add_mode(name, screen)
        self.session = new
        self._stop_listening = threading.Event()
        self.freshness = Freshness()
        self._retire(old)
        self.open_session()
        await self.switch_mode(mode)
        await self.remove_mode(SWITCHING_MODE)
        if self.listen_enabled:
            self.listen_for_changes()
        self.notify(switched_words(context, new.shown_dsn or new.dsn, new.operator, new.read_only_reason),
                    title="Contexts")

    @work(thread=True, group="retire", exit_on_error=False)
    def _retire(self, session: ConsoleSession) -> None:
        session.retire()  # closing waits for a read in flight on its lane: never on the UI thread

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every screen and every action by name; Textual's own commands stay out (leasectl's keys
        are the ones that matter here), but for the theme and a screenshot."""
        for mode, title in self.SCREEN_TITLES.items():
            number, name = title.split(" ", 1)
            about = (self.MODES[mode].__doc__ or "").strip().splitlines()[:1]
            yield SystemCommand(name, f"{about[0] if about else name} ({number})",
                                lambda mode=mode: self.run_action(f"switch_mode('{mode}')"))
        if isinstance(screen, PollingScreen):
            yield from screen.commands()
            if screen.saved_view_screen() is not None:  # v: console/operator/tui/screens/views.py
                yield SystemCommand("Saved views", "This list's views: apply one, or save the filter (v)",
                                    screen.action_views)
        yield SystemCommand("Bulk operations", "Their progress; stop one (0)", self.action_bulk_operations)
        yield SystemCommand("Refresh", "Fetch now (r)", self.action_refresh)
        yield SystemCommand("Help", "Every key binding and what the words mean (?)", self.action_help)
        yield SystemCommand("Contexts", "Switch to another context (ctrl+o)", self.action_contexts)
        for command in super().get_system_commands(screen):
            if command.title in ("Theme", "Screenshot", "Quit"):
                yield command
