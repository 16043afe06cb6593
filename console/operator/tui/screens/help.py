"""`?`: every key binding of the screen below and of the app, with what it does."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from console.shared.fleet_words import AGENT_STATE_MEANING, RESOLUTION_MEANING
from console.shared.health import HEALTH_LABELS, HEALTH_MEANING

KEY_NAMES = {"question_mark": "?", "slash": "/", "escape": "esc", "enter": "enter",
             "left_square_bracket": "[", "right_square_bracket": "]", "ctrl+p": "ctrl+p"}


def _bindings_of(owner: object) -> list[Binding]:
    found = []
    for b in getattr(owner, "BINDINGS", []):
        if isinstance(b, Binding):
            found.append(b)
        elif isinstance(b, tuple):
            found.append(Binding(*b))
    return found


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close help"),
        Binding("question_mark", "dismiss", "Close help", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > VerticalScroll {
        width: 90;
        max-width: 95%;
        height: 80%;
        border: thick $primary;
        background: $surface;
        padding: 1 2;
    }
    """

    def __init__(self, below: Screen) -> None:
        super().__init__()
        self.below = below

    def compose(self) -> ComposeResult:
        table = Table(expand=True, show_edge=False)
        table.add_column("key", style="bold", no_wrap=True)
        table.add_column("does")
        table.add_column("where", style="dim")
        sections = [(type(self.below).__name__.replace("Screen", ""), _bindings_of(self.below)),
                    ("everywhere", _bindings_of(self.app))]
        for where, bindings in sections:
            for b in bindings:
                keys = ", ".join(KEY_NAMES.get(k, k) for k in b.key.split(","))
                table.add_row(Text(keys), Text(b.tooltip or b.description), Text(where))
        table.add_row(Text("ctrl+p"), Text("command palette: every action by name"), Text("everywhere"))
        table.add_row(Text("mouse"), Text("click a row to select it, again to open it; click buttons"),
                      Text("everywhere"))
        legend_title, meanings = self._legend()
        legend = Table(expand=True, show_edge=False, show_header=False)
        legend.add_column(style="bold", no_wrap=True)
        legend.add_column()
        for label, meaning in meanings.items():
            legend.add_row(Text(label), Text(meaning))
        with VerticalScroll():
            yield Static(Text("Keys", style="bold"))
            yield Static(table)
            yield Static(Text(f"\n{legend_title}", style="bold"))
            yield Static(legend)
            yield Static(Text("\nesc closes this help", style="dim"))

    def _legend(self) -> tuple[str, dict[str, str]]:
        """The words the screen below uses: resolutions and agent states on the fleet screens."""
        name = type(self.below).__name__
        if name in ("ReconciliationsScreen", "RecordScreen"):
            return "Resolutions of in-flight calls", {k.replace("_", " "): v for k, v in RESOLUTION_MEANING.items()}
        if name == "FleetScreen":
            return "Agent states", AGENT_STATE_MEANING
        return "Lease health", {HEALTH_LABELS[label]: meaning for label, meaning in HEALTH_MEANING.items()}

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
