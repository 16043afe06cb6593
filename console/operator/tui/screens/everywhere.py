"""9 All contexts: Triage in every context of contexts.toml at once -- each context up or DOWN with
its counts, and every call that needs attention with its context, worst first.

It reads no database of the console's own session: each poll asks every context at once
(console.db.everywhere: a thread and a connection each, each with its own time to answer, its
replica when it has one) on the poll worker's thread, on the app's poll interval, as every screen
polls. A context that does not answer is shown DOWN with why, under a PARTIAL banner that stays
while any context is unknown; the all-clear is said only when every context answered.

`enter` on a call opens its detail when it is in the context this console is connected to; a call
of another context is named -- its context and its whole id -- with how to open it there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Label, Static

from console.core.everywhere import AllTriage, ContextCall
from console.db.everywhere import DEFAULT_TIMEOUT_SECONDS, triage_everywhere
from console.operator.present.everywhere import (
    CONTEXT_COLUMNS,
    NO_CONTEXTS_HINT,
    context_cells,
    context_name,
    down_lines,
    no_contexts,
    open_elsewhere,
    partial_words,
    read_from_line,
    verdict,
)
from console.operator.tui.cells import Cell, age_cells, health_cell, side_effect_cell, state_cell
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.livetable import Column, LiveTable, keyed_rows
from console.operator.tui.widgets.status import TopChrome
from console.shared.contexts import Context, contexts_path, load_contexts
from console.shared.errors import BadInput

CONTEXT_TABLE_COLUMNS = [Column(*column) for column in CONTEXT_COLUMNS]
# the calls: their context and id, their health, lease and heartbeat stay; the rest gives way first
CALL_COLUMNS = [
    Column("context", "context", 12, 0), Column("id", "call", 8, 0), Column("health", "lease health", 18, 0),
    Column("lease", "lease left", 14, 0), Column("heartbeat", "beat", 6, 0), Column("tool", "tool", 16, 1),
    Column("state", "state", 16, 2), Column("deadline", "deadline", 9, 3), Column("class", "side effect", 12, 4),
    Column("owner", "owner", 11, 5), Column("token", "tok", 3, 6), Column("attempt", "try", 3, 7),
]


@dataclass(frozen=True)
class Everywhere:
    """What one poll found: every context's answer, or why there is none to ask (no contexts, or a
    file that does not parse); and the context this console is connected to, if it is one of them."""

    answer: AllTriage | None
    problem: str | None = None
    here: str | None = None
    at: datetime | None = None  # the local clock, when no context answered (no database clock to go by)


def call_cells(row: ContextCall) -> dict[str, Cell]:
    job = row.call
    return {"context": Cell(context_name(row.context), "bold"), "id": Cell(job.short_id, "bold"),
            "health": health_cell(job.health, job.state), "tool": Cell(job.tool), "state": state_cell(job.state),
            "class": side_effect_cell(job.side_effect), "owner": Cell(job.owner_id or "—"),
            "token": Cell(job.fencing_token),
            "attempt": Cell(f"{job.attempt}/{job.max_attempts}" if job.max_attempts else job.attempt)}


class AllContextsScreen(PollingScreen):
    """Every context's Triage at once: what needs a human, and where"""

    CSS_PATH = "everywhere.tcss"
    AUTO_FOCUS = "#everywhere-calls"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_call", "Open", tooltip="Open the selected call (in this console's context), or say "
                                                      "which context it is in and how to open it there"),
    ]
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS  # each context's time to answer

    def __init__(self) -> None:
        super().__init__()
        self.data: Everywhere | None = None
        self.rows: list[ContextCall] = []

    def compose(self) -> ComposeResult:
        yield TopChrome()
        yield Static(id="partial")
        yield Label("contexts", classes="section-title")
        yield LiveTable(CONTEXT_TABLE_COLUMNS, id="everywhere-contexts")
        yield Static(id="verdict")
        yield Label("calls that need attention, worst first", classes="section-title")
        yield LiveTable(CALL_COLUMNS, id="everywhere-calls")
        yield Static(id="everywhere-selected")
        yield Static(id="everywhere-read-from")
        yield Footer()

    # ------------------------------------------------------------------ reading (the poll worker's thread)
    def read_data(self, request: object) -> Everywhere:
        session = self.leasectl.session
        withheld = getattr(session, "contexts_withheld", None)
        if withheld:
            return Everywhere(None, problem=withheld, at=datetime.now(UTC))
        try:
            # where the session finds the contexts ctrl+o offers, when it has such a place; else the file
            contexts = getattr(session, "known_contexts", load_contexts)()
        except BadInput as exc:
            return Everywhere(None, problem=f"{exc}", at=datetime.now(UTC))
        if not contexts:
            where = contexts_path()
            return Everywhere(None, problem=f"{no_contexts(where, where.exists())}: {NO_CONTEXTS_HINT}.",
                              at=datetime.now(UTC))
        here = self._here(contexts)
        answer = triage_everywhere(contexts.values(), timeout=self.timeout_seconds, clock=session.clock)
        return Everywhere(answer, here=here, at=datetime.now(UTC))

    def _here(self, contexts: dict[str, Context]) -> str | None:
        """The context this console is connected to: the session's own, else the one whose DSN it uses."""
        session = self.leasectl.session
        current = getattr(session, "context", None)
        if isinstance(current, Context):
            return current.name if current.name in contexts else None
        return next((name for name, c in contexts.items() if session.dsn in (c.dsn, c.read_dsn)), None)

    def db_now_of(self, data: Everywhere) -> datetime:
        answered = [c.counts.db_now for c in data.answer.answered if c.counts] if data.answer else []
        return max(answered) if answered else (data.at or datetime.now(UTC))

    # ------------------------------------------------------------------ showing (the UI thread)
    def show(self, data: Everywhere) -> None:
        self.data = data
        answer = data.answer
        banner = self.query_one("#partial", Static)
        said = self.query_one("#verdict", Static)
        contexts = self.query_one("#everywhere-contexts", LiveTable)
        if answer is None:
            banner.display = False
            keyed_rows(contexts, [])
            self._show_calls([])
            said.update(Text(data.problem or "", style="bold yellow"))
            self.query_one("#everywhere-read-from", Static).update("")
            return
        partial = partial_words(answer)
        banner.display = partial is not None
        if partial is not None:
            banner.update(Text("\n".join([partial, *(f"  {line}" for line in down_lines(answer))])))
        keyed_rows(contexts, [(c.name, {key: Cell(*value) for key, value in context_cells(c).items()})
                              for c in answer.contexts])
        self._show_calls(answer.rows)
        text, style = verdict(answer)
        said.update(Text(text, style=style))
        self.query_one("#everywhere-read-from", Static).update(Text(read_from_line(answer), style="dim"))

    def _show_calls(self, rows: list[ContextCall]) -> None:
        self.rows = rows
        table = self.query_one("#everywhere-calls", LiveTable)
        keyed_rows(table, [(row.key, {**call_cells(row), **age_cells(row.call, self._now_of(row))}) for row in rows])
        table.display = bool(rows)
        self._show_selected()

    def _now_of(self, row: ContextCall) -> datetime:
        """Its database's clock now: its last answer's now() plus the time since (each context has its own)."""
        since = 0.0 if self.fetched_at is None else self.leasectl.clock.monotonic() - self.fetched_at
        return row.call.db_now + timedelta(seconds=since)

    def tick(self, now: datetime) -> None:
        table = self.query_one("#everywhere-calls", LiveTable)
        by_key = {row.key: row for row in self.rows}
        for key in table.visible_keys():
            if key in by_key:
                table.update_cells(key, age_cells(by_key[key].call, self._now_of(by_key[key])))

    # ------------------------------------------------------------------ the selected call
    def selected_row(self) -> ContextCall | None:
        table = self.query_one("#everywhere-calls", LiveTable)
        return table.cursor_item(self.rows, lambda row: row.key)

    def on_live_table_row_highlighted(self, event: LiveTable.RowHighlighted) -> None:
        if event.table.id == "everywhere-calls":
            self._show_selected()

    def _show_selected(self) -> None:
        line = self.query_one("#everywhere-selected", Static)
        row = self.selected_row()
        line.display = row is not None
        if row is None:
            return
        text = Text()
        text.append(" context ", style="dim")
        text.append(context_name(row.context), style="bold reverse")
        text.append("  call ", style="dim")
        text.append(str(row.call.id), style="bold")
        here = self.data.here if self.data else None
        text.append("  enter opens it" if row.context == here else
                    f"  in another context: leasectl --context {context_name(row.context)} show {row.call.short_id}",
                    style="dim")
        line.update(text)

    def action_open_call(self) -> None:
        row = self.selected_row()
        if not self.chosen(row, "a call"):
            return
        if self.data is not None and row.context == self.data.here:
            self.app.push_screen(DetailScreen(row.call.id))
            return
        self.app.notify(open_elsewhere(row), title=f"In context {context_name(row.context)}", timeout=12)

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        if event.table.id == "everywhere-calls":
            self.action_open_call()
