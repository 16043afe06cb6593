"""5 Reconciliations: what the control plane wrote, from outside, before it called a subtree
terminated (docs/seeds.md §003). Newest first; opening one shows the unaccounted children first and
loudly, then every in-flight call and how it resolved (`enter` opens the call), then the grants
revoked vs. those that had already expired."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Label, Static

from console.core.filters import RECORD_KEYS
from console.core.models import ChildEntry, ReconciliationRecord
from console.db import reads
from console.db.connect import Conn
from console.operator.present.fleet import (
    ID_CHARS,
    RESOLUTION_MEANING,
    RESOLUTION_STYLE,
    call_meaning,
    grant_line,
    record_title,
    resolution_words,
    unaccounted_block,
)
from console.operator.present.words import when
from console.operator.tui.cells import Cell
from console.operator.tui.screens.base import BACK_BINDING, CLEAR_FILTER_BINDING, FieldListScreen, PollingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.livetable import Column, LiveTable, keyed_rows
from console.operator.tui.widgets.status import TopChrome
from console.shared.text import counted, sanitize

RECORD_COLUMNS = [Column("written", "written (UTC)", 19, 0), Column("shutdown", "shutdown of", 22, 0),
                  Column("unaccounted", "unaccounted", 13, 0), Column("calls", "calls", 5, 1),
                  Column("revoked", "revoked", 7, 2), Column("expired", "expired", 7, 3)]
IN_FLIGHT_COLUMNS = [Column("call", "call", 8, 0), Column("resolution", "resolution", 18, 0),
                     Column("tool", "tool", 18, 1), Column("agent", "agent", 14, 2), Column("token", "token", 5, 3),
                     Column("meaning", "what it means", 62, 4)]


def _record_cells(r: ReconciliationRecord) -> dict[str, Cell]:
    n = len(r.children_unaccounted)
    return {"written": Cell(r.written_at.strftime("%Y-%m-%d %H:%M:%S")),
            "shutdown": Cell(f"{r.mode} of {sanitize(r.root_agent_id, max_chars=40)}", "bold"),
            "unaccounted": Cell(f"{n} UNACCOUNTED", "bold red") if n else Cell("none", "green"),
            "calls": Cell(len(r.in_flight)), "revoked": Cell(len(r.grants_revoked)),
            "expired": Cell(len(r.grants_expired))}


class ReconciliationsScreen(FieldListScreen[ReconciliationRecord]):
    """What each shutdown left: unaccounted agents, every call, every grant"""

    CSS_PATH = "reconciliations.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_record", "Open", tooltip="The whole record: unaccounted first, then every call"),
        CLEAR_FILTER_BINDING,
    ]
    FILTER_KEYS = RECORD_KEYS

    def compose(self) -> ComposeResult:
        yield from self.filter_chrome("/ filters records (agent: mode: unaccounted:yes)")
        yield from self.list_beside_pane("records", "Reconciliation records — newest first", RECORD_COLUMNS,
                                         "No shutdown has been reconciled yet. Start one from the Fleet screen (4).")
        yield Footer()

    def load(self, conn: Conn) -> tuple[list[ReconciliationRecord], datetime]:
        records = reads.reconciliations(conn, limit=200)
        return records, (records[0].db_now if records and records[0].db_now else reads.db_info(conn).db_now)

    def db_now_of(self, data: tuple[list[ReconciliationRecord], datetime]) -> datetime:
        return data[1]

    def show(self, data: tuple[list[ReconciliationRecord], datetime]) -> None:
        self.show_list(data[0], "records", lambda r: str(r.id), _record_cells, "record")
        self._preview()

    def matches(self, row: ReconciliationRecord) -> bool:
        return self.filter_value.matches({"agent": row.root_agent_id, "mode": row.mode,
                                          "unaccounted": "yes" if row.children_unaccounted else "no"})

    def filter_changed(self) -> None:
        self.show((self.every, self.db_now or datetime.now().astimezone()))

    def selected_record(self) -> ReconciliationRecord | None:
        return self.query_one("#records", LiveTable).cursor_item(self.shown, lambda r: str(r.id))

    def on_live_table_row_highlighted(self, event: LiveTable.RowHighlighted) -> None:
        self._preview()

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_record()

    def _preview(self) -> None:
        self.describe_selected("#records-detail", self.selected_record(), "Select a record.", self._summary)

    @staticmethod
    def _summary(record: ReconciliationRecord) -> Group:
        counts: dict[str, int] = {}
        for call in record.in_flight:
            counts[call.resolution] = counts.get(call.resolution, 0) + 1
        resolved = Table.grid(padding=(0, 1))
        resolved.add_column(no_wrap=True)
        resolved.add_column()
        for resolution, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            resolved.add_row(Text(f"{n} {resolution.replace('_', ' ')}", style=RESOLUTION_STYLE.get(resolution, "")),
                             Text(RESOLUTION_MEANING.get(resolution, ""), style="dim"))
        head = Text()
        head.append(f"{record.mode} of {sanitize(record.root_agent_id, max_chars=ID_CHARS)}\n", style="bold")
        head.append(f"asked by {sanitize(record.requested_by, max_chars=ID_CHARS)}: "
                    f"{sanitize(record.reason, max_chars=300)}\n")
        head.append(f"written by {sanitize(record.written_by, max_chars=ID_CHARS)} at {when(record.written_at)}\n\n",
                    style="dim")
        tail = Text(f"\n{counted(len(record.grants_revoked), 'grant')} revoked, {len(record.grants_expired)} already "
                    f"expired; {counted(len(record.children_confirmed), 'agent')} confirmed.\nenter opens the record.",
                    style="dim")
        return Group(head, unaccounted_block(record), Text(""), resolved, tail)

    def action_open_record(self) -> None:
        record = self.selected_record()
        if not self.chosen(record, "a record"):
            return
        self.app.push_screen(RecordScreen(record.id))


class RecordScreen(PollingScreen):
    """One reconciliation record, whole. Append-only: nothing here changes, but calls it lists
    may still be acted on from their detail (`enter`)."""

    CSS_PATH = "reconciliations.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        BACK_BINDING,
        Binding("enter", "open_call", "Open call", tooltip="The selected in-flight call's detail"),
    ]
    poll_seconds = 30.0

    def __init__(self, record_id: uuid.UUID) -> None:
        super().__init__()
        self.record_id = record_id
        self.crumb = f"record {str(record_id)[:8]}"
        self.record: ReconciliationRecord | None = None

    def compose(self) -> ComposeResult:
        yield TopChrome()
        with VerticalScroll(id="record-body"):
            yield Static(id="record-head")
            yield Static(id="unaccounted")
            yield Label("In-flight calls and how each resolved", classes="section-title")
            yield LiveTable(IN_FLIGHT_COLUMNS, id="in-flight")
            yield Static(id="grants")
            yield Static(id="confirmed")
        yield Footer()

    def load(self, conn: Conn) -> tuple[ReconciliationRecord | None, datetime]:
        record = reads.reconciliation(conn, self.record_id)
        return record, (record.db_now if record and record.db_now else reads.db_info(conn).db_now)

    def db_now_of(self, data: tuple[ReconciliationRecord | None, datetime]) -> datetime:
        return data[1]

    def show(self, data: tuple[ReconciliationRecord | None, datetime]) -> None:
        record = self.record = data[0]
        head = self.query_one("#record-head", Static)
        if record is None:
            head.update(Text(f"No reconciliation record {self.record_id}.", style="bold red"))
            return
        head.update(record_title(record))
        self.query_one("#unaccounted", Static).update(unaccounted_block(record))
        rows = []
        for call in record.in_flight:
            extra = call.model_extra or {}
            words, style = resolution_words(call.resolution)
            rows.append((str(call.job_id), {
                "call": Cell(str(call.job_id)[:8], "bold"), "tool": Cell(call.tool),
                "agent": Cell(call.agent_id or "—"),
                "resolution": Cell(words, style), "token": Cell(extra.get("fencing_token", "")),
                "meaning": Cell(call_meaning(call), "dim")}))
        table = self.query_one("#in-flight", LiveTable)
        keyed_rows(table, rows)
        table.display = bool(record.in_flight)
        grants = Text()
        grants.append(f"\nGrants revoked ({len(record.grants_revoked)})\n", style="bold")
        for g in record.grants_revoked:
            grants.append("  ")
            grants.append_text(grant_line(g, revoked=True))
            grants.append("\n")
        grants.append(f"\nGrants already expired, not revoked ({len(record.grants_expired)})\n", style="bold")
        for g in record.grants_expired:
            grants.append("  ")
            grants.append_text(grant_line(g, revoked=False))
            grants.append("\n")
        self.query_one("#grants", Static).update(grants)
        self.query_one("#confirmed", Static).update(self._confirmed(record.children_confirmed))

    @staticmethod
    def _confirmed(children: list[ChildEntry]) -> Text:
        text = Text()
        text.append(f"\nAgents that confirmed they stopped ({len(children)})\n", style="bold")
        for c in children:
            text.append(f"  {'  ' * c.depth}{sanitize(c.agent_id, max_chars=ID_CHARS)}", style="green")
            text.append(f"  {sanitize(c.kind or '', max_chars=40)}, confirmed {when(c.confirmed_at)}\n", style="dim")
        return text

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_call()

    def action_open_call(self) -> None:
        key = self.query_one("#in-flight", LiveTable).cursor_key
        if not self.chosen(key, "a call"):
            return
        self.app.push_screen(DetailScreen(uuid.UUID(key)))
