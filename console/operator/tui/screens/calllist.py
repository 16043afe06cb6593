"""A live screen whose body is a list of calls (Triage, Calls): its ages tick, its selection is the
call the actions act on, `enter` (or a second click) opens that call, and `/` filters it with the
one grammar (console.shared.filters), the active filter always shown."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import ClassVar

from rich.text import Text
from textual.app import SystemCommand
from textual.binding import Binding, BindingType

from console.operator.tui.screens.base import CALL_ACTION_BINDINGS, PollingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.calltable import CallTable
from console.operator.tui.widgets.filterbar import FilterBar, FilterLine
from console.operator.tui.widgets.livetable import LiveTable
from console.shared.filters import JobFilter, parse_filter
from console.shared.models import JobSummary
from console.shared.text import sanitize


def call_commands(screen: PollingScreen, job: JobSummary | None) -> Iterable[SystemCommand]:
    """The palette's entries for the selected call (the same actions as c, t, a)."""
    if job is None:
        return
    yield SystemCommand(f"Cancel call {job.short_id}", "Request a cancel (c)", screen.action_cancel_call)
    yield SystemCommand(f"Mark call {job.short_id} terminal", "After checking outside (t)",
                        screen.action_mark_terminal)
    yield SystemCommand(f"Approve a retry of {job.short_id}", "Outcome unknown only (a)",
                        screen.action_approve_retry)


class CallListScreen(PollingScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_call", "Open", tooltip="Everything about the selected call"),
        *CALL_ACTION_BINDINGS,
        Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="Clear the active filter"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter_value = JobFilter()
        self.moved_note: Text | None = None

    @property
    def table(self) -> CallTable:
        return self.query_one(CallTable)

    def tick(self, now: datetime) -> None:
        self.table.tick(now)

    def selected_job(self) -> JobSummary | None:
        return self.table.selected

    def commands(self) -> Iterable[SystemCommand]:
        yield from call_commands(self, self.selected_job())

    def sync_table(self, rows: list[JobSummary], now: datetime) -> None:
        left = self.table.sync(rows, now)
        if left is not None:
            # the cursor moved to another call under the operator: say so, never silently
            now_on = self.table.selected
            self.moved_note = Text(f"call {left[:8]} left this list; the cursor is on "
                                   f"{now_on.short_id if now_on else 'nothing'} now", style="bold yellow")
            self.set_timer(8, self._forget_moved)

    def _forget_moved(self) -> None:
        self.moved_note = None
        self.show_filter_line()

    # ------------------------------------------------------------------ opening
    def action_open_call(self) -> None:
        job = self.selected_job()
        if job is not None:
            self.app.push_screen(DetailScreen(job.id))

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_call()

    # ------------------------------------------------------------------ the filter
    @property
    def where(self) -> JobFilter:
        return self.filter_value

    @where.setter
    def where(self, value: JobFilter) -> None:
        self.filter_value = value

    def parse_filter_text(self, text: str) -> JobFilter:
        return parse_filter(text)

    def on_filter_bar_applied(self, message: FilterBar.Applied) -> None:
        super().on_filter_bar_applied(message)
        if not self.query_one(FilterBar).is_open:
            self.table.focus()

    def show_filter_line(self, *, matched: int | None = None, total: int | None = None) -> None:
        self.query_one(FilterLine).show_filter(self.where.describe(), matched=matched, total=total,
                                               extra=self.moved_note)


def no_match_words(where: JobFilter) -> str:
    return f"Nothing here matches the filter {sanitize(where.describe(), max_chars=120)} (esc clears it)."
