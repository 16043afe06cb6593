"""The bulk dialog (`c` `t` `a` on marked calls): one dialog for every marked call, a
confirmation sized to what it touches.

It reads the marked calls again, in one snapshot, and shows what the action will touch: counts by
side-effect class and state, what changes for each, what will be skipped and why, the guard. The
reason is required, and the count is typed to confirm (`approve N unverifiable` for retries of
unverifiable side effects). The answer is a line per call; afterwards only the calls that were not
applied stay marked on the list, so a second look is one key away. When nothing would be sent
(every marked call would be skipped) the dialog says there is nothing to do, asks for no count
and cannot apply. Everything else -- type-ahead, esc, the one failure handler -- is GuardedDialog's.

A bulk operation (over 1,000 calls, started by the CLI or worked by the supervisor) has its own
screen here, BulkOperationScreen: its progress, refreshed every second while it runs, the calls not
applied, and `s` to stop it (StopOperationDialog). The list of operations is
console/operator/tui/screens/operations.py (`0` anywhere in the console).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar, cast

from rich.console import Group, RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Footer, Input, Label, Select, Static

from console.core.actions import action_named
from console.core.bulk import BulkOperation, BulkPlan, BulkResult, OperationCall, Selected
from console.core.models import TERMINAL_STATES
from console.db import bulk, reads
from console.db.connect import Conn
from console.operator import present
from console.operator.present import bulk as words
from console.operator.tui.cells import Cell
from console.operator.tui.failures import describe_failure
from console.operator.tui.screens.action import ChoiceSelect, GuardedDialog, SafeCheckbox
from console.operator.tui.screens.base import BACK_BINDING, PollingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.livetable import Column, LiveTable, keyed_rows
from console.operator.tui.widgets.status import TopChrome
from console.shared.text import counted


class BulkDialog(GuardedDialog):
    """Any action of console.core.actions.ACTIONS on the marked calls."""

    def __init__(self, action: str, ids: list[uuid.UUID], *, seen_at: float | None = None) -> None:
        super().__init__(seen_at=seen_at)
        self.spec = action_named(action)
        self.action = self.spec.name
        self.ids = ids
        self.query_name = self.spec.query
        self.calls: list[Selected] | None = None
        self.plan: BulkPlan | None = None

    # ------------------------------------------------------------------ the marked calls, read again
    def on_mount(self) -> None:
        # GuardedDialog's on_mount runs too (Textual calls every class's handler)
        self.aside.read("bulk-snapshot", lambda conn: bulk.selection(conn, ids=self.ids), self._calls_read,
                        self._calls_not_read)

    def _calls_read(self, calls: list[Selected]) -> None:
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
        said: RenderableType = words.plan_words(self.plan, with_guard=False)
        if self.plan.is_operation:  # said before the count is typed: it is not sent from here
            said = Group(said, Text(words.operation_question(self.plan) + " Started from the console, it is worked "
                                    "by the supervisor (`leasectl supervise`), or by `leasectl bulk resume ID`.",
                                    style="bold yellow"))
        self.query_one("#what-changes", Static).update(said)
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

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, Any]) -> BulkResult | BulkOperation:
        assert self.plan is not None
        if self.plan.is_operation:  # over 1,000 calls: an operation, worked by the supervisor
            return bulk.start(conn, self.plan, operator=operator, reason=reason, background=True)
        return bulk.apply(conn, self.plan, operator=operator, reason=reason)

    def answer(self, result: object) -> RenderableType:
        if isinstance(result, BulkOperation):
            return Group(words.started_words(result, here=False),
                         Text("0 lists the bulk operations; enter on one shows its progress", style="dim"))
        assert isinstance(result, BulkResult)
        head = Text()
        head.append("DONE — " if result.all_applied else "NOT ALL APPLIED — ",
                    style="bold green" if result.all_applied else "bold red")
        head.append_text(words.result_words(result))
        if not result.all_applied:
            head.append("\nThe calls not applied stay marked on the list.", style="bold yellow")
        return Group(head, words.result_table(result, limit=10))


# ----------------------------------------------------------------------------- bulk operations


NOT_APPLIED_COLUMNS = [Column("call", "call", 8, 0), Column("outcome", "outcome", 8, 0),
                       Column("planned", "as planned", 22, 2), Column("why", "why", 60, 1)]


class BulkOperationScreen(PollingScreen):
    """One bulk operation's progress (migration 0023): what it does, its state, a bar of the calls
    settled, applied / refused / failed, who started it and who asked it to stop, the last error a
    worker met, and the calls not applied (`enter` opens one). It refreshes every second while the
    operation runs. `s` stops it (a reason, journaled): the batches in flight finish, no other begins."""

    CSS_PATH = "bulk.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        BACK_BINDING,
        Binding("s", "stop_operation", "Stop", tooltip="Stop this operation: the batches in flight finish, no "
                                                       "other begins (a reason is journaled)"),
        Binding("enter", "open_call", "Open call", tooltip="The selected call that was not applied"),
    ]
    poll_seconds = 1.0

    def __init__(self, operation_id: uuid.UUID) -> None:
        super().__init__()
        self.operation_id = operation_id
        self.crumb = f"bulk {str(operation_id)[:8]}"
        self.operation: BulkOperation | None = None

    def compose(self) -> ComposeResult:
        yield TopChrome()
        with VerticalScroll(id="operation-body"):
            yield Static(Text("Reading the operation…", style="dim"), id="operation-progress")
            yield Label("Calls not applied (refused, failed, skipped) — enter opens one", id="not-applied-title",
                        classes="section-title")
            yield LiveTable(NOT_APPLIED_COLUMNS, id="not-applied")
        yield Footer()

    def load(self, conn: Conn) -> tuple[BulkOperation | None, list[OperationCall], datetime]:
        op = bulk.operation(conn, self.operation_id)
        calls = bulk.not_applied(conn, self.operation_id, limit=500) if op is not None and op.not_applied else []
        return op, calls, op.db_now if op is not None and op.db_now else reads.db_info(conn).db_now

    def db_now_of(self, data: tuple[BulkOperation | None, list[OperationCall], datetime]) -> datetime:
        return data[2]

    def show(self, data: tuple[BulkOperation | None, list[OperationCall], datetime]) -> None:
        op, calls, _now = data
        self.operation = op
        progress = self.query_one("#operation-progress", Static)
        if op is None:
            progress.update(Text(f"No bulk operation {self.operation_id}.", style="bold red"))
            return
        width = max(20, min(60, self.size.width - 10))
        progress.update(words.operation_panel(op, bar_width=width))
        table = self.query_one("#not-applied", LiveTable)
        keyed_rows(table, [(str(c.job_id), {
            "call": Cell(c.short_id, "bold"), "outcome": Cell(c.outcome.upper(), words.OUTCOME_STYLES[c.outcome]),
            "planned": Cell(f"{c.seen_state.replace('_', ' ')} #{c.seen_token}"), "why": Cell(c.why or "", "dim")})
            for c in calls])
        table.display = bool(calls)
        self.query_one("#not-applied-title", Label).display = bool(calls)
        # an operation that is over changes no more: read it now and then, not every second
        self.poll_seconds = 30.0 if op.over else 1.0
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_operation":
            if self.leasectl.session.read_only_reason:
                return False  # a read-only console is offered no action
            return self.operation is None or self.operation.state == "running"
        return super().check_action(action, parameters)

    def action_stop_operation(self) -> None:
        ask_to_stop(self, self.operation)

    def action_open_call(self) -> None:
        key = self.query_one("#not-applied", LiveTable).cursor_key
        if not self.chosen(key, "a call"):
            return
        self.app.push_screen(DetailScreen(uuid.UUID(key)))

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_call()


def ask_to_stop(screen: PollingScreen, op: BulkOperation | None) -> None:
    """`s` on an operation (its progress, or the list of them): the stop dialog, or why not."""
    if not screen.ready_to_act(op, "an operation"):
        return
    if op.state != "running":
        screen.app.notify(f"Operation {op.short_id} is {op.state}: there is nothing to stop.", title="Nothing to do",
                          severity="warning")
        return
    screen.app.push_screen(StopOperationDialog(op, seen_at=screen.fetched_at), lambda _result: screen.wake())


class StopOperationDialog(GuardedDialog):
    """Stop a running bulk operation (`s` on its progress or on the operations list): a reason, then
    the database's answer -- stopped, stopping (a batch in flight finishes first), or refused (it
    was over already; journaled)."""

    query_name = "bulk/stop"

    def __init__(self, operation: BulkOperation, *, seen_at: float | None = None) -> None:
        super().__init__(seen_at=seen_at)
        self.operation = operation

    def title_text(self) -> Text:
        title = Text()
        title.append(f"Stop bulk operation {self.operation.short_id}", style="bold")
        title.append(f"  {words.what_it_does(self.operation)}", style="dim")
        return title

    def what_changes(self) -> Text:
        op = self.operation
        text = Text()
        text.append("The batches in flight finish (their calls are settled); no other batch begins; ", style="bold")
        text.append(f"the calls not reached ({op.left:,} of {op.total:,} when last read) are never sent. "
                    "No call is undone: what was applied stays applied.")
        return text

    def guard_words(self) -> Text:
        return Text("Only a running operation stops: the database refuses a stop of one that is over, and journals "
                    f"the refusal{self.seen_words()}.", style="dim")

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, Any]) -> tuple[bool, BulkOperation]:
        return bulk.stop(conn, self.operation.id, operator=operator, reason=reason)

    def answer(self, result: object) -> RenderableType:
        stopped, op = cast(tuple[bool, BulkOperation], result)
        head = Text()
        if stopped and op.state == "stopped":
            head.append("STOPPED — ", style="bold magenta")
        elif stopped:
            head.append("STOPPING — a batch in flight finishes first — ", style="bold yellow")
        else:
            head.append(f"NOT STOPPED — the operation is {op.state} — ", style="bold red")
        head.append_text(words.counts_words(op))
        return head
