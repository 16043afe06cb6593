"""1 Triage: what is wrong now, and where. Opens first."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Static

from console.db import reads
from console.db.connect import Conn
from console.operator.tui.cells import plain
from console.operator.tui.screens.calllist import CallListScreen
from console.operator.tui.widgets.calltable import CallTable
from console.operator.tui.widgets.counts import CountsStrip
from console.operator.tui.widgets.filterbar import FilterBar
from console.operator.tui.widgets.status import TopChrome
from console.shared.models import JobSummary, TriageSnapshot

COLUMNS = [
    ("id", "call", 8), ("tool", "tool", 16), ("class", "side effect", 12), ("state", "state", 16),
    ("owner", "owner", 11), ("token", "tok", 3), ("attempt", "try", 3), ("heartbeat", "beat", 6),
    ("lease", "lease left", 14), ("deadline", "deadline", 9), ("health", "lease health", 18),
]


class TriageScreen(CallListScreen):
    CSS_PATH = "triage.tcss"
    AUTO_FOCUS = "#attention"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_call", "Open", tooltip="Everything about the selected call"),
        Binding("c", "cancel_call", "Cancel", tooltip="Request a cancel of the selected call"),
        Binding("t", "mark_terminal", "Mark terminal", tooltip="Close the call after checking outside"),
        Binding("a", "approve_retry", "Approve retry", tooltip="Outcome unknown: allow one more attempt"),
        Binding("slash", "filter", "Filter", tooltip="Show only calls whose fields match"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: TriageSnapshot | None = None
        self.text_filter = ""

    def compose(self) -> ComposeResult:
        yield TopChrome()
        yield CountsStrip()
        yield FilterBar(placeholder="filter: any text in id, tool, state, owner, health — enter to apply")
        yield CallTable(COLUMNS, id="attention")
        yield Static(id="empty")
        yield Static(id="recent")
        yield Footer()

    def load(self, conn: Conn) -> TriageSnapshot:
        return reads.triage(conn)

    def db_now_of(self, data: TriageSnapshot) -> datetime:
        return data.counts.db_now

    def show(self, data: TriageSnapshot) -> None:
        self.snapshot = data
        self.query_one(CountsStrip).update_counts(data.counts)
        rows = [r for r in data.rows if self._matches(r)]
        table = self.query_one(CallTable)
        table.sync(rows, self.lapp.db_time() or data.counts.db_now)
        self.query_one("#recent", Static).update(self._recent(data))
        empty = self.query_one("#empty", Static)
        if rows:
            empty.display = False
        else:
            empty.display = True
            c = data.counts
            if self.text_filter and data.rows:
                empty.update(f"Nothing that needs attention matches '{self.text_filter}'.")
            else:
                empty.update(f"Nothing needs attention: {c.running} running calls have healthy leases, "
                             f"{c.queued} queued.")

    def _recent(self, data: TriageSnapshot) -> Table:
        table = Table(title="recently (10 min)", title_justify="left", title_style="bold", expand=True,
                      show_edge=False, show_header=False, box=None, padding=(0, 1))
        table.add_column(no_wrap=True, style="dim")
        table.add_column(no_wrap=True, style="bold")
        table.add_column(no_wrap=True)
        table.add_column(overflow="ellipsis", no_wrap=True)
        table.add_column(no_wrap=True, style="dim")
        for e in data.recent[:8]:
            style = "bold red" if "zombie" in e.what or "unknown" in e.what or "not applied" in e.what else (
                "yellow" if "despite" in e.what or "refused" in e.what or "failed" in e.what else "")
            table.add_row(plain(e.at.strftime("%H:%M:%S")), plain(str(e.job_id)[:8]), plain(e.tool),
                          plain(e.what, style), plain(e.actor or ""))
        if not data.recent:
            table.add_row("", "", "", plain("nothing notable", "dim"), "")
        return table

    def _matches(self, job: JobSummary) -> bool:
        if not self.text_filter:
            return True
        haystack = " ".join(str(v) for v in (job.id, job.tool, job.state, job.owner_id, job.health,
                                              job.agent_id, job.idempotency_key, job.side_effect))
        return all(word.lower() in haystack.lower() for word in self.text_filter.split())

    def action_filter(self) -> None:
        self.query_one(FilterBar).open(self.text_filter)

    def action_clear_filter(self) -> None:
        if self.text_filter:
            self.text_filter = ""
            if self.snapshot:
                self.show(self.snapshot)

    def on_filter_bar_applied(self, message: FilterBar.Applied) -> None:
        self.text_filter = message.value.strip()
        if self.snapshot:
            self.show(self.snapshot)
        self.query_one(CallTable).focus()
