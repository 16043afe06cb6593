"""The bulk dialog (`c` `t` `a` on marked calls): one dialog for every marked call, a
confirmation sized to what it touches.

It reads the marked calls again, in one snapshot, and shows what the action will touch: counts by
side-effect class and state, what changes for each, what will be skipped and why, the guard. The
reason is required, and the count is typed to confirm (`approve N unverifiable` for retries of
unverifiable side effects). The answer is a line per call; afterwards only the calls that were not
applied stay marked on the list, so a second look is one key away. When nothing would be sent
(every marked call would be skipped) the dialog says there is nothing to do, asks for no count
and cannot apply. Everything else -- type-ahead, esc, the one failure handler -- is GuardedDialog's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from console.core.actions import action_named
from console.core.bulk import BulkPlan, BulkResult
from console.core.models import TERMINAL_STATES, JobSummary
from console.db import bulk
from console.db.connect import Conn
from console.operator import present
from console.operator.present import bulk as words
from console.operator.tui.failures import describe_failure
from console.operator.tui.screens.action import ChoiceSelect, GuardedDialog, SafeCheckbox
from console.shared.text import counted


class BulkDialog(GuardedDialog):
    """Any action of console.core.actions.ACTIONS on the marked calls."""

    def __init__(self, action: str, ids: list[uuid.UUID], *, seen_at: float | None = None) -> None:
        super().__init__(seen_at=seen_at)
        self.spec = action_named(action)
        self.action = self.spec.name
        self.ids = ids
        self.query_name = self.spec.query
        self.calls: list[JobSummary] | None = None
        self.plan: BulkPlan | None = None

    # ------------------------------------------------------------------ the marked calls, read again
    def on_mount(self) -> None:
        # GuardedDialog's on_mount runs too (Textual calls every class's handler)
        self.aside.read("bulk-snapshot", lambda conn: bulk.snapshot(conn, ids=self.ids), self._calls_read,
                        self._calls_not_read)

    def _calls_read(self, calls: list[JobSummary]) -> None:
        self.calls = calls
        self._replan()

    def _calls_not_read(self, error: BaseException | None) -> None:
        why = describe_failure(error, "the bulk dialog")
        self._say(Text(f"Could not read the marked calls — {why}", style="bold red"))

    def _replan(self) -> None:
        if self.calls is None:
            return
        choices: dict[str, object] = {}
        if "terminal_state" in self.spec.params:
            chosen = self.query_one("#terminal", Select).value
            choices["terminal_state"] = None if chosen is Select.BLANK else str(chosen)
        if "force" in self.spec.params:
            choices["force"] = bool(self.query_one("#force", Checkbox).value)
        self.plan = bulk.plan(self.action, self.calls, **choices)
        self.query_one("#what-changes", Static).update(words.plan_words(self.plan, with_guard=False))
        # nothing to send: no count to type (typing '0' to confirm nothing would be a ritual), and
        # Apply cannot be pressed; a mark-terminal plan can come back when force is ticked
        nothing = not self.plan.send
        self.query_one("#confirm-count", Input).display = not nothing
        self.query_one("#apply", Button).disabled = nothing
        self.query_one("#confirm-label", Label).update(
            Text("Nothing to confirm: no call would be sent, and Apply is off.", style="bold yellow")
            if nothing else f"To confirm, type {words.confirmation(self.plan)!r} (the number of calls that will be "
                            "sent):")

    def on_select_changed(self, event: Select.Changed) -> None:
        self._replan()

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        self._replan()

    # ------------------------------------------------------------------ the frame
    def title_text(self) -> Text:
        title = Text()
        title.append(f"{present.words_of(self.action).bulk_title} {counted(len(self.ids), 'marked call')}",
                     style="bold")
        return title

    def what_changes(self) -> Text:
        return Text("Reading the marked calls again, in one snapshot…", style="dim")

    def guard_words(self) -> Text:
        return present.guard_of(self.action).marked(self.seen_words())

    def extra_fields(self) -> Iterable[Widget]:
        if "terminal_state" in self.spec.params:
            yield Label("Mark them as (what really happened, checked outside):")
            # every state some call may be marked; a call that may not be marked that is skipped, with why
            targets = {s for states in self.spec.terminal_states.values() for s in states}
            yield ChoiceSelect([(s, s) for s in TERMINAL_STATES if s in targets], prompt="choose…",
                               allow_blank=True, id="terminal")
        if "force" in self.spec.params:
            yield SafeCheckbox("force: fence out the owners of live leases (their heartbeats and results will be "
                               "rejected; space ticks it)", id="force")
        yield Label("To confirm, type the number of calls that will be sent:", id="confirm-label")
        yield Input(placeholder="the number of calls", id="confirm-count")

    def last_field(self) -> str:
        # with nothing to send the count is not asked for: enter in the reason tries, and is told why not
        return "reason" if self.plan is not None and not self.plan.send else "confirm-count"

    def collect(self) -> dict[str, object] | None:
        if self.plan is None:
            self._say(Text("The marked calls are still being read.", style="bold yellow"))
            return None
        if "terminal_state" in self.spec.params and self.plan.choices.get("terminal_state") is None:
            self._say(Text("Choose what really happened: the state is journaled as your finding.", style="bold red"))
            self.query_one("#terminal", Select).focus()
            return None
        if not self.plan.send:
            self._say(Text(f"Nothing to send: {words.nothing_sent_words(self.plan)}", style="bold red"))
            return None
        typed = self.query_one("#confirm-count", Input).value.strip()
        if typed != words.confirmation(self.plan):
            self._say(Text(f"Type {words.confirmation(self.plan)!r} to confirm.", style="bold red"))
            self.query_one("#confirm-count", Input).focus()
            return None
        return {}

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, Any]) -> BulkResult:
        assert self.plan is not None
        return bulk.apply(conn, self.plan, operator=operator, reason=reason)

    def answer(self, result: object) -> RenderableType:
        assert isinstance(result, BulkResult)
        head = Text()
        head.append("DONE — " if result.all_applied else "NOT ALL APPLIED — ",
                    style="bold green" if result.all_applied else "bold red")
        head.append_text(words.result_words(result))
        if not result.all_applied:
            head.append("\nThe calls not applied stay marked on the list.", style="bold yellow")
        return Group(head, words.result_table(result, limit=10))
