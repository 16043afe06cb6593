"""Bulk operations (`0` anywhere in the console): every bulk action over more than 1,000 calls, or
started with --background (migration 0023), the running and stopping ones first, then the newest.
Each line says its state and how far it got; the pane beside says everything about the selected one;
`enter` opens its progress (console/operator/tui/screens/bulk.py: BulkOperationScreen), `s` stops it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer

from console.core.bulk import BulkOperation
from console.db import bulk, reads
from console.db.connect import Conn
from console.operator.present import bulk as words
from console.operator.tui.cells import Cell
from console.operator.tui.screens.base import BACK_BINDING, FieldListScreen
from console.operator.tui.screens.bulk import BulkOperationScreen, ask_to_stop
from console.operator.tui.widgets.livetable import Column, LiveTable

OPERATION_KEYS = {"state": "running, stopping, stopped or finished", "action": "cancel, mark_terminal, approve_retry",
                  "operator": "who started it"}
OPERATION_COLUMNS = [Column("operation", "id", 8, 0), Column("state", "state", 9, 0),
                     Column("done", "done", 13, 0), Column("refused", "refused", 7, 1),
                     Column("failed", "failed", 6, 2),
                     Column("action", "action", 14, 1), Column("operator", "by", 12, 3),
                     Column("started", "started (UTC)", 14, 4)]


def _cells(op: BulkOperation) -> dict[str, Cell]:
    return {"operation": Cell(op.short_id, "bold"), "state": Cell(op.state, words.OPERATION_STYLES.get(op.state, "")),
            "done": Cell(f"{op.done:,}/{op.total:,}"), "refused": Cell(f"{op.refused:,}", "red" if op.refused else ""),
            "failed": Cell(f"{op.failed:,}", "yellow" if op.failed else ""), "action": Cell(op.action),
            "operator": Cell(op.operator), "started": Cell(op.created_at.astimezone(UTC).strftime("%m-%d %H:%M:%S"))}


class BulkOperationsScreen(FieldListScreen[BulkOperation]):
    """Bulk operations: their progress; open one, or stop it"""

    CSS_PATH = "operations.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        BACK_BINDING,
        Binding("enter", "open_operation", "Progress", tooltip="The selected operation's progress and the calls it "
                                                               "did not apply"),
        Binding("s", "stop_operation", "Stop", tooltip="Stop the selected operation (a reason is journaled)"),
    ]
    FILTER_KEYS = OPERATION_KEYS
    poll_seconds = 2.0
    crumb = "bulk operations"

    def compose(self) -> ComposeResult:
        yield from self.filter_chrome("/ filters operations (state: action: operator:)")
        yield from self.list_beside_pane("operations", "Bulk operations — running first, then the newest",
                                         OPERATION_COLUMNS,
                                         "No bulk operation yet: a bulk action over more than 1,000 calls (or "
                                         "`leasectl cancel --where F --background`) starts one.")
        yield Footer()

    def load(self, conn: Conn) -> tuple[list[BulkOperation], datetime]:
        found = bulk.operations(conn, limit=200)
        return found, (found[0].db_now if found and found[0].db_now else reads.db_info(conn).db_now)

    def db_now_of(self, data: tuple[list[BulkOperation], datetime]) -> datetime:
        return data[1]

    def show(self, data: tuple[list[BulkOperation], datetime]) -> None:
        self.show_list(data[0], "operations", lambda op: str(op.id), _cells, "operation")
        self._preview()

    def matches(self, row: BulkOperation) -> bool:
        return self.filter_value.matches({"agent": row.operator, "state": row.state, "action": row.action,
                                          "operator": row.operator})

    def filter_changed(self) -> None:
        self.show((self.every, self.db_now or datetime.now().astimezone()))

    def selected_operation(self) -> BulkOperation | None:
        return self.query_one("#operations", LiveTable).cursor_item(self.shown, lambda op: str(op.id))

    def on_live_table_row_highlighted(self, event: LiveTable.RowHighlighted) -> None:
        self._preview()

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_operation()

    def _preview(self) -> None:
        self.describe_selected("#operations-detail", self.selected_operation(), "Select an operation.",
                               lambda op: Group(words.operation_panel(op, bar_width=40),
                                                Text("\nenter: its progress and the calls not applied"
                                                     + ("" if self.leasectl.session.read_only_reason else " · s: stop"),
                                                     style="dim")))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_operation" and self.leasectl.session.read_only_reason:
            return False  # a read-only console is offered no action
        return super().check_action(action, parameters)

    def action_open_operation(self) -> None:
        op = self.selected_operation()
        if not self.chosen(op, "an operation"):
            return
        self.app.push_screen(BulkOperationScreen(op.id))

    def action_stop_operation(self) -> None:
        ask_to_stop(self, self.selected_operation())
