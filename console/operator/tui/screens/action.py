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

from console.db import actions
from console.db.connect import Conn
from console.db.sql import load
from console.operator import present
from console.operator.tui.messages import ActionDone
from console.shared.clock import FrozenClock
from console.shared.errors import LeasectlError, RowLocked
from console.shared.health import format_seconds
from console.shared.models import ActionResult, Applied, JobSummary, Refused

TITLES = {"cancel": "Cancel", "mark_terminal": "Mark terminal", "approve_retry": "Approve a retry of"}


def terminal_choices(state: str) -> list[str]:
    if state == "outcome_unknown":
        return ["succeeded", "failed"]
    if state == "queued":
        return ["failed", "cancelled"]
    return ["failed", "succeeded", "cancelled"]


class GuardedDialog(ModalScreen[object | None]):
    """What every guarded action shares: the frame (what will change, the guard, the query it
    runs), the reason, `enter` in the last field applies, `esc` leaves, the database's answer.

    Subclasses say what changes and how to send it; the sending runs in a thread worker.
    """

    CSS_PATH = "action.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Leave (changes nothing)", tooltip="Close; nothing is sent"),
        Binding("enter", "close_if_answered", "Close", show=False, tooltip="Close once the answer is shown"),
    ]
    query_name = ""  # the queries/ file this dialog runs, shown to the user

    def __init__(self) -> None:
        super().__init__()
        self.result: object | None = None
        self.busy = False

    # ------------------------------------------------------------------ to implement
    def title_text(self) -> Text:
        raise NotImplementedError

    def what_changes(self) -> Text:
        raise NotImplementedError

    def guard(self) -> Text:
        raise NotImplementedError

    def extra_fields(self) -> ComposeResult:
        """Fields after the reason."""
        yield from ()

    def last_field(self) -> str:
        return "reason"

    def enter_applies(self, field_id: str | None) -> bool:
        return field_id == self.last_field()

    def collect(self) -> dict[str, object] | None:
        """The extra fields' values, or None after saying what is wrong (focus moved there)."""
        return {}

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, object]) -> object:
        raise NotImplementedError

    def answer(self, result: object) -> Text:
        """The database's answer, first words loud."""
        raise NotImplementedError

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        query = load(self.query_name)
        with Vertical(id="dialog"):
            yield Static(self.title_text(), id="dialog-title")
            yield Static(self.what_changes(), id="what-changes")
            yield Static(self.guard(), id="guard")
            runs = Text()
            runs.append("runs ", style="dim")
            runs.append(query.path, style="bold")
            runs.append(f" — {query.purpose.split('.')[0]}.", style="dim")
            yield Static(runs, id="runs")
            yield Label("Reason (required, journaled with your name):")
            yield Input(placeholder="why are you doing this?", id="reason")
            yield from self.extra_fields()
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

    # ------------------------------------------------------------------ applying
    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.enter_applies(event.input.id):
            self.apply()
        else:
            self.focus_next()

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
        fields = self.collect()
        if fields is None:
            return
        self.busy = True
        self._say(Text("applying…", style="dim"))
        self._send(reason, fields)

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _send(self, reason: str, fields: dict[str, object]) -> None:
        session = self.app.session  # type: ignore[attr-defined]
        try:
            result = session.act(lambda conn: self.perform(conn, session.operator, reason, fields))
            self.post_message(ActionDone(result=result))
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
        text = self.answer(message.result)
        text.append("\nenter or esc: close", style="dim")
        self._say(text)
        self.query_one("#keys", Static).display = False
        self.set_focus(None)

    def _say(self, text: Text) -> None:
        self.query_one("#outcome", Static).update(text)

    def action_leave(self) -> None:
        self.dismiss(self.result)


class ActionDialog(GuardedDialog):
    """Cancel, mark terminal or approve a retry of one call."""

    def __init__(self, action: str, job: JobSummary, *, seen_at: float | None = None) -> None:
        super().__init__()
        self.action = action
        self.job = job
        self.seen_age = seen_at
        self.query_name = actions.QUERY[action]

    def title_text(self) -> Text:
        title = Text()
        title.append(f"{TITLES[self.action]} call {self.job.short_id}", style="bold")
        title.append(f"  {self.job.tool}", style="dim")
        return title

    def extra_fields(self) -> ComposeResult:
        job = self.job
        if self.action == "mark_terminal":
            yield Label("Mark it as:")
            choices = terminal_choices(job.state)
            yield Select([(c, c) for c in choices], value=choices[0], allow_blank=False, id="terminal")
            if job.lease_live:
                yield Checkbox(f"force: fence the owner out (token {job.fencing_token} → "
                               f"{job.fencing_token + 1}); its heartbeat and result will be rejected",
                               id="force")
        if self._confirms_id:
            yield Label(f"This side effect cannot be checked. Type the call's first 8 characters "
                        f"({job.short_id}) to confirm:")
            yield Input(placeholder=job.short_id, id="confirm-id", max_length=8)

    @property
    def _confirms_id(self) -> bool:
        return self.action == "approve_retry" and self.job.side_effect == "mutating_unverifiable"

    def last_field(self) -> str:
        return "confirm-id" if self._confirms_id else "reason"

    def enter_applies(self, field_id: str | None) -> bool:
        # mark-terminal goes on to its state (and force), then Apply
        return field_id == self.last_field() and self.action != "mark_terminal"

    def what_changes(self) -> Text:
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

    def guard(self) -> Text:
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

    def collect(self) -> dict[str, object] | None:
        if self._confirms_id:
            typed = self.query_one("#confirm-id", Input).value.strip().lower()
            if typed != self.job.short_id:
                self._say(Text(f"Type {self.job.short_id} to confirm this approval.", style="bold red"))
                self.query_one("#confirm-id", Input).focus()
                return None
        if self.action != "mark_terminal":
            return {}
        return {"terminal": str(self.query_one("#terminal", Select).value),
                "force": bool(self.query_one("#force", Checkbox).value) if self.job.lease_live else False}

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, object]) -> ActionResult:
        job = self.job
        if self.action == "cancel":
            return actions.cancel(conn, job.id, seen_state=job.state, seen_token=job.fencing_token,
                                  operator=operator, reason=reason)
        if self.action == "mark_terminal":
            return actions.mark_terminal(conn, job.id, seen_state=job.state, seen_token=job.fencing_token,
                                         terminal_state=str(fields["terminal"]), operator=operator,
                                         reason=reason, force=bool(fields["force"]))
        return actions.approve_retry(conn, job.id, seen_state=job.state, seen_token=job.fencing_token,
                                     operator=operator, reason=reason)

    def answer(self, result: object) -> Text:
        assert isinstance(result, Applied | Refused)
        text = Text()
        text.append("APPLIED — " if isinstance(result, Applied) else "REFUSED — ",
                    style="bold green" if isinstance(result, Applied) else "bold red")
        text.append(present.action_message(result))
        if result.request_id:
            text.append(f"\nrequest {result.request_id} is in the call's history.", style="dim")
        return text
