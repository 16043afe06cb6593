"""3 Approvals: calls whose outcome is unknown, grouped by side-effect class, each with what
may already have happened. The approver decides: approve a retry, or mark it terminal after
checking outside. A call's executor can never approve its own retry (the database refuses)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Label, Static

from console.core.filters import JobFilter, grammar, memory_filter
from console.core.models import ApprovalQueue, ApprovalRow, JobSummary
from console.db import reads
from console.db.connect import Conn
from console.operator.present.calls import label_grid, service_check
from console.operator.present.words import clock
from console.operator.tui.cells import Cell
from console.operator.tui.screens.base import CALL_ACTION_BINDINGS, CLEAR_FILTER_BINDING, PollingScreen
from console.operator.tui.screens.calllist import call_commands
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.filterbar import FilterBar, FilterLine
from console.operator.tui.widgets.livetable import Column, LiveTable, keyed_rows
from console.operator.tui.widgets.status import TopChrome
from console.shared.text import counted, format_seconds, sanitize

GROUPS = (
    ("mutating_unverifiable", "UNVERIFIABLE side effects — nobody can check; only a human decides"),
    ("mutating_verifiable", "Verifiable side effects — check the operation's status, then decide"),
    ("read_only", "Read-only"),
)
COLUMNS = [Column("id", "call", 8, 0), Column("tool", "tool", 16, 0), Column("waiting", "waiting", 7, 0),
           Column("key", "idempotency key", 22, 1), Column("request", "ext. request", 12, 2),
           Column("owner", "last owner", 11, 3)]


class ApprovalsScreen(PollingScreen):
    """Outcome unknown: a human decides"""

    CSS_PATH = "approvals.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_call", "Open", tooltip="Everything about the selected call"),
        *CALL_ACTION_BINDINGS,
        CLEAR_FILTER_BINDING,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[ApprovalRow] = []
        self.jobs: dict[str, JobSummary] = {}
        self.filter_value = JobFilter()
        self.queue: ApprovalQueue | None = None

    def compose(self) -> ComposeResult:
        yield TopChrome()
        yield FilterBar(placeholder=grammar())
        yield FilterLine()
        with Horizontal(id="approvals-body"):
            with Vertical(id="queues"):
                for side_effect, title in GROUPS:
                    yield Label(title, id=f"title-{side_effect}", classes="group-title")
                    yield LiveTable(COLUMNS, id=f"group-{side_effect}")
                yield Static("No call is waiting for a human.", id="none-waiting")
            with VerticalScroll(id="what-happened-pane"):
                yield Static(id="what-happened")
        yield Footer()

    def load(self, conn: Conn) -> ApprovalQueue:
        return reads.approval_queue(conn)

    def db_now_of(self, data: ApprovalQueue) -> datetime:
        return data.db_now

    def show(self, data: ApprovalQueue) -> None:
        self.queue = data
        self.jobs = data.calls
        self.rows = [r for r in data.rows if (job := data.calls.get(str(r.id))) is None or self.where.matches(job)]
        now = self.now() or data.db_now
        for side_effect, _title in GROUPS:
            table = self.query_one(f"#group-{side_effect}", LiveTable)
            group = [r for r in self.rows if r.side_effect == side_effect]
            keyed_rows(table, [(str(r.id), self._cells(r, now)) for r in group])
            table.display = bool(group)
            self.query_one(f"#title-{side_effect}", Label).display = bool(group)
        waiting = self.query_one("#none-waiting", Static)
        waiting.display = not self.rows
        if not self.rows and data.rows:
            waiting.update(Text(f"{counted(len(data.rows), 'call')} waiting, none matching the filter "
                                f"{sanitize(self.where.describe(), max_chars=100)} (esc clears it).",
                                style="bold yellow"))
        elif not self.rows:
            waiting.update("No call is waiting for a human.")
        self.query_one(FilterLine).show_filter(self.where.describe(), matched=len(self.rows), total=len(data.rows))
        self._explain()

    @staticmethod
    def _cells(r: ApprovalRow, now: datetime) -> dict[str, Cell]:
        waiting = (now - r.outcome_unknown_at).total_seconds() if r.outcome_unknown_at else None
        return {"id": Cell(r.short_id, "bold"), "tool": Cell(r.tool), "key": Cell(r.idempotency_key),
                "request": Cell(r.external_request_id or "—"), "owner": Cell(r.owner_id or "—"),
                "waiting": Cell(format_seconds(waiting))}

    def tick(self, now: datetime) -> None:
        for side_effect, _title in GROUPS:
            table = self.query_one(f"#group-{side_effect}", LiveTable)
            for r in self.rows:
                if r.side_effect == side_effect:
                    table.update_cells(str(r.id), {"waiting": self._cells(r, now)["waiting"]})

    # ------------------------------------------------------------------ selection
    def _focused_row(self) -> ApprovalRow | None:
        focused = self.focused if isinstance(self.focused, LiveTable) else None
        tables = [focused] if focused else [self.query_one(f"#group-{s}", LiveTable) for s, _ in GROUPS]
        for table in tables:
            key = table.cursor_key if table.display else None
            if key:
                return next((r for r in self.rows if str(r.id) == key), None)
        return None

    def selected_job(self) -> JobSummary | None:
        row = self._focused_row()
        return self.jobs.get(str(row.id)) if row else None

    def commands(self) -> Iterable[SystemCommand]:
        yield from call_commands(self, self.selected_job())

    def on_live_table_row_highlighted(self, event: LiveTable.RowHighlighted) -> None:
        self._explain()

    def on_descendant_focus(self) -> None:
        self._explain()

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_call()

    def action_open_call(self) -> None:
        row = self._focused_row()
        if row is not None:
            self.app.push_screen(DetailScreen(row.id))

    # ------------------------------------------------------------------ the filter
    @property
    def where(self) -> JobFilter:
        return self.filter_value

    def parse_filter_text(self, text: str) -> JobFilter:
        return memory_filter(text, "Approvals")  # filtered in memory: payload: is refused, said where to search

    def filter_changed(self) -> None:
        if self.queue:
            self.show(self.queue)

    # ------------------------------------------------------------------ what may already have happened
    def _explain(self) -> None:
        self.describe_selected("#what-happened", self._focused_row(),
                               "Select a call to see what may already have happened.", self._what_happened)

    @staticmethod
    def _what_happened(row: ApprovalRow) -> Group:
        grid = label_grid()

        def line(label: str, value: str, style: str = "") -> None:
            grid.add_row(Text(label), Text(sanitize(value, max_chars=1_000), style=style))  # wraps: nothing hidden

        line("tool", row.tool, "bold")
        line("side effect", row.side_effect.replace("_", " "), "bold magenta")
        line("idempotency key", row.idempotency_key)
        line("external request", row.external_request_id or "— (none recorded)", "bold yellow")
        line("side effect started", clock(row.side_effect_started_at))
        line("last confirmed lease", clock(row.last_confirmed_lease))
        line("outcome unknown since", clock(row.outcome_unknown_at))
        line("attempts", f"{row.attempt} of {row.max_attempts}")
        line("last owner", f"{row.owner_id or '—'} (may not approve)")
        line("agent", f"{row.agent_id or '—'} (may not approve)")
        line("session / model", f"{row.session_id or '—'} / {row.model or '—'}")
        line("error", json.dumps(row.error, ensure_ascii=False) if row.error else "—", "red")
        line("same key stem", f"{counted(row.related_calls, 'other call')}; enter shows them")
        if row.side_effect == "mutating_verifiable":
            if not row.checks:
                line("checked with the service", "never: nobody asked it before this call stopped", "yellow")
            for n, check in enumerate(row.checks):
                said, details = service_check(check)
                line("checked with the service" if n == 0 else "", said, "bold" if check.found == "unknown" else "")
                if details:
                    line("", f"it said: {details}")
        advice = ("Nobody can ask this receiver what happened. Approve a retry only if you have checked "
                  "outside that the first request did NOT take effect; otherwise mark it succeeded or failed."
                  if row.side_effect == "mutating_unverifiable" else
                  "Check the operation's status with the receiver under the idempotency key, then decide.")
        title = Text(f"What may already have happened (times UTC)\ncall {row.id}\n", style="bold")
        return Group(title, grid, Text(""), Text(advice, style="italic"))
