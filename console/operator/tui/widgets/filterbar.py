"""`/` opens it, enter applies, esc closes; the active filter is always shown beside it.

Typed text is data, never markup; while the bar is open every key goes into it, none to the
screen's keys (typing `4` in a filter never switches to Fleet)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input, Static

from console.operator.tui.clock import FrozenClock
from console.shared.text import sanitize


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
        self.cursor_position = len(current)
        self.can_focus = True
        # shown and focused at once: Widget.focus() is queued behind pending events, so the keys
        # a fast typist (or a slow machine) already has in the queue after "/" would go elsewhere
        self.display = True
        self.screen.set_focus(self)

    @property
    def is_open(self) -> bool:
        return bool(self.display)

    def close(self) -> None:
        self.display = False
        self.can_focus = False
        self.screen.focus_next()

    def action_close(self) -> None:
        self.close()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Applied(event.value))


class FilterLine(Static):
    """One line under the header: the active filter, loud, or how to set one."""

    DEFAULT_CSS = """
    FilterLine {
        height: 1;
        padding: 0 1;
        color: $text-muted;
    }
    """

    def __init__(self, hint: str = "/ filters (state: tool: owner: agent: key: id: health: model: provider: class:)",
                 **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.hint = hint

    def show_filter(self, active: str, *, matched: int | None = None, total: int | None = None,
                    extra: Text | None = None, lead: Text | None = None) -> None:
        """`lead` stands first (the line is cut at its end on a narrow terminal), `extra` last."""
        text = Text(no_wrap=True, overflow="ellipsis")
        if lead is not None:
            text.append_text(lead)
            text.append("  ")
        if active:
            text.append("filter ", style="bold")
            text.append(sanitize(active, max_chars=120), style="bold black on yellow")
            if matched is not None and total is not None:
                text.append(f"  {matched} of {total} shown", style="bold")
            text.append("  (/ changes it, esc clears)")
        else:
            text.append(self.hint)
        if extra is not None:
            text.append("  ")
            text.append_text(extra)
        self.update(text)
