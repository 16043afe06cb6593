"""2 Calls: every call, filterable, a page at a time (keyset), updated in place."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Static

from console.db import reads
from console.db.connect import Conn
from console.operator.tui.screens.calllist import CallListScreen
from console.operator.tui.widgets.calltable import CallTable
from console.operator.tui.widgets.filterbar import FilterBar
from console.operator.tui.widgets.status import TopChrome
from console.shared.errors import BadInput
from console.shared.models import JobSummary

PAGE = 500  # the table never holds more than a page (~1,000 rows at most)

COLUMNS = [
    ("id", "call", 8), ("tool", "tool", 16), ("state", "state", 16), ("owner", "owner", 11),
    ("token", "tok", 3), ("attempt", "try", 3), ("heartbeat", "beat", 6), ("lease", "lease left", 14),
    ("health", "lease health", 18), ("key", "idempotency key", 22),
]


class CallsScreen(CallListScreen):
    CSS_PATH = "calls.tcss"
    AUTO_FOCUS = "#calls"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_call", "Open", tooltip="Everything about the selected call"),
        Binding("slash", "filter", "Filter", tooltip="state: tool: owner: agent: key: id: health:"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("right_square_bracket", "next_page", "Older", tooltip="Next page (older calls)"),
        Binding("left_square_bracket", "previous_page", "Newer", tooltip="Previous page (newer calls)"),
        Binding("home", "first_page", "Newest", show=False, tooltip="Back to the newest calls"),
        Binding("c", "cancel_call", "Cancel", tooltip="Request a cancel of the selected call"),
        Binding("t", "mark_terminal", "Mark terminal", tooltip="Close the call after checking outside"),
        Binding("a", "approve_retry", "Approve retry", tooltip="Outcome unknown: allow one more attempt"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.where = reads.JobFilter()
        self.filter_text = ""
        self.cursors: list[tuple[datetime, uuid.UUID] | None] = [None]  # page starts, for going back
        self.rows: list[JobSummary] = []

    def compose(self) -> ComposeResult:
        yield TopChrome()
        yield FilterBar(placeholder="state:running tool:web_search owner:w-3 agent:a-1 key:report:42: id:8f1b "
                                    "health:zombie — enter to apply, esc to close")
        yield Static(id="calls-info")
        yield CallTable(COLUMNS, id="calls")
        yield Footer()

    def load(self, conn: Conn) -> tuple[list[JobSummary], datetime]:
        rows = reads.jobs(conn, self.where, before=self.cursors[-1], limit=PAGE)
        return rows, rows[0].db_now if rows else reads.db_info(conn).db_now

    def db_now_of(self, data: tuple[list[JobSummary], datetime]) -> datetime:
        return data[1]

    def show(self, data: tuple[list[JobSummary], datetime]) -> None:
        self.rows, db_now = data
        self.query_one(CallTable).sync(self.rows, self.lapp.db_time() or db_now)
        self._info()

    def _info(self) -> None:
        page = len(self.cursors)
        text = Text(no_wrap=True)
        text.append(f"page {page}", style="bold")
        text.append(f" · {len(self.rows)} calls" + (" (more: ])" if len(self.rows) == PAGE else ""))
        text.append(" · newest first")
        if self.filter_text:
            text.append(" · filter ")
            text.append(self.filter_text, style="bold yellow")
            text.append(" (esc clears)")
        else:
            text.append(" · / to filter")
        self.query_one("#calls-info", Static).update(text)

    # ------------------------------------------------------------------ paging and filter
    def action_next_page(self) -> None:
        if len(self.rows) < PAGE:
            self.app.notify("This is the oldest page.")
            return
        last = self.rows[-1]
        self.cursors.append((last.created_at, last.id))
        self.fetch()

    def action_previous_page(self) -> None:
        if len(self.cursors) == 1:
            self.app.notify("This is the newest page.")
            return
        self.cursors.pop()
        self.fetch()

    def action_first_page(self) -> None:
        self.cursors = [None]
        self.fetch()

    def action_filter(self) -> None:
        self.query_one(FilterBar).open(self.filter_text)

    def action_clear_filter(self) -> None:
        if self.filter_text:
            self._apply("")

    def on_filter_bar_applied(self, message: FilterBar.Applied) -> None:
        self._apply(message.value)
        self.query_one(CallTable).focus()

    def _apply(self, text: str) -> None:
        try:
            where = reads.parse_filter(text)
        except BadInput as exc:
            self.app.notify(str(exc), title="Bad filter", severity="error")
            return
        self.where = where
        self.filter_text = where.describe()
        self.cursors = [None]
        self._info()
        self.fetch()
