"""5 Reconciliations: what the control plane wrote, from outside, before it called a subtree
terminated (seed 003). Newest first; opening one shows the unaccounted children first and
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
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Label, Static

from console.db import reads
from console.db.connect import Conn
from console.operator.tui.cells import plain, selected_row_key
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.status import TopChrome
from console.shared.fleet_words import RESOLUTION_MEANING, RESOLUTION_STYLE
from console.shared.health import counted, format_seconds
from console.shared.models import ChildEntry, GrantEntry, ReconciliationRecord
from console.shared.text import sanitize

RECORD_COLUMNS = (("written", "written", 19), ("shutdown", "shutdown of", 22), ("unaccounted", "unaccounted", 13),
                  ("calls", "calls", 5), ("revoked", "revoked", 7), ("expired", "expired", 7))


def _at(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "—"


def _unaccounted_cell(record: ReconciliationRecord) -> Text:
    n = len(record.children_unaccounted)
    return plain(f"{n} UNACCOUNTED", "bold red") if n else plain("none", "green")


def unaccounted_block(record: ReconciliationRecord) -> Text:
    """The most important field, first and loud."""
    text = Text()
    if not record.children_unaccounted:
        text.append("Every agent of the subtree confirmed it stopped.", style="bold green")
        return text
    text.append(f"{counted(len(record.children_unaccounted), 'agent').upper()} UNACCOUNTED", style="bold white on red")
    text.append(" — no confirmation of stopping. Every live grant of the subtree was revoked by the control "
                "plane, but what was started outside may still be running.\n", style="bold red")
    for child in record.children_unaccounted:
        text.append(f"  {sanitize(child.agent_id)}", style="bold red")
        seen = _at(child.last_seen_at) if child.last_seen_at else "never"
        text.append(f"  {sanitize(child.kind or '')}, child of {sanitize(child.parent_id or '—')}, "
                    f"last seen {seen}\n")
    return text


def _grant_line(g: GrantEntry, revoked: bool) -> Text:
    text = Text()
    text.append(f"{sanitize(g.kind)} ", style="bold")
    text.append(f"{sanitize(g.resource)} of {sanitize(g.agent_id)}")
    if revoked:
        text.append(f" — revoked by {sanitize(g.revoked_by or '?')} at {_at(g.revoked_at)}", style="dim")
    else:
        text.append(f" — had expired at {_at(g.expires_at)}, not revoked", style="dim")
    return text


class ReconciliationsScreen(PollingScreen):
    CSS_PATH = "reconciliations.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_record", "Open", tooltip="The whole record: unaccounted first, then every call"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.records: list[ReconciliationRecord] = []

    def compose(self) -> ComposeResult:
        yield TopChrome()
        with Horizontal(id="records-body"):
            with Vertical(id="records-left"):
                yield Label("Reconciliation records — newest first", classes="section-title")
                table: DataTable[Text] = DataTable(id="records", cursor_type="row", zebra_stripes=True)
                yield table
                yield Static("No shutdown has been reconciled yet. Start one from the Fleet screen (4).",
                             id="no-records")
            with VerticalScroll(id="record-pane"):
                yield Static(id="record-preview")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#records", DataTable)
        for key, label, width in RECORD_COLUMNS:
            table.add_column(label, key=key, width=width)
        super().on_mount()

    def load(self, conn: Conn) -> tuple[list[ReconciliationRecord], datetime]:
        records = reads.reconciliations(conn, limit=200)
        return records, (records[0].db_now if records and records[0].db_now else reads.db_info(conn).db_now)

    def db_now_of(self, data: tuple[list[ReconciliationRecord], datetime]) -> datetime:
        return data[1]

    def show(self, data: tuple[list[ReconciliationRecord], datetime]) -> None:
        self.records = data[0]
        table = self.query_one("#records", DataTable)
        selected = selected_row_key(table)
        table.clear()
        for r in self.records:
            table.add_row(plain(_at(r.written_at)), plain(f"{r.mode} of {r.root_agent_id}", "bold"),
                          _unaccounted_cell(r), plain(len(r.in_flight)), plain(len(r.grants_revoked)),
                          plain(len(r.grants_expired)), key=str(r.id))
        if selected in {str(r.id) for r in self.records}:
            table.move_cursor(row=table.get_row_index(selected), animate=False)
        table.display = bool(self.records)
        self.query_one("#no-records", Static).display = not self.records
        self._preview()

    def selected_record(self) -> ReconciliationRecord | None:
        key = selected_row_key(self.query_one("#records", DataTable))
        return next((r for r in self.records if str(r.id) == key), None)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._preview()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_record()

    def _preview(self) -> None:
        record = self.selected_record()
        pane = self.query_one("#record-preview", Static)
        if record is None:
            pane.update(Text("Select a record.", style="dim"))
            return
        counts: dict[str, int] = {}
        for call in record.in_flight:
            counts[call.resolution] = counts.get(call.resolution, 0) + 1
        resolved = Table.grid(padding=(0, 1))
        resolved.add_column(no_wrap=True)
        resolved.add_column()
        for resolution, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            resolved.add_row(Text(f"{n} {resolution.replace('_', ' ')}",
                                  style=RESOLUTION_STYLE.get(resolution, "")),
                             Text(RESOLUTION_MEANING.get(resolution, ""), style="dim"))
        head = Text()
        head.append(f"{record.mode} of {sanitize(record.root_agent_id)}\n", style="bold")
        head.append(f"asked by {sanitize(record.requested_by)}: {sanitize(record.reason)}\n")
        head.append(f"written by {sanitize(record.written_by)} at {_at(record.written_at)}\n\n", style="dim")
        tail = Text(f"\n{counted(len(record.grants_revoked), 'grant')} revoked, {len(record.grants_expired)} already "
                    f"expired; {counted(len(record.children_confirmed), 'agent')} confirmed.\nenter opens the record.",
                    style="dim")
        pane.update(Group(head, unaccounted_block(record), Text(""), resolved, tail))

    def action_open_record(self) -> None:
        record = self.selected_record()
        if record is None:
            self.app.notify("Select a record first.", severity="warning")
            return
        self.app.push_screen(RecordScreen(record.id))


class RecordScreen(PollingScreen):
    """One reconciliation record, whole. Append-only: nothing here changes, but calls it lists
    may still be acted on from their detail (`enter`)."""

    CSS_PATH = "reconciliations.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the list"),
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
            calls: DataTable[Text] = DataTable(id="in-flight", cursor_type="row", zebra_stripes=True)
            yield calls
            yield Static(id="grants")
            yield Static(id="confirmed")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#in-flight", DataTable)
        for key, label, width in (("call", "call", 8), ("tool", "tool", 18), ("agent", "agent", 14),
                                  ("resolution", "resolution", 18), ("token", "token", 5),
                                  ("meaning", "what it means", 62)):
            table.add_column(label, key=key, width=width)
        super().on_mount()

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
        title = Text()
        title.append(f"Reconciliation {record.short_id}", style="bold")
        title.append(f" · {record.mode} of {sanitize(record.root_agent_id)} asked by "
                     f"{sanitize(record.requested_by)}: {sanitize(record.reason)}\n")
        took = (record.written_at - record.requested_at).total_seconds() if record.requested_at else None
        title.append(f"requested {_at(record.requested_at)} · written {_at(record.written_at)} by "
                     f"{sanitize(record.written_by)}" + (f" ({format_seconds(took)} later)" if took else ""),
                     style="dim")
        head.update(title)
        self.query_one("#unaccounted", Static).update(unaccounted_block(record))
        table = self.query_one("#in-flight", DataTable)
        selected = selected_row_key(table)
        table.clear()
        for call in record.in_flight:
            extra = call.model_extra or {}
            table.add_row(plain(str(call.job_id)[:8], "bold"), plain(call.tool), plain(call.agent_id or "—"),
                          plain(call.resolution.replace("_", " "), RESOLUTION_STYLE.get(call.resolution, "")),
                          plain(extra.get("fencing_token", "")),
                          plain(RESOLUTION_MEANING.get(call.resolution, ""), "dim"), key=str(call.job_id))
        if selected in {str(c.job_id) for c in record.in_flight}:
            table.move_cursor(row=table.get_row_index(selected), animate=False)
        table.display = bool(record.in_flight)
        grants = Text()
        grants.append(f"\nGrants revoked ({len(record.grants_revoked)})\n", style="bold")
        for g in record.grants_revoked:
            grants.append("  ")
            grants.append_text(_grant_line(g, revoked=True))
            grants.append("\n")
        grants.append(f"\nGrants already expired, not revoked ({len(record.grants_expired)})\n", style="bold")
        for g in record.grants_expired:
            grants.append("  ")
            grants.append_text(_grant_line(g, revoked=False))
            grants.append("\n")
        self.query_one("#grants", Static).update(grants)
        self.query_one("#confirmed", Static).update(self._confirmed(record.children_confirmed))

    @staticmethod
    def _confirmed(children: list[ChildEntry]) -> Text:
        text = Text()
        text.append(f"\nAgents that confirmed they stopped ({len(children)})\n", style="bold")
        for c in children:
            text.append(f"  {'  ' * c.depth}{sanitize(c.agent_id)}", style="green")
            text.append(f"  {sanitize(c.kind or '')}, confirmed {_at(c.confirmed_at)}\n", style="dim")
        return text

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_call()

    def action_open_call(self) -> None:
        key = selected_row_key(self.query_one("#in-flight", DataTable))
        if key is None:
            self.app.notify("Select a call first.", severity="warning")
            return
        self.app.push_screen(DetailScreen(uuid.UUID(key)))

    def action_back(self) -> None:
        self.app.pop_screen()
