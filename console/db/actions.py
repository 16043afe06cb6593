"""Operator actions: the guarded statements of queries/operator/, the same for console and CLI,
each run as its entry in console/core/actions.py says (the statement, its parameters).

Each returns Applied or Refused — the truth, with what is true now when refused. Each is
journaled by the statement itself (applied or refused); an attempt that never reached its
guard (row locked, statement timeout) is journaled separately, then reported as an error.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel

from console.core.actions import action_named
from console.core.models import (
    ActionResult,
    Applied,
    GrantRow,
    JobSummary,
    Refused,
    Shutdown,
    ShutdownDecided,
    ShutdownMode,
    ShutdownRefused,
    ShutdownRequested,
    ShutdownResult,
    ToolPause,
    ToolSettings,
)
from console.db.connect import Conn, Row, action_transaction, run, run_one
from console.db.reads import grant, job, shutdown, tool_settings
from console.shared.config import MAX_OPERATOR_CHARS, MAX_REASON_CHARS
from console.shared.errors import BadInput, LeasectlError, RowLocked, StatementTimedOut
from console.shared.text import sanitize

log = logging.getLogger("leasectl.actions")
A = TypeVar("A", bound=BaseModel)
N = TypeVar("N")


def checked_words(reason: str, operator: str) -> tuple[str, str]:
    """The reason and the operator's name as they will be journaled: required, and bounded (a
    reason is an input, not a place for a pasted log)."""
    reason, operator = reason.strip(), operator.strip()
    if not reason:
        raise BadInput("a reason is required: it is journaled with the action")
    if len(reason) > MAX_REASON_CHARS:
        raise BadInput(f"the reason is {len(reason):,} characters long; at most {MAX_REASON_CHARS:,} are journaled",
                       hint="link to the ticket or the log instead of pasting it")
    if not operator:
        raise BadInput("an operator name is required")
    if len(operator) > MAX_OPERATOR_CHARS:
        raise BadInput(f"the operator name is longer than {MAX_OPERATOR_CHARS} characters")
    return reason, operator


def perform(conn: Conn, action: str, job_id: uuid.UUID, *, seen_state: str, seen_token: int, operator: str,
            reason: str, **choices: object) -> ActionResult:
    """Any action of console.core.actions.ACTIONS, by name: its statement, with the guard's
    parameters and its own (`choices`: terminal_state, force). What the CLI and the console's
    dialogs call."""
    spec = action_named(action)
    extra = spec.bind(choices)
    reason, operator = checked_words(reason, operator)
    request_id = uuid.uuid4()
    try:
        with action_transaction(conn, f"the {spec.name.replace('_', ' ')} of call {job_id}",
                                look=look_at_journal(job_id, request_id)):
            run(conn, "meta/request_id", request_id=str(request_id))
            row = run_one(conn, spec.query, job_id=job_id, seen_state=seen_state, seen_token=seen_token,
                          operator=operator, reason=reason, **extra)
    except (RowLocked, StatementTimedOut) as exc:
        journal_failure(conn, spec.name, job_id, operator, reason, exc, seen_state, seen_token, request_id)
        raise
    if row is not None:
        return Applied(action=spec.name, job_id=job_id, state=row["state"], fencing_token=row["fencing_token"],
                       owner_id=row.get("owner_id"), request_id=row["request_id"],
                       fenced=bool(row.get("fenced")))
    why, now = refusal_of(conn, job_id, request_id)
    if now is None:
        raise BadInput(f"no call {job_id}")
    return Refused(action=spec.name, job_id=job_id, reason=why, now=now, request_id=request_id)


# Named shortcuts over `perform`, for scripts, the demo and the tests; the console and the CLI act
# by name, and a new action needs none.
def cancel(conn: Conn, job_id: uuid.UUID, *, seen_state: str, seen_token: int, operator: str,
           reason: str) -> ActionResult:
    return perform(conn, "cancel", job_id, seen_state=seen_state, seen_token=seen_token, operator=operator,
                   reason=reason)


def mark_terminal(conn: Conn, job_id: uuid.UUID, *, seen_state: str, seen_token: int, terminal_state: str,
                  operator: str, reason: str, force: bool = False) -> ActionResult:
    return perform(conn, "mark_terminal", job_id, seen_state=seen_state, seen_token=seen_token, operator=operator,
                   reason=reason, terminal_state=terminal_state, force=force)


def approve_retry(conn: Conn, job_id: uuid.UUID, *, seen_state: str, seen_token: int, operator: str,
                  reason: str) -> ActionResult:
    return perform(conn, "approve_retry", job_id, seen_state=seen_state, seen_token=seen_token, operator=operator,
                   reason=reason)


def look_at_journal(job_id: uuid.UUID, request_id: uuid.UUID) -> str:
    """Where to learn whether an action whose commit went unanswered was applied: the operator
    statement journals its request id in the same transaction, so the journal has it if and only
    if the action committed."""
    return (f"look at the journal once the database answers: `leasectl audit actions --job {job_id}` lists "
            f"request {request_id} if and only if it was applied (so does the call's history)")


def refusal_of(conn: Conn, job_id: uuid.UUID, request_id: uuid.UUID) -> tuple[str, JobSummary | None]:
    """Why the guard refused (the journal says, by request id), and what is true now."""
    now = job(conn, job_id)
    outcome = run_one(conn, "views/action_outcome", request_id=request_id)
    why = (outcome or {}).get("refusal") or "the call changed since you looked"
    return why, JobSummary.model_validate(now.model_dump()) if now else None


def journal_failure(conn: Conn, action: str, job_id: uuid.UUID, operator: str, reason: str, error: LeasectlError,
                    seen_state: str, seen_token: int, request_id: uuid.UUID) -> None:
    """An attempt that never reached its guard, journaled in its own statement; details.cause
    tells lock waits (lock_timeout, 55P03) from heavy statements (statement_timeout, 57014)."""
    cause = "lock_timeout" if isinstance(error, RowLocked) else "statement_timeout"
    try:
        run_one(conn, "operator/journal_failure", job_id=job_id, action=action, operator=operator,
                reason=reason, error=str(error), seen_state=seen_state, seen_token=seen_token,
                request_id=request_id, cause=cause)
    except LeasectlError as exc:  # the journal is best effort here: the action itself did nothing
        log.warning("could not journal the failed %s on %s: %s", action, job_id, exc)


# ----------------------------------------------------------------------------- fleet

MAX_WINDOW_SECONDS = 7 * 24 * 3600


def request_shutdown(conn: Conn, agent_id: str, *, mode: ShutdownMode, operator: str, reason: str,
                     window_seconds: float, replacement: str | None = None) -> ShutdownResult:
    """Ask the control plane to drain or abort the subtree rooted at agent_id; with a replacement
    (the upgrade path, migration 0018) its queued calls move to that new generation.

    Refused (the truth, journaled) when the agent is not running, a shutdown over its subtree is
    already under way or proposed, or the replacement cannot take over; an operator who is an
    agent of that subtree is refused by the database.
    """
    reason, operator = checked_words(reason, operator)
    if mode not in ("drain", "abort"):
        raise BadInput(f"unknown shutdown mode '{mode}': drain or abort")
    if not 0 < window_seconds <= MAX_WINDOW_SECONDS:
        raise BadInput(f"the window must be more than 0 and at most {MAX_WINDOW_SECONDS} seconds "
                       f"(got {window_seconds:g})")
    request_id = uuid.uuid4()
    with action_transaction(conn, f"the {mode} of {sanitize(agent_id, max_chars=80)}'s subtree",
                            look=f"`leasectl fleet` shows whether a {mode} of that subtree is under way "
                                 f"(request {request_id})"):
        run(conn, "meta/request_id", request_id=str(request_id))
        row = run_one(conn, "operator/request_shutdown", root_agent_id=agent_id, mode=mode, requested_by=operator,
                      reason=reason, window_seconds=window_seconds, replacement_agent_id=replacement)
    if row is not None:
        found = shutdown(conn, row["id"])
        assert found is not None
        return ShutdownRequested(shutdown=found, request_id=request_id)
    refusal = run_one(conn, "views/fleet_refusal", request_id=request_id)
    if refusal is None:
        raise BadInput(f"no agent {sanitize(agent_id)}", hint="`leasectl fleet` lists the agents")
    return ShutdownRefused(mode=mode, root_agent_id=agent_id, reason=refusal["refusal"] or "refused",
                           request_id=request_id)


def decide_shutdown(conn: Conn, shutdown_id: uuid.UUID, *, accept: bool, operator: str, reason: str,
                    window_seconds: float | None = None) -> ShutdownDecided | Shutdown:
    """Accept a proposed shutdown (it becomes requested; the supervisor carries it out) or decline
    it. The decision (applied), or the shutdown as it is when it was no longer proposed; BadInput
    for no such shutdown."""
    reason, operator = checked_words(reason, operator)
    if window_seconds is not None and not 0 < window_seconds <= MAX_WINDOW_SECONDS:
        raise BadInput(f"the window must be more than 0 and at most {MAX_WINDOW_SECONDS} seconds "
                       f"(got {window_seconds:g})")
    verb = "accept" if accept else "decline"
    request_id = uuid.uuid4()
    with action_transaction(conn, f"the {verb} of shutdown {str(shutdown_id)[:8]}",
                            look=f"`leasectl shutdowns` shows whether it was decided (request {request_id})"):
        run(conn, "meta/request_id", request_id=str(request_id))
        row = run_one(conn, "operator/decide_shutdown", shutdown_id=shutdown_id, operator=operator, accept=accept,
                      reason=reason, window_seconds=window_seconds)
    return _applied_or_as_is(row, ShutdownDecided, lambda: shutdown(conn, shutdown_id),
                             BadInput(f"no shutdown {shutdown_id}", hint="`leasectl shutdowns` lists them"))


def pause_tool(conn: Conn, tool: str, *, operator: str, reason: str) -> ToolPause | ToolSettings:
    """Pause a tool: its calls are no longer claimed. The pause (applied), or the tool as it is
    when nothing changed (already paused); BadInput for a tool that is not registered."""
    return _pause_or_resume(conn, "pause", tool, operator=operator, reason=reason)


def resume_tool(conn: Conn, tool: str, *, operator: str, reason: str) -> ToolPause | ToolSettings:
    """Resume a paused tool. The pause it ended (applied), or the tool as it is when it was not paused."""
    return _pause_or_resume(conn, "resume", tool, operator=operator, reason=reason)


def _pause_or_resume(conn: Conn, verb: str, tool: str, *, operator: str, reason: str) -> ToolPause | ToolSettings:
    reason, operator = checked_words(reason, operator)
    request_id = uuid.uuid4()
    with action_transaction(conn, f"the {verb} of tool {sanitize(tool, max_chars=80)}",
                            look=f"`leasectl tools` shows whether the tool is paused (request {request_id})"):
        run(conn, "meta/request_id", request_id=str(request_id))
        if verb == "pause":
            row = run_one(conn, "operator/pause_tool", tool=tool, paused_by=operator, reason=reason)
        else:
            row = run_one(conn, "operator/resume_tool", tool=tool, resumed_by=operator, reason=reason)
    return _applied_or_as_is(row, ToolPause, lambda: tool_settings(conn, tool),
                             BadInput(f"no tool {sanitize(tool)} is registered", hint="`leasectl tools` lists them"))


def _applied_or_as_is(row: Row | None, applied: type[A], as_is: Callable[[], N | None], missing: BadInput) -> A | N:
    """An action's answer where its statement returns the change: the change when it was applied,
    else the row as it is now (why nothing changed: already paused, no longer proposed), `missing`
    raised when there is no such row at all."""
    if row is not None:
        return applied.model_validate(row)
    now = as_is()
    if now is None:
        raise missing
    return now


def revoke_grant(conn: Conn, prefix: str, *, operator: str, reason: str) -> tuple[bool, GrantRow]:
    """Revoke one grant as the control plane, journaled with the operator's name and reason
    (migration 0017). (True, the grant as revoked) or (False, the grant as it is: revoked already)."""
    reason, operator = checked_words(reason, operator)
    found = grant(conn, prefix)
    request_id = uuid.uuid4()
    with action_transaction(conn, f"the revocation of grant {str(found.id)[:8]}",
                            look=f"`leasectl fleet` shows the grants still held (request {request_id})"):
        run(conn, "meta/request_id", request_id=str(request_id))
        row = run_one(conn, "operator/revoke_grant", grant_id=found.id, operator=operator, reason=reason)
    return row is not None, grant(conn, str(found.id))
