"""2 Calls: every call, filterable, a page at a time (keyset), updated in place."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import ClassVar, NamedTuple

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import Footer, Static

from console.core.bulk import Selected
from console.core.filters import JobFilter, grammar
from console.core.history import Archived
from console.core.models import JobSummary
from console.db import audit, bulk, reads
from console.db.connect import Conn
from console.operator.present.audit import archived_answer, left_out
from console.operator.tui.failures import describe_failure
from console.operator.tui.screens.base import page_bindings
from console.operator.tui.screens.calllist import PAST_POLL_SECONDS, CallListScreen
from console.operator.tui.widgets.calltable import CallTable
from console.operator.tui.widgets.filterbar import FilterBar, FilterLine
from console.operator.tui.widgets.livetable import Column
from console.operator.tui.widgets.status import TopChrome
from console.shared.errors import PayloadSearchTimedOut, PermissionDenied
from console.shared.text import counted, sanitize
from console.shared.times import Instant, parse_past

PAGE = 500  # the table never holds more than a page (~1,000 rows at most)
# `*` marks at most this many calls (ids held by the console, read again by the dialog); more is
# for `leasectl cancel|mark-terminal|approve-retry --where`, whose operation holds up to 1,000,000
MARK_LIMIT = 100_000

# the call, its lease health, its lease and its heartbeat never give way (README, "The console"): at
# 80 columns they and the state fit; the tool is the first of the others to stay
COLUMNS = [
    Column("id", "call", 8, 0), Column("state", "state", 16, 0), Column("health", "lease health", 18, 0),
    Column("lease", "lease left", 14, 0), Column("tool", "tool", 16, 1), Column("heartbeat", "beat", 6, 0),
    Column("owner", "owner", 11, 3), Column("token", "tok", 3, 4), Column("attempt", "try", 3, 5),
    Column("key", "idempotency key", 22, 6),
]


class CallsRequest(NamedTuple):
    """What one fetch of the Calls screen asks for: taken on the UI thread, read on the fetch's."""

    where: JobFilter
    before: tuple[datetime, uuid.UUID] | None
    as_of: Instant | None


class CallsPage(NamedTuple):
    rows: list[JobSummary]
    db_now: datetime
    as_of: Instant | None  # the instant an age (at:2h) resolved to, for the UI thread to keep
    archived: Text | None = None  # archived history: why the past is not shown, or what it leaves out
    refused: bool = False  # the past asked for rests on archived history: nothing shown
    # a payload: search that gave no answer (out of statement time, or a role that may not read payloads):
    # said where the list would be -- the filter's answer is unknown, never shown as "no calls"
    unanswered: str | None = None


