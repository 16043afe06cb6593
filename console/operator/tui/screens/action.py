"""The action dialogs: what will change, the guard it relies on, the query it runs, a reason.

No ordinary typing changes data:
* the reason is required (first field); approving an unverifiable retry also needs the call's id
  typed back; `enter` in the last field applies, `esc` leaves without changing anything;
* keys typed before the dialog appeared -- the rest of a burst of typing that happened to open it,
  `/ocean⏎` on a call's detail -- are ignored until the keyboard pauses, and the dialog says so;
* `enter` on the force checkbox moves on; only `space` (or a click) ticks it; `enter` on the open
  list of a select chooses and moves on, and on a select already chosen it moves on;
* `enter` in an empty reason says the reason is required and stays there;
* what the dialog says of time (the lease left, how long ago the guard's data was read) ticks.
The answer is the database's: applied, or refused with what is true now. A failure before the
guard (a locked row, an unreachable database, an unexpected error) reads NOT APPLIED and why;
nothing is left waiting.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, ClassVar, cast

from rich.console import Group, RenderableType
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, Static
from textual.widgets._select import SelectOverlay
from textual.worker import Worker, WorkerState

from console.core.actions import action_named
from console.core.models import Applied, JobSummary
from console.db import actions
from console.db.connect import Conn
from console.db.sql import load
from console.operator import present
from console.operator.tui.clock import FrozenClock
from console.operator.tui.failures import as_expected, describe_failure
from console.operator.tui.messages import DataFailed
from console.operator.tui.screens.aside import Aside
from console.operator.tui.screens.dialog import Dialog
from console.operator.tui.state import ConsoleApp
from console.shared.config import MAX_REASON_CHARS
from console.shared.errors import DatabaseUnavailable, Deadlocked, OutcomeUnknown, RowLocked
from console.shared.text import counted, format_seconds, sanitize

# A key that follows the previous one within this long belongs to the same burst of typing: if the
# burst began before the dialog was on screen, it was not typed *at* the dialog.
TYPE_AHEAD_GAP = 0.35
# keys that never change data and must always work: leave, quit
ALWAYS_HEARD = frozenset({"escape", "ctrl+c"})


class SafeCheckbox(Checkbox):
    """A checkbox that `enter` does not tick: enter moves on, space ticks."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "app.focus_next", "Next field", show=False),
        Binding("space", "toggle_button", "Toggle", show=False),
    ]


