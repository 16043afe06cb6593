"""`/` opens it, enter applies, esc closes. Typed text is data, never markup."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input

from console.shared.clock import FrozenClock


class FilterBar(Input):
    DEFAULT_CSS = """
    FilterBar {
        display: none;
        height: 3;
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
        # shown and focused at once: Widget.focus() is queued behind pending events, so the keys
        # a fast typist (or a slow machine) already has in the queue after "/" would go elsewhere
        self.display = True
        self.screen.set_focus(self)

    def _close(self) -> None:
        self.display = False
        self.can_focus = False
        self.screen.focus_next()

    def action_close(self) -> None:
        self._close()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._close()
        self.post_message(self.Applied(event.value))
