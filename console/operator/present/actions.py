"""The words of the operator's actions: their keys, their dialogs, their questions, their answers
(applied, or refused with what is true now), looked up by the keys their entries in
console/core/actions.py name (`words`, `guard`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rich.text import Text

from console.core.actions import action_named
from console.core.models import (
    ActionResult,
    Applied,
    JobSummary,
    Shutdown,
    ShutdownDecided,
    ShutdownRequested,
    ShutdownResult,
)
from console.operator.present.words import state_label
from console.shared.text import counted, format_seconds, sanitize


@dataclass(frozen=True)
class ActionWords:
    """Everything an action says, in the console and the CLI alike."""

    key: str  # its key's name in the footer and the help screen
    key_help: str  # the key's tooltip, and its line in the help screen
    palette: str  # its entry in the command palette for the selected call ({id}: its short id)
    palette_help: str  # the entry's second line (the key is added)
    title: str  # the dialog's title: "<title> call 8f1b7c3d"
    bulk_title: str  # the bulk dialog's: "<bulk_title> 3 marked calls"
    verb: str  # the question before one call: "<verb> this call?" ({terminal_state} as chosen)
    bulk_verb: str  # the bulk question: "<bulk_verb> 9 calls"
    nothing: str  # a bulk action that would send nothing: "<nothing>: ..."
    command_help: str  # the CLI command's help (first line: its summary)
    applied: Callable[[Applied], str]  # the answer when applied
    what_changes: Callable[[JobSummary, float], Text]  # one call (seconds since it was read: the times tick)
    change: Callable[[str, Mapping[str, object]], str]  # a bulk plan's row: a state as read, the choices
    unverifiable_warning: str = ""  # a bulk action over unverifiable calls ({n}: how many)
    unverifiable_typed: str = ""  # what is typed to confirm it ({n}: the count)


@dataclass(frozen=True)
class GuardWords:
    """What a guard promises: for one call as the dialog shows it, for marked calls, for a bulk
    plan (the CLI), and in a question's parentheses."""

    one: Callable[[JobSummary, str], Text]  # the call, "(as you saw it 4s ago)"
    marked: Callable[[str], Text]  # "(as you saw it 4s ago)"
    plan: str
    short: Callable[[str, int], str]  # the state and token the question is guarded by


# ----------------------------------------------------------------------------- cancel


def _cancel_applied(result: Applied) -> str:
    if result.state == "cancel_requested":
        return ("cancel requested — NOT stopped yet: the worker hears it at its next heartbeat "
                "and confirms; until then it may still be running")
    return "cancelled (it had not started)"


def _cancel_changes(job: JobSummary, elapsed: float) -> Text:
    text = Text()
    text.append("What will change: ", style="bold")
    if job.state == "queued":
        text.append("queued → cancelled. It never started; nothing ran.")
    else:
        text.append("running → cancel requested. ")
        text.append("This does NOT stop it: ", style="bold yellow")
        text.append(f"the worker ({sanitize(job.owner_id, max_chars=60)}) hears the request at its next "
                    "heartbeat and confirms; until then it may still be running. Cancel is not rollback.")
    return text


def _cancel_change(state: str, choices: Mapping[str, object]) -> str:
    return ("queued → cancelled (it never started)" if state == "queued"
            else "running → cancel requested (NOT stopped until its worker confirms)")


# ----------------------------------------------------------------------------- mark terminal


def _mark_applied(result: Applied) -> str:
    fenced = f"; owner fenced out (token now {result.fencing_token})" if result.fenced else ""
    return f"marked {result.state}{fenced}"


def _mark_changes(job: JobSummary, elapsed: float) -> Text:
    text = Text()
    text.append("What will change: ", style="bold")
    text.append(f"{job.state.replace('_', ' ')} → the state you choose, for good. ")
    if job.lease_live:
        owner = sanitize(job.owner_id, max_chars=60)
        left = (job.lease_left_seconds or 0.0) - elapsed  # counted down from what was read
        if left >= 0:
            text.append(f"The owner {owner} holds a live lease ({format_seconds(left)} left): ",
                        style="bold yellow")
        else:
            text.append(f"The owner {owner}'s lease ran out {format_seconds(-left)} ago, unless it renewed "
                        "it since you looked: ", style="bold yellow")
        text.append("without force the database refuses a live lease; with force the owner is fenced out.")
    else:
        text.append("No live lease: nobody is working on it.")
    return text


def _mark_change(state: str, choices: Mapping[str, object]) -> str:
    fenced = " — the live lease's owner is fenced out (force)" if choices.get("force") and state in (
        "running", "cancel_requested") else ""
    return f"{state_label(state)} → {choices.get('terminal_state')}, for good{fenced}"


# ----------------------------------------------------------------------------- approve a retry


def _approve_applied(result: Applied) -> str:
    return "retry approved: the call is queued again for one more attempt"


def _approve_changes(job: JobSummary, elapsed: float) -> Text:
    text = Text()
    text.append("What will change: ", style="bold")
    text.append("outcome unknown → queued, with room for exactly one more attempt. ")
    text.append("A worker may then run it again", style="bold yellow")
    if job.external_request_id:
        text.append(f"; the previous request {sanitize(job.external_request_id, max_chars=80)} may already have "
                    "taken effect.")
    else:
        text.append(".")
    return text


def _approve_change(state: str, choices: Mapping[str, object]) -> str:
    return "outcome unknown → queued, one more attempt (a worker may run it again)"


