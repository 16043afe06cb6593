"""A live screen whose body is a list of calls (Triage, Calls): its ages tick, its selection is the
call the actions act on, `enter` (or a second click) opens that call, and `/` filters it with the
one grammar (console.core.filters), the active filter always shown."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import ClassVar

from rich.text import Text
from textual.app import SystemCommand
from textual.binding import Binding, BindingType
from textual.widgets import Static

from console.core.actions import ACTIONS
from console.core.bulk import BulkResult
from console.core.filters import JobFilter, parse_filter
from console.core.models import JobSummary
from console.operator.present import words_of
from console.operator.tui.screens.base import CALL_ACTION_BINDINGS, PollingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.calltable import CallTable
from console.operator.tui.widgets.filterbar import FilterLine
from console.operator.tui.widgets.livetable import LiveTable
from console.shared.text import sanitize
from console.shared.times import parse_past


def call_commands(screen: PollingScreen, job: JobSummary | None) -> Iterable[SystemCommand]:
    """The palette's entries for the selected call: the actions of console.core.actions.ACTIONS,
    as their keys (c, t, a) offer them: none on a read-only session, as the keys are not offered."""
    if job is None or not screen.check_action("act", ()):
        return
    for spec in ACTIONS.values():
        words = words_of(spec.name)
        yield SystemCommand(words.palette.format(id=job.short_id), f"{words.palette_help} ({spec.binding})",
                            functools.partial(screen.action_act, spec.name))


# the past does not change: rebuilt again now and then (a later event can tell its lease), not every poll
PAST_POLL_SECONDS = 30.0

class CallListScreen(PollingScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_call", "Open", tooltip="Everything about the selected call"),
        *CALL_ACTION_BINDINGS,
        Binding("space", "toggle_mark", "Mark", tooltip="Mark or unmark the selected call (c t a then act on "
                                                        "every marked call)"),
        Binding("asterisk", "mark_all", "Mark all", tooltip="Mark every call the filter matches (all pages, up "
                                                            "to 100,000; over 1,000 an action is a bulk operation)"),
        Binding("u", "unmark_all", "Unmark", show=False, tooltip="Unmark every call"),
        Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="Clear the active filter"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.moved_note: Text | None = None
        self._where: JobFilter = JobFilter()
        self._refiltered: bool = True

    @property
    def table(self) -> CallTable:
        return self.query_one(CallTable)

    def tick(self, now: datetime) -> None:
        self.table.tick(now)

    def selected_job(self) -> JobSummary | None:
        return self.table.selected

    def commands(self) -> Iterable[SystemCommand]:
        yield from call_commands(self, self.selected_job())

    # ------------------------------------------------------------------ marks (bulk actions)
    @property
    def marked(self) -> set[str]:
        return self.table.marked

    def action_toggle_mark(self) -> None:
        self.table.toggle_mark()
        self.show_marks()

    def action_unmark_all(self) -> None:
        self.table.set_marks(set())
        self.show_marks()

    def action_mark_all(self) -> None:
        """Every call the filter matches: the calls on screen here (Calls reads all its pages)."""
        self.table.set_marks(set(self.table.row_keys))
        self.show_marks()

    def show_marks(self) -> None:
        line = self.query_one("#marks", Static)
        n = len(self.marked)
        line.display = n > 0
        if n:
            text = Text()
            text.append(f" ● {n} marked ", style="bold black on yellow")
            text.append("  c t a act on every marked call (one dialog, the count typed to confirm) · space toggles · "
                        "* marks all matching · u unmarks", style="bold")
            line.update(text)

    def past_words(self) -> Text | None:
        """With at:, the screen shows the past: said plainly and loud, first on the filter line, with
        the instant (the rest of the line can be cut off on a narrow terminal)."""
        if self.where.at is None:
            return None
        text = Text()
        text.append(" THE PAST ", style="bold white on magenta")
        if self.archived_refused:  # loud and first: the line's end may be cut off on a narrow terminal
            text.append(" ARCHIVED ", style="bold black on yellow")
        text.append(f" as it was at {self.as_of_words()}", style="bold magenta")
        return text

    # with at: once history was archived: why the past is not shown (ARCHIVED), or what it leaves out
    archived_note: Text | None = None
    archived_refused = False

    def note_archived(self, note: Text | None, *, refused: bool) -> None:
        """Keep what the archive means for the past shown; it is also told once in full, when it
        changes (the end of the filter line may be cut off on a narrow terminal)."""
        if note is not None and (note != self.archived_note or refused != self.archived_refused):
            self.app.notify(note.plain, title="Archived history", severity="warning" if refused else "information",
                            timeout=12)
        self.archived_note, self.archived_refused = note, refused

    def past_tail(self) -> Text | None:
        if self.where.at is None:
            return None
        if self.archived_note is not None:
            return self.archived_note
        return Text("rebuilt from the history, not live · actions act on now (esc clears at:)", style="magenta")

    def as_of_words(self) -> str:
        return self.where.at or ""

    def _open_action(self, action: str) -> None:
        if self.where.at is not None:
            self.app.notify("This screen shows the past (at:). An action acts on what is true now: clear at: "
                            "first (esc), then act.", title="The past", severity="warning")
            return
        if not self.marked:
            super()._open_action(action)
            return
        if not self.actions_allowed():
            return
        from console.operator.tui.screens.bulk import BulkDialog

        ids = [uuid.UUID(key) for key in sorted(self.marked)]
        self.app.push_screen(BulkDialog(action, ids, seen_at=self.fetched_at), self._bulk_done)

    def _bulk_done(self, result: object) -> None:
        if isinstance(result, BulkResult):
            # only what was not applied stays marked: a second look is one key away
            self.table.set_marks({str(o.job_id) for o in result.not_applied()})
            self.show_marks()
        self.wake()

    def sync_table(self, rows: list[JobSummary], now: datetime) -> None:
        left = self.table.sync(rows, now)
        refiltered = self._refiltered
        self._refiltered = False
        if left is not None and not refiltered:  # a new filter moves the cursor by itself: no news
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
    def filter_value(self) -> JobFilter:
        return self._where

    @filter_value.setter
    def filter_value(self, value: JobFilter) -> None:
        # a new filter moves the cursor by itself: that is no news to report
        self._where = value
        self._refiltered = True
        self.moved_note = None

    where = filter_value  # the calls' filter by the name the Calls screen's code uses

    def parse_filter_text(self, text: str) -> JobFilter:
        parsed = parse_filter(text)
        now = self.now()
        if parsed.at is not None and now is not None:
            parse_past(parsed.at, now=now, what="at:")  # the future refused here, while the bar is open
        return parsed

    def filter_applied(self) -> None:
        self.table.focus()

    def show_filter_line(self, *, matched: int | None = None, total: int | None = None) -> None:
        self.query_one(FilterLine).show_filter(self.where.describe(), matched=matched, total=total,
                                               lead=self.past_words(), extra=self.past_tail() or self.moved_note)


def no_match_words(where: JobFilter) -> str:
    return f"Nothing here matches the filter {sanitize(where.describe(), max_chars=120)} (esc clears it)."
