"""ctrl+o: the contexts of contexts.toml, each asked at once whether it answers; enter switches the
console to the one selected (the app reconnects every screen: console.operator.tui.app), esc stays.

The rows are there at once and fill in as the answers come (console.db.probe, 3 s at most each): a
context that hangs never holds up the list. A context that is down may still be chosen (the
console then says it cannot reach it, as for any outage); the current one is marked, and choosing
it again changes nothing. The console's first place is offered too when the file does not name it
(`no context`: --dsn or the environment; a demo's database), so the way back is always there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from console.db.probe import PROBE_SECONDS, probe_all
from console.db.session import ConsoleSession
from console.operator.present.contexts import picker_name_width, picker_row
from console.shared.contexts import Answer, Context, dsn_place

FIRST_PLACE = "\N{RIGHTWARDS ARROW}start"  # the option id of the console's first place when the file does not name it


@dataclass(frozen=True)
class ContextChoice:
    """What the picker answers: the context to switch to (None: the console's first place, without one)."""

    context: Context | None


class ContextPicker(ModalScreen[ContextChoice | None]):
    """The contexts to switch to; the answer is the one chosen, or None to stay."""

    CSS_PATH = "contexts.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Stay here", tooltip="Close the list: the console stays where it is"),
        Binding("ctrl+o", "leave", "Stay here", show=False),
    ]

    class Answered(Message):
        """One context's answer, from the probe's thread."""

        def __init__(self, key: str, answer: Answer) -> None:
            super().__init__()
            self.key = key
            self.answer = answer

    def __init__(self, session: ConsoleSession, known: dict[str, Context]) -> None:
        super().__init__()
        self.session = session
        first = session.first_context
        self.entries: dict[str, Context | None] = {}
        if first is None:
            self.entries[FIRST_PLACE] = None
        elif first.name not in known:
            self.entries[FIRST_PLACE] = first
        self.entries.update(known)
        self.answers: dict[str, Answer] = {}

    # ------------------------------------------------------------------ what is shown
    def _is_current(self, key: str) -> bool:
        entry, now = self.entries[key], self.session.context
        if entry is None or now is None:
            return entry is None and now is None
        return entry.name == now.name

    def _row(self, key: str) -> Text:
        return picker_row(self.entries[key], self.answers.get(key), current=self._is_current(key),
                          place=dsn_place(self.session.first_shown_dsn or self.session.first_dsn),
                          name_width=picker_name_width(list(self.entries.values())))

    def compose(self) -> ComposeResult:
        with Vertical(id="contexts"):
            yield Static(Text("Switch to another context", style="bold"), id="contexts-title")
            yield OptionList(*[Option(self._row(key), id=key) for key in self.entries], id="contexts-list")
            yield Static(Text(f"enter switches (every screen reconnects), esc stays · each is asked at once, "
                              f"{PROBE_SECONDS} s at most · `leasectl contexts` says where they are kept",
                              style="dim"), id="contexts-hint")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        current = next((i for i, key in enumerate(self.entries) if self._is_current(key)), 0)
        options.highlighted = current
        options.focus()
        self.ask_each({key: self._dsn_of(entry) for key, entry in self.entries.items()})

    def _dsn_of(self, entry: Context | None) -> str:
        """Where choosing `entry` connects (console.db.session.ConsoleSession.switched_to)."""
        return self.session.first_dsn if entry is None or self.session.is_first(entry) else entry.dsn

    @work(thread=True, group="probe", exit_on_error=False)
    def ask_each(self, dsns: dict[str, str]) -> None:
        def answered(key: str, answer: Answer) -> None:
            self.post_message(self.Answered(key, answer))  # thread-safe: handled on the UI thread

        probe_all(dsns, timeout=PROBE_SECONDS, on_answer=answered)

    def on_context_picker_answered(self, message: Answered) -> None:
        self.answers[message.key] = message.answer
        self.query_one(OptionList).replace_option_prompt(message.key, self._row(message.key))

    # ------------------------------------------------------------------ what is chosen
    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        key = event.option.id or ""
        if self._is_current(key):
            self.app.notify("The console is already there.", title="Contexts")
            self.dismiss(None)
            return
        self.dismiss(ContextChoice(self.entries[key]))

    def action_leave(self) -> None:
        self.dismiss(None)


SWITCHING_MODE = "_switching"  # the mode the app stands in while it makes every screen anew


class SwitchingScreen(Screen[None]):
    """What shows for the moment the console takes to leave one context for another."""

    DEFAULT_CSS = """
    SwitchingScreen {
        align: center middle;
    }
    """

    def __init__(self, words: str) -> None:
        super().__init__()
        self.words = words

    def compose(self) -> ComposeResult:
        yield Static(Text(self.words, style="bold"))