ACTION_WORDS: Mapping[str, ActionWords] = {
    "cancel": ActionWords(
        key="Cancel", key_help="Request a cancel of the selected call",
        palette="Cancel call {id}", palette_help="Request a cancel",
        title="Cancel", bulk_title="Cancel", verb="Cancel", bulk_verb="cancel", nothing="Nothing to cancel",
        command_help="Cancel a call, or every call --where selects (queued: cancelled; running: cancel requested)."
                     "\n\nA running call is NOT stopped until its worker confirms.",
        applied=_cancel_applied, what_changes=_cancel_changes, change=_cancel_change,
    ),
    "mark_terminal": ActionWords(
        key="Mark terminal", key_help="Close the call after checking outside",
        palette="Mark call {id} terminal", palette_help="After checking outside",
        title="Mark terminal", bulk_title="Mark terminal", verb="Mark as {terminal_state}", bulk_verb="mark terminal",
        nothing="Nothing to mark terminal",
        command_help="Close a call, or every call --where selects, after checking outside what really happened.",
        applied=_mark_applied, what_changes=_mark_changes, change=_mark_change,
    ),
    "approve_retry": ActionWords(
        key="Approve retry", key_help="Outcome unknown: allow one more attempt",
        palette="Approve a retry of {id}", palette_help="Outcome unknown only",
        title="Approve a retry of", bulk_title="Approve retries of", verb="Approve a retry of",
        bulk_verb="approve a retry of", nothing="No retry to approve",
        command_help="Allow one more attempt of a call whose outcome is unknown, or of every call --where selects."
                     "\n\nNever by the call's own executor (the database refuses).",
        applied=_approve_applied, what_changes=_approve_changes, change=_approve_change,
        unverifiable_warning=" — {n} of them UNVERIFIABLE: a retry may repeat a payment nobody can check",
        unverifiable_typed="approve {n} unverifiable",
    ),
}


# ----------------------------------------------------------------------------- guards


def _state_and_token_one(job: JobSummary, seen: str) -> Text:
    text = Text()
    text.append("Guard: ", style="bold")
    text.append("only if the call is still ")
    text.append(job.state.replace("_", " "), style="bold")
    text.append(" with fencing token ")
    text.append(str(job.fencing_token), style="bold")
    text.append(f"{seen}; if it changed, nothing happens and you are told what is true now.")
    return text


def _state_and_token_marked(seen: str) -> Text:
    text = Text()
    text.append("Guard: ", style="bold")
    text.append("each call only if it is still in the state and under the fencing token just read for it")
    text.append(f"{seen}; a call that changed is refused and journaled, never acted on blind. "
                "Every call is journaled under one batch id.")
    return text


GUARD_WORDS: Mapping[str, GuardWords] = {
    "seen_state_and_token": GuardWords(
        one=_state_and_token_one,
        marked=_state_and_token_marked,
        plan="Guard: each call only if it is still in the state and under the fencing token read for it just now, "
             "in one snapshot; a call that changed is refused and journaled, never acted on blind. Every call is "
             "journaled under one batch id.",
        short=lambda state, token: f"guard: state {state}, token {token}",
    ),
}


def words_of(action: str) -> ActionWords:
    return ACTION_WORDS[action_named(action).words]


def guard_of(action: str) -> GuardWords:
    return GUARD_WORDS[action_named(action).guard]


# ----------------------------------------------------------------------------- questions and answers


def action_verb(action: str, terminal_state: object = None, **choices: object) -> str:
    """The verb of the question before an action: "Cancel this call?", "Mark as failed this call?"."""
    return words_of(action).verb.format(terminal_state=terminal_state, **choices)


def action_message(result: ActionResult) -> str:
    """The database's answer to an action, in words; what is true now when it was refused."""
    if isinstance(result, Applied):
        return words_of(result.action).applied(result)
    reason = sanitize(result.reason, max_chars=300)
    if result.now is None:
        return reason
    now = result.now
    return (f"{reason} — now state {now.state}, owner {sanitize(now.owner_id or '-', max_chars=80)}, "
            f"token {now.fencing_token}")


def shutdown_message(result: ShutdownResult) -> str:
    if isinstance(result, ShutdownRequested):
        s = result.shutdown
        return (f"{s.mode} of {sanitize(s.root_agent_id, max_chars=80)} requested "
                f"({counted(s.agents, 'agent')}, window {s.window_seconds:g}s): the supervisor carries it out and "
                "writes the reconciliation record "
                "before anything is terminated")
    return sanitize(result.reason, max_chars=300)


def decision_message(accept: bool, result: ShutdownDecided | Shutdown) -> tuple[bool, str]:
    """A decision on a proposed shutdown: (applied, what it means now)."""
    if isinstance(result, ShutdownDecided):
        if result.state == "requested":
            return True, (f"the {result.mode} of {sanitize(result.root_agent_id, max_chars=80)} is requested "
                          f"(window {result.window_seconds:g}s); the supervisor carries it out and writes the "
                          "reconciliation record")
        return True, f"the {result.mode} of {sanitize(result.root_agent_id, max_chars=80)} will not start (declined)"
    verb = "accept" if accept else "decline"
    who = f" by {sanitize(result.decided_by, max_chars=80)}" if result.decided_by else ""
    return False, (f"nothing to {verb}: shutdown {result.short_id} is {result.state}{who}, no longer proposed")
