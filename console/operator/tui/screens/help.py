"""`?`: every key binding of every screen and of the app, what the words mean, and where this
console is connected."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from console.db.session import ConsoleSession
from console.operator.present.fleet import AGENT_STATE_MEANING, RESOLUTION_MEANING
from console.operator.present.words import HEALTH_LABELS, HEALTH_MEANING
from console.shared.dsn import masked_dsn
from console.shared.text import sanitize

KEY_NAMES = {"question_mark": "?", "slash": "/", "escape": "esc", "enter": "enter", "space": "space",
             "asterisk": "*", "left_square_bracket": "[", "right_square_bracket": "]", "ctrl+p": "ctrl+p",
             "tab": "tab"}


def bindings_of(owner: type | object) -> list[Binding]:
    """A class's bindings with its bases' (subclasses override the same key), in order."""
    found: dict[str, Binding] = {}
    classes = owner.__mro__ if isinstance(owner, type) else type(owner).__mro__
    for cls in reversed(classes):
        if not cls.__module__.startswith("console."):
            continue  # Textual's own (focus moves, copy) are not what a person looks up here
        for b in cls.__dict__.get("BINDINGS", []):
            binding = b if isinstance(b, Binding) else Binding(*b)
            if binding.description or binding.tooltip:
                found[binding.key] = binding
    return list(found.values())


def key_names(binding: Binding) -> str:
    return ", ".join(KEY_NAMES.get(k, k) for k in binding.key.split(","))


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
        width: 136;
        max-width: 100%;
        height: 90%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    /* wide: this screen's keys beside what its words mean, both in one view; narrow: one column */
    HelpScreen #help-top {
        layout: horizontal;
        height: auto;
    }
    HelpScreen #help-keys {
        width: 3fr;
        height: auto;
    }
    HelpScreen #help-legend {
        width: 2fr;
        height: auto;
        padding-left: 2;
    }
    HelpScreen.-narrow #help-top {
        layout: vertical;
    }
    HelpScreen.-narrow #help-keys, HelpScreen.-narrow #help-legend {
        width: 100%;
        padding-left: 0;
    }
    HelpScreen.-narrow #help-legend {
        margin-top: 1;
    }
    """

    def __init__(self, below: Screen, *, screens: Sequence[type[Screen]] = (),
                 app_bindings: Iterable[BindingType] = (), session: ConsoleSession | None = None) -> None:
        super().__init__()
        self.below = below
        self.screens = list(screens)
        self.app_bindings = [b if isinstance(b, Binding) else Binding(*b) for b in app_bindings]
        self.session = session

    def _screen_sections(self) -> list[tuple[str, list[Binding]]]:
        here = type(self.below)
        others = [cls for cls in self.screens if cls is not here]
        sections = [(f"{self._screen_name(here)} (this screen)", bindings_of(here))]
        sections += [(self._screen_name(cls), bindings_of(cls)) for cls in others]
        return sections

    @staticmethod
    def _screen_name(screen: type) -> str:
        return screen.__name__.removesuffix("Screen")

    @staticmethod
    def _keys_table() -> Table:
        table = Table(expand=True, show_edge=False)
        table.add_column("key", style="bold", no_wrap=True)
        table.add_column("does")
        table.add_column("where", style="dim", no_wrap=True)
        return table

    def compose(self) -> ComposeResult:
        here, *others = self._screen_sections()
        table = self._keys_table()
        for b in self.app_bindings:
            if b.description or b.tooltip:
                table.add_row(Text(key_names(b)), Text(b.tooltip or b.description), Text("everywhere"))
        table.add_row(Text("ctrl+p"), Text("command palette: every screen and action by name"), Text("everywhere"))
        table.add_row(Text("mouse"), Text("click a row to select it, again to open it; click buttons"),
                      Text("everywhere"))
        for b in here[1]:
            table.add_row(Text(key_names(b)), Text(b.tooltip or b.description), Text(here[0]))
        elsewhere = self._keys_table()
        for where, bindings in others:
            for b in bindings:
                elsewhere.add_row(Text(key_names(b)), Text(b.tooltip or b.description), Text(where))
        legend_title, meanings = self._legend()
        legend = Table(expand=True, show_edge=False, show_header=False)
        legend.add_column(style="bold", no_wrap=True)
        legend.add_column()
        for label, meaning in meanings.items():
            legend.add_row(Text(label), Text(meaning))
        with VerticalScroll():
            yield Static(self._connection())
            with Container(id="help-top"):
                with Vertical(id="help-keys"):
                    yield Static(Text("Keys here", style="bold"))
                    yield Static(table)
                with Vertical(id="help-legend"):
                    yield Static(Text(legend_title, style="bold"))
                    yield Static(legend)
            yield Static(Text("\nKeys of the other screens", style="bold"))
            yield Static(elsewhere)
            yield Static(Text("\nesc closes this help", style="dim"))

    def _connection(self) -> Text:
        text = Text()
        if self.session is None:
            return text
        context = self.session.context
        if context is not None:
            text.append("Context ", style="bold")
            text.append(sanitize(context.name, max_chars=64), style="bold")
            text.append(" (ctrl+o switches): ", style="dim")
        text.append("Connected to ", style="bold")
        text.append(sanitize(self.session.shown_dsn or masked_dsn(self.session.dsn)
                             or "(libpq defaults: PG* variables, service files)", max_chars=300))
        text.append(f" as {sanitize(self.session.operator, max_chars=60)}")
        if self.session.read_only_reason:
            text.append(f" — READ-ONLY ({sanitize(self.session.read_only_reason)})", style="bold yellow")
        if context is not None and not self.session.dsn_overridden:
            text.append(f"\nanother terminal: leasectl --context {sanitize(context.name, max_chars=64)} "
                        "(the CLI too)\n", style="dim")
        else:
            text.append("\nanother terminal: leasectl --dsn '<that>' (or the CLI with --dsn)\n", style="dim")
        return text

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