class ChoiceSelect(Select[str]):
    """A select that `enter` answers, as the other fields do. On the open list, enter chooses and
    moves on to the next field; on a select already chosen, enter moves on. Textual's own Select
    kept the focus after a choice and opened the list again on the next enter, so the operator who
    pressed enter to go on found the list open over the dialog. With nothing chosen yet, enter
    opens the list (as space and the arrows do): there is nothing to move on with."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "choose_or_move_on", "Choose", show=False),
    ]

    def action_choose_or_move_on(self) -> None:
        if self.is_blank():
            self.action_show_overlay()
        else:
            self.screen.focus_next()

    @on(SelectOverlay.UpdateSelection)
    def _chosen(self, event: SelectOverlay.UpdateSelection) -> None:
        # instead of Select's own handler (prevent_default), which takes the focus back
        event.stop()
        event.prevent_default()
        value = self._options[event.option_index][1]
        if value != self.value:
            self.value = value
        self.expanded = False
        self.screen.set_focus(self)
        if not self.is_blank():
            # once the list is closed: while it shows, it is the next field in the focus chain
            self.call_after_refresh(self._move_on)

    def _move_on(self) -> None:
        if self.has_focus:
            self.screen.focus_next()


class GuardedDialog(Dialog[object | None]):
    """What every guarded action shares: the frame (what will change, the guard, the query it
    runs), the reason, `enter` in the last field applies, `esc` leaves, the database's answer,
    and the type-ahead guard. Subclasses say what changes and how to send it; the sending runs
    in a thread worker."""

    CSS_PATH = "action.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Leave (changes nothing)", tooltip="Close; nothing is sent"),
        Binding("enter", "close_if_answered", "Close", show=False, tooltip="Close once the answer is shown"),
    ]
    query_name = ""  # the queries/ file this dialog runs, shown to the user
    GO_BUTTON = "apply"
    OUTCOME = "outcome"

    def __init__(self, *, seen_at: float | None = None) -> None:
        super().__init__()
        self.result: object | None = None
        self.busy = False
        self.seen_at = seen_at  # monotonic instant (the console's clock) of the data the guard relies on
        self.shown_at: float | None = None  # the console's clock when it appeared (if seen_at is unknown)
        self.sent_at: float | None = None  # the console's clock when the action was sent
        # the moment the key that opened it was handled: keys after it may arrive before this
        # screen is even mounted (a busy machine), and they are type-ahead as much as the others.
        # Key events carry the real monotonic time of their arrival, whatever the console's clock.
        self.opened_at = time.monotonic()
        self._last_swallowed: float | None = None
        self.swallowed = 0
        self.armed = False
        self.closed = False
        self.aside = Aside(self)  # a subclass's own reads (a bulk dialog reading its calls again)

    @property
    def leasectl(self) -> ConsoleApp:
        return cast(ConsoleApp, self.app)

    # ------------------------------------------------------------------ to implement
    def title_text(self) -> Text:
        raise NotImplementedError

    def what_changes(self) -> Text:
        raise NotImplementedError

    def guard_words(self) -> Text:
        raise NotImplementedError

    def extra_fields(self) -> Iterable[Widget]:
        """Fields after the reason."""
        return ()

    def blast_radius(self) -> Iterable[Widget]:
        """What the action will touch, shown under what will change."""
        return ()

    def last_field(self) -> str:
        return "reason"

    def enter_applies(self, field_id: str | None) -> bool:
        return field_id == self.last_field()

    def collect(self) -> dict[str, object] | None:
        """The extra fields' values, or None after saying what is wrong (focus moved there)."""
        return {}

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, object]) -> object:
        raise NotImplementedError

    def answer(self, result: object) -> RenderableType:
        """The database's answer, first words loud."""
        raise NotImplementedError

    def tick(self) -> None:
        """Every second while no answer is shown: re-render what the dialog says of time."""

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        query = load(self.query_name)
        with Vertical(id="dialog"):
            # the title stays above the scrolling body: on a short terminal the body scrolls to the
            # focused field, and a dialog must never lose the line that says what it does, to what
            yield Static(self.title_text(), id="dialog-title")
            with VerticalScroll(id="dialog-body"):
                yield Static(self.what_changes(), id="what-changes")
                yield from self.blast_radius()
                yield Static(self.guard(), id="guard")
                runs = Text()
                runs.append("runs ", style="dim")
                runs.append(query.path, style="bold")
                runs.append(f" — {query.purpose.split('.')[0]}.", style="dim")
                yield Static(runs, id="runs")
                yield Label("Reason (required, journaled with your name):")
                yield Input(placeholder="why are you doing this?", id="reason", max_length=MAX_REASON_CHARS)
                yield from self.extra_fields()
            with Vertical(id="dialog-foot"):
                yield Static(id="outcome")
                with Horizontal(id="buttons"):
                    yield Button("Leave (esc)", id="leave", variant="default")
                    yield Button("Apply", id="apply", variant="warning")
                yield Static(Text("tab: next field · enter in the last field: apply · esc: leave, nothing changes",
                                  style="dim"), id="keys")

    def on_mount(self) -> None:
        self.shown_at = self.leasectl.clock.monotonic()
        if isinstance(self.leasectl.clock, FrozenClock):
            # a frozen clock (tests, screenshots) renders one instant: nothing blinks either
            for field in self.query(Input):
                field.cursor_blink = False
        self.query_one("#reason", Input).focus()
        self.set_interval(1.0, self._tick)

    def _tick(self) -> None:
        if self.result is None:
            self.query_one("#guard", Static).update(self.guard())
            self.tick()

    def seen_seconds(self) -> float:
        """How long ago the data this dialog shows was read (or, unknown, how long it has been open)."""
        since = self.seen_at if self.seen_at is not None else self.shown_at
        return 0.0 if since is None else max(self.leasectl.clock.monotonic() - since, 0.0)

    def seen_words(self) -> str:
        """"as you saw it 4s ago": ticking, so an old screen is never mistaken for a fresh one."""
        if self.seen_at is None:
            return ""
        return f" (as you saw it {format_seconds(self.seen_seconds())} ago)"

    def guard(self) -> Text:
        return self.guard_words()

    # ------------------------------------------------------------------ type-ahead
    def swallows(self, event: events.Key) -> bool:
        """True for a key that belongs to a burst of typing begun before this dialog appeared.

        The app asks before it forwards a key here. The first pause in the typing arms the
        dialog; from then on every key is the operator's answer to what is on screen."""
        if self.armed or self.closed or event.key in ALWAYS_HEARD:
            return False
        previous = self._last_swallowed if self._last_swallowed is not None else self.opened_at
        if event.time < self.opened_at or event.time - previous < TYPE_AHEAD_GAP:
            self._last_swallowed = event.time
            self.swallowed += 1
            if self.is_mounted:
                self._say(Text(f"Ignored {counted(self.swallowed, 'key')} typed before this dialog appeared. "
                               "Read it, then type.", style="italic yellow"))
            return True
        self.armed = True
        return False

    # ------------------------------------------------------------------ applying
    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "reason" and not event.value.strip():
            # the reason is required: moving on from an empty one would only defer the refusal
            self._reason_required()
        elif self.enter_applies(event.input.id):
            self.go()
        else:
            self.focus_next()

    def _reason_required(self) -> None:
        self._say(Text("A reason is required: it is journaled with your name.", style="bold red"))
        self._asked_for_reason = True
        self.query_one("#reason", Input).focus()

    _asked_for_reason = False

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "reason" and self._asked_for_reason and event.value.strip():
            self._asked_for_reason = False  # answered: the request must not stay on screen as if it were not
            self._say(Text(""))

    def action_close_if_answered(self) -> None:
        if self.result is not None:
            self.closed = True
            self.dismiss(self.result)

    def go(self) -> None:
        """Apply: the reason and the fields checked, the action is sent off the UI thread."""
        if self.busy or self.result is not None:
            return
        reason = self.query_one("#reason", Input).value.strip()
        if not reason:
            self._reason_required()
            return
        fields = self.collect()
        if fields is None:
            return
        self.busy = True
        self._say(Text("applying…", style="dim"))
        self.sent_at = self.leasectl.clock.monotonic()
        self._send(reason, fields)

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _send(self, reason: str, fields: dict[str, object]) -> object:
        session = self.leasectl.session
        return session.act(lambda conn: self.perform(conn, session.operator, reason, fields))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "action":
            self.aside.handle(event)
            return
        if event.state not in (WorkerState.SUCCESS, WorkerState.ERROR):
            return
        self.busy = False
        if event.state == WorkerState.ERROR:
            error = as_expected(event.worker.error)
            if isinstance(error, DatabaseUnavailable):
                # what the action met is the outage the banner is about: it shows now, not at the next poll
                self.post_message(DataFailed(error, since=self.sent_at))
            self._not_applied(error)
            return
        self.result = event.worker.result
        for widget in self.query("Input, Select, Checkbox, Label, #buttons"):
            widget.display = False
        self._say(Group(self.answer(self.result), Text("enter or esc: close", style="dim")))
        self.query_one("#keys", Static).display = False
        self.set_focus(None)

    def _not_applied(self, error: BaseException | None) -> None:
        text = Text()
        if isinstance(error, RowLocked):
            what = "deadlock with another transaction" if isinstance(error, Deadlocked) \
                else "row is locked by another transaction"
            text.append(f"NOT APPLIED — {what}. ", style="bold yellow")
            text.append("Nothing changed (the attempt is journaled). Try again in a moment, or find the "
                        "blocking session.")
        elif isinstance(error, OutcomeUnknown):
            text.append("OUTCOME UNKNOWN — the connection was lost while the database was committing it. ",
                        style="bold red")
            text.append("It may have been applied; it will not be sent again. ", style="bold")
            text.append(f"({sanitize(str(error), max_chars=300)}) Once the banner clears, look at the call: "
                        "its history shows whether this action reached the database.")
        elif isinstance(error, DatabaseUnavailable):
            text.append("NOT APPLIED — the database is unreachable. ", style="bold red")
            text.append("Nothing was applied. ", style="bold")
            # the connection's own words, not its hint: "check --dsn" misleads when the same DSN
            # answered a moment ago
            text.append(f"({sanitize(str(error), max_chars=300)}) Once the banner clears, look at the call "
                        "again before you retry: its history shows every action that reached the database.")
        else:
            text.append("NOT APPLIED — ", style="bold red")
            text.append(describe_failure(error, f"the {type(self).__name__} action"))
            text.append(" You may try again; the call's history shows every action that reached the database.")
        self._say(text)

    def action_leave(self) -> None:
        self.closed = True
        self.dismiss(self.result)


