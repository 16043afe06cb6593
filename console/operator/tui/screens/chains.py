"""8 Chains: every chain of calls, newest first (docs/seeds.md §000 stages, §004 the chain's
deadline): its first call, its key stem, its deadline and the time left (or that it passed), the
stage it is at, its slowest stage, and how it is doing. Below the list, the highlighted chain's
story (console.operator.present.chains); `enter` opens the call its current stage is, `/` filters
(agent: tool: key: outcome:), `l` shows the lone calls too (a chain of one each)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, NamedTuple

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from console.core.chains import CHAIN_KEYS, Chain, chain_matches
from console.core.filters import FieldFilter, field_grammar, parse_fields
from console.db import chains
from console.db.connect import Conn
from console.operator.present.chains import chain_row_words, chain_story
from console.operator.tui.cells import Cell
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.filterbar import FilterBar, FilterLine
from console.operator.tui.widgets.livetable import Column, LiveTable, keyed_rows
from console.operator.tui.widgets.status import TopChrome
from console.shared.text import counted, sanitize

NARROW = 110  # the app's -narrow breakpoint

# the chain, how it is doing, where it is and the deadline's remainder never give way
COLUMNS = [
    Column("chain", "chain", 8, 0), Column("outcome", "outcome", 13, 0), Column("stage", "stage", 5, 0),
    Column("left", "deadline left", 17, 0), Column("slowest", "slowest", 11, 1), Column("stem", "key stem", 24, 2),
    Column("tool", "tool", 16, 3), Column("deadline", "deadline", 8, 4), Column("started", "started", 8, 5),
    Column("agent", "agent", 14, 6),
]


class ChainsRequest(NamedTuple):
    include_lone: bool


class ChainsPage(NamedTuple):
    chains: list[Chain]
    db_now: datetime


class ChainsScreen(PollingScreen):
    """Chains of calls: their deadline, the stage they are at, the slowest stage"""

    CSS_PATH = "chains.tcss"
    AUTO_FOCUS = "#chains"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_stage", "Open", tooltip="The call the highlighted chain's current stage is"),
        Binding("l", "toggle_lone", "Lone calls", tooltip="Show the calls that made no later call too (chains of one)"),
        Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="Clear the active filter"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.all_chains: list[Chain] = []
        self.chains: list[Chain] = []
        self.include_lone = False
        self.filter_value = FieldFilter()

    def compose(self) -> ComposeResult:
        yield TopChrome()
        yield FilterBar(placeholder=field_grammar(CHAIN_KEYS))
        yield FilterLine("/ filters chains (agent: tool: key: outcome:)")
        yield LiveTable(COLUMNS, id="chains")
        yield Static(id="no-chains")
        with VerticalScroll(id="story-pane"):
            yield Static(id="story")
        yield Footer()

    # ------------------------------------------------------------------ data
    def request(self) -> ChainsRequest:
        return ChainsRequest(self.include_lone)

    def load_request(self, conn: Conn, request: ChainsRequest) -> ChainsPage:
        found, now = chains.chains(conn, include_lone=request.include_lone)
        return ChainsPage(found, now)

    def db_now_of(self, data: ChainsPage) -> datetime:
        return data.db_now

    def show(self, data: ChainsPage) -> None:
        self.all_chains = data.chains
        self._refresh(self.now() or data.db_now)

    def _refresh(self, now: datetime) -> None:
        self.chains = [c for c in self.all_chains if chain_matches(self.filter_value, c)]
        table = self.query_one("#chains", LiveTable)
        keyed_rows(table, [(str(c.chain_id), self._cells(c, now)) for c in self.chains])
        table.display = bool(self.chains)
        none = self.query_one("#no-chains", Static)
        none.display = not self.chains
        if self.all_chains and not self.chains:
            none.update(Text(f"No chain matches the filter {sanitize(self.filter_value.describe(), max_chars=80)} "
                             "(esc clears it).", style="bold yellow"))
        elif not self.chains:
            none.update(Text("No chain yet: no call has made a later call (a next stage, or a delegated call). "
                             "l shows the lone calls too." if not self.include_lone else "No call yet.", style="dim"))
        tail = Text(f"{counted(len(self.chains), 'chain')} · newest first"
                    + (" · lone calls shown (l hides them)" if self.include_lone else " · l shows lone calls too"),
                    style="dim")
        self.query_one(FilterLine).show_filter(self.filter_value.describe(), matched=len(self.chains),
                                               total=len(self.all_chains), extra=tail)
        self._show_story(now)

    @staticmethod
    def _cells(chain: Chain, now: datetime) -> dict[str, Cell]:
        return {name: Cell(text, style) for name, (text, style) in chain_row_words(chain, now).items()}

    def tick(self, now: datetime) -> None:
        table = self.query_one("#chains", LiveTable)
        for chain in self.chains:
            if not chain.over:  # a chain that is over does not tick
                table.update_cells(str(chain.chain_id), self._cells(chain, now))
        self._show_story(now)

    def selected_chain(self) -> Chain | None:
        key = self.query_one("#chains", LiveTable).cursor_key
        return next((c for c in self.chains if str(c.chain_id) == key), None)

    def on_live_table_row_highlighted(self, event: LiveTable.RowHighlighted) -> None:
        now = self.now()
        if now is not None:
            self._show_story(now)

    def _show_story(self, now: datetime) -> None:
        chain = self.selected_chain()
        pane = self.query_one("#story-pane", VerticalScroll)
        pane.display = chain is not None
        if chain is not None:
            self.query_one("#story", Static).update(chain_story(chain, now, compact=self.size.width < NARROW))

    # ------------------------------------------------------------------ the filter
    def parse_filter_text(self, text: str) -> FieldFilter:
        return parse_fields(text, CHAIN_KEYS)

    def filter_changed(self) -> None:
        self._refresh(self.now() or self.db_now or datetime.now().astimezone())

    def filter_applied(self) -> None:
        self.query_one("#chains", LiveTable).focus()

    # ------------------------------------------------------------------ keys
    def action_toggle_lone(self) -> None:
        self.include_lone = not self.include_lone
        self.refetch()

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_stage()

    def action_open_stage(self) -> None:
        chain = self.selected_chain()
        current = chain.current if chain else None
        if current is None:
            self.app.notify("Select a chain first.", severity="warning")
            return
        self.app.push_screen(DetailScreen(current.id))