class CallsScreen(CallListScreen):
    """All calls, filterable, paged"""

    CSS_PATH = "calls.tcss"
    AUTO_FOCUS = "#calls"
    BINDINGS: ClassVar[list[BindingType]] = page_bindings("calls")

    def __init__(self, where: JobFilter | None = None) -> None:
        super().__init__()
        self.where = where or JobFilter()
        self.cursors: list[tuple[datetime, uuid.UUID] | None] = [None]  # page starts, for going back
        self.rows: list[JobSummary] = []
        self.as_of: Instant | None = None

    def compose(self) -> ComposeResult:
        yield TopChrome()
        yield FilterBar(placeholder=grammar())
        yield FilterLine()
        yield CallTable(COLUMNS, id="calls", markable=True)
        yield Static(id="calls-unanswered")
        yield Static(id="marks", classes="marks")
        yield Footer()

    def request(self) -> CallsRequest:
        return CallsRequest(self.where, self.cursors[-1], self.as_of)

    def load_request(self, conn: Conn, request: CallsRequest) -> CallsPage:
        where, before, as_of = request
        if where.at is not None:  # the past: rebuilt from the history, not the current rows
            now = reads.db_info(conn).db_now
            # an age (at:2h) is resolved once, the first time the filter is read: T stays put
            as_of = as_of or parse_past(where.at, now=now, what="at:")
            try:
                start = audit.past_start(conn, as_of.at)
                past = audit.jobs_at(conn, as_of.at, where.now(), limit=PAGE, before=before, start=start)
            except Archived as exc:  # said on the screen, never a partial past, never a failed refresh
                return CallsPage([], now, as_of, archived=archived_answer(exc), refused=True)
            return CallsPage(list(past), now, as_of, archived=left_out(start))
        try:
            rows = reads.jobs(conn, where, before=before, limit=PAGE)
        except (PayloadSearchTimedOut, PermissionDenied) as exc:
            if where.payload is None:
                raise
            # the filter's own answer, not the database's health: the screen says it, the session stays fresh
            said = str(exc) + (f" ({exc.hint})" if exc.hint else "")
            return CallsPage([], reads.db_info(conn).db_now, None, unanswered=said)
        return CallsPage(rows, rows[0].db_now if rows else reads.db_info(conn).db_now, None)

    def db_now_of(self, data: CallsPage) -> datetime:
        return data.db_now

    def show(self, data: CallsPage) -> None:
        self.rows, db_now = data.rows, data.db_now
        self.note_archived(data.archived, refused=data.refused)
        if data.as_of is not None:
            self.as_of = data.as_of
        # in the past every age is measured at that instant, not now
        moment = self.as_of.at if self.where.at is not None and self.as_of else (self.now() or db_now)
        self.sync_table(self.rows, moment)
        unanswered = self.query_one("#calls-unanswered", Static)
        unanswered.display = data.unanswered is not None
        self.table.display = data.unanswered is None
        if data.unanswered is not None:
            unanswered.update(Text(sanitize(data.unanswered, max_chars=600), style="bold yellow"))
            # asked again now and then, not at every poll: a search that ran out of time would only
            # run out of time again, at the database's cost, until the filter is narrowed
            self.poll_seconds = PAST_POLL_SECONDS
        elif self.where.at is None:
            self.poll_seconds = None
        self.show_filter_line()

    def as_of_words(self) -> str:
        return self.as_of.describe() if self.as_of else (self.where.at or "")

    def tick(self, now: datetime) -> None:
        if self.where.at is None:  # the past does not tick
            super().tick(now)

    def show_filter_line(self, *, matched: int | None = None, total: int | None = None) -> None:
        page = Text()
        page.append(f"page {len(self.cursors)}", style="bold")
        page.append(f" · {counted(len(self.rows), 'call')}" + (" (more: ])" if len(self.rows) == PAGE else "")
                    + " · newest first")
        self.query_one(FilterLine).show_filter(self.where.describe(), lead=self.past_words(), extra=Text.assemble(
            page, "  ", self.past_tail() or self.moved_note or ""))

    def filter_changed(self) -> None:
        self.cursors = [None]
        self.as_of = None
        self.poll_seconds = PAST_POLL_SECONDS if self.where.at is not None else None
        self.show_filter_line()
        self.refetch()

    # ------------------------------------------------------------------ marks
    def action_mark_all(self) -> None:
        """Every call the filter matches, on every page (up to the bulk limit), read off the UI thread."""
        if self.where.at is not None:
            self.app.notify("The past (at:) cannot be acted on: clear at: first.", title="The past")
            return
        # over bulk.LIMIT the action the marks lead to is a bulk operation (the dialog says so and
        # asks the same); the console marks up to MARK_LIMIT, the CLI's --where takes any number
        self.aside.read("mark-all", lambda conn: bulk.selection(conn, where=self.where, limit=MARK_LIMIT),
                        self._marked, self._not_marked)

    def _marked(self, matching: list[Selected] | None) -> None:
        matching = matching or []
        self.table.set_marks({str(c.id) for c in matching})
        self.show_marks()
        over = (f" Over {bulk.LIMIT:,}, an action on them is a bulk operation, worked in batches in the background "
                "(0 shows its progress).") if len(matching) > bulk.LIMIT else ""
        self.app.notify(f"Marked {counted(len(matching), 'call')} matching {self.where.describe() or 'no filter'} "
                        f"(every page).{over}", title="Marked")

    def _not_marked(self, error: BaseException | None) -> None:
        self.app.notify(describe_failure(error, "marking"), title="Not marked", severity="error")

    # ------------------------------------------------------------------ paging
    def action_next_page(self) -> None:
        if len(self.rows) < PAGE:
            self.app.notify("This is the oldest page.")
            return
        last = self.rows[-1]
        self.cursors.append((last.created_at, last.id))
        self.refetch()

