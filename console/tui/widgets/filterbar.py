"""`/` opens it, enter applies, esc closes. Typed text is data, never markup."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input

from console.clock import FrozenClock


class FilterBar(Input):
    DEFAULT_CSS = """
    FilterBar {
        display: none;
        height: 3;
    }
    FilterBar.open {
        display: block;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close filter", tooltip="Close without changing the filter"),
    ]

    class Applied(Message):
        def __init__(self, value: str) -> None:
            super().__init__()
            self.value = value

    def on_mount(self) -> None:
        self.can_focus = False  # closed: never in the focus chain
        if isinstance(getattr(self.app, "clock", None), FrozenClock):
            self.cursor_blink = False

    def open(self, current: str = "") -> None:
        self.value = current
        self.can_focus = True
        self.add_class("open")
        self.focus()

    def _close(self) -> None:
        self.remove_class("open")
        self.can_focus = False
        self.screen.focus_next()

    def action_close(self) -> None:
        self._close()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._close()
        self.post_message(self.Applied(event.value))