# ----------------------------------------------------------------------------- the call actions


class ActionDialog(GuardedDialog):
    """Any action of console.core.actions.ACTIONS on one call: the words its entry names, a field
    for each choice it takes, the typed id when it asks for one on an unverifiable call."""

    def __init__(self, action: str, job: JobSummary, *, seen_at: float | None = None) -> None:
        super().__init__(seen_at=seen_at)
        self.spec = action_named(action)
        self.words = present.words_of(action)
        self.job = job
        self.query_name = self.spec.query

    def title_text(self) -> Text:
        title = Text()
        title.append(f"{self.words.title} call {self.job.short_id}", style="bold")
        title.append(f"  {sanitize(self.job.tool, max_chars=60)}", style="dim")
        return title

    def what_changes(self) -> Text:
        return self.words.what_changes(self.job, self.seen_seconds())

    def tick(self) -> None:
        self.query_one("#what-changes", Static).update(self.what_changes())

    @property
    def confirms_id(self) -> bool:
        return self.spec.confirm_unverifiable and self.job.side_effect == "mutating_unverifiable"

    def extra_fields(self) -> Iterable[Widget]:
        job = self.job
        if "terminal_state" in self.spec.params:
            yield Label("Mark it as (what really happened, checked outside):")
            # nothing preselected: a guess here would be journaled as the operator's finding
            yield ChoiceSelect([(c, c) for c in self.spec.terminal_states[job.state]], prompt="choose…",
                               allow_blank=True, id="terminal")
        if "force" in self.spec.params and job.lease_live:
            yield SafeCheckbox(f"force: fence the owner out (token {job.fencing_token} → {job.fencing_token + 1}); "
                               "its heartbeat and result will be rejected (space ticks it)", id="force")
        if self.confirms_id:
            yield Label("This side effect cannot be checked. Type the first 8 characters of the call's id (in the "
                        "title above) to confirm:")
            yield Input(placeholder="the call's first 8 characters", id="confirm-id", max_length=8)

    def last_field(self) -> str:
        # an action with choices goes on to them (and force), then Apply: enter in the reason moves on
        if self.confirms_id:
            return "confirm-id"
        return "terminal" if "terminal_state" in self.spec.params else "reason"

    def collect(self) -> dict[str, object] | None:
        choices: dict[str, object] = {}
        if "terminal_state" in self.spec.params:
            chosen = self.query_one("#terminal", Select)
            if chosen.value is Select.BLANK:
                self._say(Text("Choose what really happened: the state is journaled as your finding.",
                               style="bold red"))
                chosen.focus()
                return None
            choices["terminal_state"] = str(chosen.value)
        if "force" in self.spec.params:
            choices["force"] = bool(self.query_one("#force", Checkbox).value) if self.job.lease_live else False
        if self.confirms_id:
            typed = self.query_one("#confirm-id", Input).value.strip().lower()
            if typed != self.job.short_id:
                self._say(Text("Type the first 8 characters of the call's id to confirm this approval.",
                               style="bold red"))
                self.query_one("#confirm-id", Input).focus()
                return None
        return choices

    def guard_words(self) -> Text:
        return present.guard_of(self.spec.name).one(self.job, self.seen_words())

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, Any]) -> object:
        job = self.job
        return actions.perform(conn, self.spec.name, job.id, seen_state=job.state, seen_token=job.fencing_token,
                               operator=operator, reason=reason, **fields)

    def answer(self, result: object) -> Text:
        applied = isinstance(result, Applied)
        text = Text()
        text.append("APPLIED — " if applied else "REFUSED — ", style="bold green" if applied else "bold red")
        text.append(present.action_message(result))  # type: ignore[arg-type]
        request_id = getattr(result, "request_id", None)
        if request_id:
            text.append(f"\nrequest {request_id} is in the call's history.", style="dim")
        return text
