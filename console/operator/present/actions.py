"""The words of an action's answer: applied, or refused with what is true now."""

from __future__ import annotations

from console.core.models import Action, ActionResult, Applied, ShutdownRequested, ShutdownResult
from console.shared.text import counted, sanitize


def action_verb(action: Action, terminal_state: str | None = None) -> str:
    """The verb of the question before an action: "Cancel this call?", "Mark as failed this call?"."""
    if action == "mark_terminal":
        return f"Mark as {terminal_state}"
    return "Cancel" if action == "cancel" else "Approve a retry of"


def action_message(result: ActionResult) -> str:
    """The database's answer to an action, in words; what is true now when it was refused."""
    if isinstance(result, Applied):
        if result.action == "cancel" and result.state == "cancel_requested":
            return ("cancel requested — NOT stopped yet: the worker hears it at its next heartbeat "
                    "and confirms; until then it may still be running")
        if result.action == "cancel":
            return "cancelled (it had not started)"
        if result.action == "approve_retry":
            return "retry approved: the call is queued again for one more attempt"
        fenced = f"; owner fenced out (token now {result.fencing_token})" if result.fenced else ""
        return f"marked {result.state}{fenced}"
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
