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
from console.db import chains
from console.db.connect import Conn
from console.operator.present.chains import chain_row_words, chain_story
from console.operator.tui.cells import Cell
from console.operator.tui.screens.base import CLEAR_FILTER_BINDING, FieldListScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.livetable import Column, LiveTable
from console.shared.text import counted

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


class ChainsScreen(FieldListScreen[Chain]):
    """Chains of calls: their deadline, the stage they are at, the slowest stage"""

    CSS_PATH = "chains.tcss"
    AUTO_FOCUS = "#chains"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_stage", "Open", tooltip="The call the highlighted chain's current stage is"),
        Binding("l", "toggle_lone", "Lone calls", tooltip="Show the calls that made no later call too (chains of one)"),
        CLEAR_FILTER_BINDING,
    ]
    FILTER_KEYS = CHAIN_KEYS

    def __init__(self) -> None:
        super().__init__()
        self.include_lone = False

    def compose(self) -> ComposeResult:
        yield from self.filter_chrome("/ filters chains (agent: tool: key: outcome:)")
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
        self._refresh(data.chains, self.now() or data.db_now)

    def matches(self, row: Chain) -> bool:
        return chain_matches(self.filter_value, row)

    def _refresh(self, every: list[Chain], now: datetime) -> None:
        none = self.show_list(every, "chains", lambda c: str(c.chain_id), lambda c: self._cells(c, now), "chain",
                              self._tail)
        if not every:
            none.update(Text("No chain yet: no call has made a later call (a next stage, or a delegated call). "
                             "l shows the lone calls too." if not self.include_lone else "No call yet.", style="dim"))
        self._show_story(now)

    def _tail(self, shown: int) -> Text:
        return Text(f"{counted(shown, 'chain')} · newest first"
                    + (" · lone calls shown (l hides them)" if self.include_lone else " · l shows lone calls too"),
                    style="dim")

    @staticmethod
    def _cells(chain: Chain, now: datetime) -> dict[str, Cell]:
        return {name: Cell(text, style) for name, (text, style) in chain_row_words(chain, now).items()}

    def tick(self, now: datetime) -> None:
        table = self.query_one("#chains", LiveTable)
        for chain in self.shown:
            if not chain.over:  # a chain that is over does not tick
                table.update_cells(str(chain.chain_id), self._cells(chain, now))
        self._show_story(now)

    def selected_chain(self) -> Chain | None:
        return self.query_one("#chains", LiveTable).cursor_item(self.shown, lambda c: str(c.chain_id))

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
    def filter_changed(self) -> None:
        self._refresh(self.every, self.now() or self.db_now or datetime.now().astimezone())

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
        if not self.chosen(current, "a chain"):
            return
        self.app.push_screen(DetailScreen(current.id))
