"""The action dialog: what will change, the guard it relies on, the query it runs, a reason.

No single keystroke changes data: the reason is required (first field), an unverifiable
approval also needs the call's id typed back, `enter` in the last field applies, `esc` leaves
without changing anything. The answer is the database's: applied, or refused with what is
true now.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from console.clock import FrozenClock
from console.db import actions
from console.db.connect import Conn
from console.db.sql import load
from console.errors import LeasectlError, RowLocked
from console.health import format_seconds
from console.models import ActionResult, Applied, JobSummary
from console.tui.messages import ActionDone

TITLES = {"cancel": "Cancel", "mark_terminal": "Mark terminal", "approve_retry": "Approve a retry of"}


def terminal_choices(state: str) -> list[str]:
    if state == "outcome_unknown":
        return ["succeeded", "failed"]
    if state == "queued":
        return ["failed", "cancelled"]
    return ["failed", "succeeded", "cancelled"]


class ActionDialog(ModalScreen[ActionResult | None]):
    CSS_PATH = "action.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Leave (changes nothing)", tooltip="Close; nothing is sent"),
        Binding("enter", "close_if_answered", "Close", show=False, tooltip="Close once the answer is shown"),
    ]

    def __init__(self, action: str, job: JobSummary, *, seen_at: float | None = None) -> None:
        super().__init__()
        self.action = action
        self.job = job
        self.seen_age = seen_at
        self.result: ActionResult | None = None
        self.busy = False

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        job = self.job
        query = load(actions.QUERY[self.action])
        with Vertical(id="dialog"):
            title = Text()
            title.append(f"{TITLES[self.action]} call {job.short_id}", style="bold")
            title.append(f"  {job.tool}", style="dim")
            yield Static(title, id="dialog-title")
            yield Static(self._what_changes(), id="what-changes")
            yield Static(self._guard(), id="guard")
            runs = Text()
            runs.append("runs ", style="dim")
            runs.append(query.path, style="bold")
            runs.append(f" — {query.purpose.split('.')[0]}.", style="dim")
            yield Static(runs, id="runs")
            yield Label("Reason (required, journaled with your name):")
            yield Input(placeholder="why are you doing this?", id="reason")
            if self.action == "mark_terminal":
                yield Label("Mark it as:")
                choices = terminal_choices(job.state)
                yield Select([(c, c) for c in choices], value=choices[0], allow_blank=False, id="terminal")
                if job.lease_live:
                    yield Checkbox(f"force: fence the owner out (token {job.fencing_token} → "
                                   f"{job.fencing_token + 1}); its heartbeat and result will be rejected",
                                   id="force")
            if self.action == "approve_retry" and job.side_effect == "mutating_unverifiable":
                yield Label(f"This side effect cannot be checked. Type the call's first 8 characters "
                            f"({job.short_id}) to confirm:")
                yield Input(placeholder=job.short_id, id="confirm-id", max_length=8)
            yield Static(id="outcome")
            with Horizontal(id="buttons"):
                yield Button("Leave (esc)", id="leave", variant="default")
                yield Button("Apply", id="apply", variant="warning")
            yield Static(Text("tab: next field · enter in the last field: apply · esc: leave, nothing changes",
                              style="dim"), id="keys")

    def on_mount(self) -> None:
        if isinstance(self.app.clock, FrozenClock):  # type: ignore[attr-defined]
            # a frozen clock (tests, screenshots) renders one instant: nothing blinks either
            for field in self.query(Input):
                field.cursor_blink = False
        self.query_one("#reason", Input).focus()

    def _what_changes(self) -> Text:
        job = self.job
        text = Text()
        text.append("What will change: ", style="bold")
        if self.action == "cancel":
            if job.state == "queued":
                text.append("queued → cancelled. It never started; nothing ran.")
            else:
                text.append("running → cancel requested. ", style="")
                text.append("This does NOT stop it: ", style="bold yellow")
                text.append(f"the worker ({job.owner_id}) hears the request at its next heartbeat and "
                            "confirms; until then it may still be running. Cancel is not rollback.")
        elif self.action == "mark_terminal":
            text.append(f"{job.state.replace('_', ' ')} → the state you choose, for good. ")
            if job.lease_live:
                left = format_seconds(job.lease_left_seconds)
                text.append(f"The owner {job.owner_id} holds a live lease ({left} left): ", style="bold yellow")
                text.append("without force the database refuses; with force the owner is fenced out.")
            else:
                text.append("No live lease: nobody is working on it.")
        else:
            text.append("outcome unknown → queued, with room for exactly one more attempt. ")
            text.append("A worker may then run it again", style="bold yellow")
            if job.external_request_id:
                text.append(f"; the previous request {job.external_request_id} may already have taken effect.")
            else:
                text.append(".")
        return text

    def _guard(self) -> Text:
        job = self.job
        text = Text()
        text.append("Guard: ", style="bold")
        text.append("only if the call is still ")
        text.append(job.state.replace("_", " "), style="bold")
        text.append(" with fencing token ")
        text.append(str(job.fencing_token), style="bold")
        seen = f" (as you saw it {format_seconds(self.seen_age)} ago)" if self.seen_age is not None else ""
        text.append(f"{seen}; if it changed, nothing happens and you are told what is true now.")
        return text

    # ------------------------------------------------------------------ applying
    def _last_field(self) -> str:
        if self.action == "approve_retry" and self.job.side_effect == "mutating_unverifiable":
            return "confirm-id"
        return "reason"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == self._last_field() and self.action != "mark_terminal":
            self.apply()
        else:
            self.focus_next()  # mark-terminal goes on to its state (and force), then Apply

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "apply":
            self.apply()
        else:
            self.action_leave()

    def action_close_if_answered(self) -> None:
        if self.result is not None:
            self.dismiss(self.result)

    def apply(self) -> None:
        if self.busy:
            return
        reason = self.query_one("#reason", Input).value.strip()
        if not reason:
            self._say(Text("A reason is required: it is journaled with your name.", style="bold red"))
            self.query_one("#reason", Input).focus()
            return
        if self.action == "approve_retry" and self.job.side_effect == "mutating_unverifiable":
            typed = self.query_one("#confirm-id", Input).value.strip().lower()
            if typed != self.job.short_id:
                self._say(Text(f"Type {self.job.short_id} to confirm this approval.", style="bold red"))
                self.query_one("#confirm-id", Input).focus()
                return
        terminal = None
        force = False
        if self.action == "mark_terminal":
            terminal = str(self.query_one("#terminal", Select).value)
            force = bool(self.query_one("#force", Checkbox).value) if self.job.lease_live else False
        self.busy = True
        self._say(Text("applying…", style="dim"))
        self._send(reason, terminal, force)

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _send(self, reason: str, terminal: str | None, force: bool) -> None:
        session = self.app.session  # type: ignore[attr-defined]
        job = self.job

        def act(conn: Conn) -> ActionResult:
            if self.action == "cancel":
                return actions.cancel(conn, job.id, seen_state=job.state, seen_token=job.fencing_token,
                                      operator=session.operator, reason=reason)
            if self.action == "mark_terminal":
                return actions.mark_terminal(conn, job.id, seen_state=job.state, seen_token=job.fencing_token,
                                             terminal_state=terminal or "failed", operator=session.operator,
                                             reason=reason, force=force)
            return actions.approve_retry(conn, job.id, seen_state=job.state, seen_token=job.fencing_token,
                                         operator=session.operator, reason=reason)

        try:
            self.post_message(ActionDone(result=session.act(act)))
        except LeasectlError as exc:
            self.post_message(ActionDone(error=exc))

    def on_action_done(self, message: ActionDone) -> None:
        message.stop()
        self.busy = False
        if message.error is not None:
            text = Text()
            if isinstance(message.error, RowLocked):
                text.append("NOT APPLIED — row is locked by another transaction. ", style="bold yellow")
                text.append("Nothing changed (the attempt is journaled). Try again in a moment, or find the "
                            "blocking session.")
            else:
                text.append("NOT APPLIED — ", style="bold red")
                text.append(str(message.error))
                text.append(" Nothing changed.")
            self._say(text)
            return
        self.result = message.result
        for widget in self.query("Input, Select, Checkbox, Label, #buttons"):
            widget.display = False
        text = Text()
        if isinstance(message.result, Applied):
            text.append("APPLIED — ", style="bold green")
        else:
            text.append("REFUSED — ", style="bold red")
        text.append(message.result.message)
        if message.result.request_id:
            text.append(f"\nrequest {message.result.request_id} is in the call's history.", style="dim")
        text.append("\nenter or esc: close", style="dim")
        self._say(text)
        self.query_one("#keys", Static).display = False
        self.set_focus(None)

    def _say(self, text: Text) -> None:
        self.query_one("#outcome", Static).update(text)

    def action_leave(self) -> None:
        self.dismiss(self.result)

