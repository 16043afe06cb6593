"""3 Approvals: calls whose outcome is unknown, grouped by side-effect class, each with what
may already have happened. The approver decides: approve a retry, or mark it terminal after
checking outside. A call's executor can never approve its own retry (the database refuses)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Label, Static

from console.db import reads
from console.db.connect import Conn
from console.operator.tui.cells import plain, selected_row_key
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.status import TopChrome
from console.shared.health import counted, format_seconds
from console.shared.models import ApprovalQueue, ApprovalRow, JobSummary
from console.shared.text import sanitize

GROUPS = (
    ("mutating_unverifiable", "UNVERIFIABLE side effects — nobody can check; only a human decides"),
    ("mutating_verifiable", "Verifiable side effects — check the operation's status, then decide"),
    ("read_only", "Read-only"),
)


class ApprovalsScreen(PollingScreen):
    CSS_PATH = "approvals.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "approve_retry", "Approve retry", tooltip="Allow one more attempt (reason required)"),
        Binding("t", "mark_terminal", "Mark terminal", tooltip="Succeeded or failed, after checking outside"),
        Binding("enter", "open_call", "Open", tooltip="Everything about the selected call"),
        Binding("c", "cancel_call", "Cancel", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[ApprovalRow] = []
        self.jobs: dict[str, JobSummary] = {}

    def compose(self) -> ComposeResult:
        yield TopChrome()
        with Horizontal(id="approvals-body"):
            with Vertical(id="queues"):
                for side_effect, title in GROUPS:
                    yield Label(title, id=f"title-{side_effect}", classes="group-title")
                    table: DataTable[Text] = DataTable(id=f"group-{side_effect}", cursor_type="row",
                                                       zebra_stripes=True)
                    yield table
                yield Static("No call is waiting for a human.", id="none-waiting")
            with VerticalScroll(id="what-happened-pane"):
                yield Static(id="what-happened")
        yield Footer()

    def on_mount(self) -> None:
        for side_effect, _title in GROUPS:
            table = self.query_one(f"#group-{side_effect}", DataTable)
            for key, label, width in (("id", "call", 8), ("tool", "tool", 16), ("key", "idempotency key", 22),
                                      ("request", "ext. request", 12), ("owner", "last owner", 11),
                                      ("waiting", "waiting", 7)):
                table.add_column(label, key=key, width=width)
        super().on_mount()

    def load(self, conn: Conn) -> ApprovalQueue:
        return reads.approval_queue(conn)

    def db_now_of(self, data: ApprovalQueue) -> datetime:
        return data.db_now

    def show(self, data: ApprovalQueue) -> None:
        self.rows, self.jobs, db_now = data.rows, data.calls, data.db_now
        now = self.lapp.db_time() or db_now
        for side_effect, _title in GROUPS:
            table = self.query_one(f"#group-{side_effect}", DataTable)
            group = [r for r in self.rows if r.side_effect == side_effect]
            selected = selected_row_key(table)
            table.clear()
            for r in group:
                waiting = (now - r.outcome_unknown_at).total_seconds() if r.outcome_unknown_at else None
                table.add_row(plain(r.short_id, "bold"), plain(r.tool), plain(r.idempotency_key),
                              plain(r.external_request_id or "—"), plain(r.owner_id or "—"),
                              plain(format_seconds(waiting)), key=str(r.id))
            if selected and selected in {str(r.id) for r in group}:
                table.move_cursor(row=table.get_row_index(selected), animate=False)
            table.display = bool(group)
            self.query_one(f"#title-{side_effect}", Label).display = bool(group)
        self.query_one("#none-waiting", Static).display = not self.rows
        self._explain()

    def _focused_row(self) -> ApprovalRow | None:
        focused = self.focused if isinstance(self.focused, DataTable) else None
        tables = [focused] if focused else [self.query_one(f"#group-{s}", DataTable) for s, _ in GROUPS]
        for table in tables:
            key = selected_row_key(table)
            if key:
                return next((r for r in self.rows if str(r.id) == key), None)
        return None

    def selected_job(self) -> JobSummary | None:
        row = self._focused_row()
        return self.jobs.get(str(row.id)) if row else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._explain()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_call()

    def action_open_call(self) -> None:
        row = self._focused_row()
        if row is not None:
            self.app.push_screen(DetailScreen(row.id))

    def _explain(self) -> None:
        row = self._focused_row()
        pane = self.query_one("#what-happened", Static)
        if row is None:
            pane.update(Text("Select a call to see what may already have happened.", style="dim"))
            return
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column()

        def line(label: str, value: str, style: str = "") -> None:
            grid.add_row(Text(label), Text(sanitize(value), style=style))  # wraps: nothing hidden

        line("tool", row.tool, "bold")
        line("side effect", row.side_effect.replace("_", " "), "bold magenta")
        line("idempotency key", row.idempotency_key)
        line("external request", row.external_request_id or "— (none recorded)", "bold yellow")
        line("side effect started", row.side_effect_started_at.strftime("%H:%M:%S") if row.side_effect_started_at
             else "—")
        line("last confirmed lease", row.last_confirmed_lease.strftime("%H:%M:%S") if row.last_confirmed_lease
             else "—")
        line("outcome unknown since", row.outcome_unknown_at.strftime("%H:%M:%S") if row.outcome_unknown_at
             else "—")
        line("attempts", f"{row.attempt} of {row.max_attempts}")
        line("last owner", f"{row.owner_id or '—'} (may not approve)")
        line("agent", f"{row.agent_id or '—'} (may not approve)")
        line("session / model", f"{row.session_id or '—'} / {row.model or '—'}")
        line("error", sanitize(json.dumps(row.error, ensure_ascii=False)) if row.error else "—", "red")
        line("same key stem", f"{counted(row.related_calls, 'other call')}; enter shows them")
        advice = ("Nobody can ask this receiver what happened. Approve a retry only if you have checked "
                  "outside that the first request did NOT take effect; otherwise mark it succeeded or failed."
                  if row.side_effect == "mutating_unverifiable" else
                  "Check the operation's status with the receiver under the idempotency key, then decide.")
        title = Text(f"What may already have happened\ncall {row.id}\n", style="bold")
        pane.update(Group(title, grid, Text(""), Text(advice, style="italic")))
