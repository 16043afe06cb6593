"""What the console's dialogs share (the guarded actions of console/operator/tui/screens/action.py,
the export of console/operator/tui/screens/export.py): one button goes ahead, any other leaves as
esc does, and one line under the fields says how it went."""

from __future__ import annotations

from typing import TypeVar

from rich.console import RenderableType
from textual.screen import ModalScreen
from textual.widgets import Button, Static

ResultT = TypeVar("ResultT")


class Dialog(ModalScreen[ResultT]):
    GO_BUTTON = ""  # the id of the button that goes ahead (`go`)
    OUTCOME = ""  # the id of the Static that says how it went (`_say`)

    def go(self) -> None:
        """What the dialog is for: apply the action, start the export."""
        raise NotImplementedError

    def action_leave(self) -> None:
        raise NotImplementedError

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == self.GO_BUTTON:
            self.go()
        else:
            self.action_leave()

    def _say(self, text: RenderableType) -> None:
        self.query_one(f"#{self.OUTCOME}", Static).update(text)
