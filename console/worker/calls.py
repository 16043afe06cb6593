"""What a worker holds and what a handler may raise: a claimed call, its outcome, the handler's
signals. No database, no threads: the vocabulary the rest of console.worker shares."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# ------------------------------------------------------------------ what a handler can raise


class LeaseLost(Exception):
    """This worker is no longer the owner. Stop; do nothing irreversible."""


class OwnershipUnknown(Exception):
    """The database cannot confirm ownership in time. Do not start a new irreversible step."""


class CancelRequested(Exception):
    """An operator asked this call to stop. Raise it from a handler to confirm the cancel."""


class ToolFailed(Exception):
    """The tool answered with a failure. `retryable` decides between queued and failed."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class DeadlinePassed(ToolFailed):
    """The chain's deadline has passed (or too little of it is left for the step): no new step may
    start. Past the deadline nothing is written for the call (its lease ended with it) and the
    sweep ends it; before it, fail.sql decides whether time is left for another attempt."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message, retryable=retryable)


class ToolNoAnswer(Exception):
    """The tool gave no answer: after a side effect started, its outcome is unknown."""


class CheckRequired(Exception):
    """A mutating_verifiable call carries a request that may already have run (an earlier
    attempt's, or an earlier step of this one): no new request leaves until the service was asked
    what became of it and ctx.record_check() recorded `not_done` (docs/seeds.md §004.8: ask for the
    status first, then decide; the database holds the same rule, migration 0014). Raised by
    ctx.start_side_effect(); nothing was sent. Left uncaught, the call waits for a human
    (outcome_unknown): a handler that cannot check must not guess."""

    def __init__(self, short_id: str, external_request_id: str) -> None:
        super().__init__(f"call {short_id} carries request {external_request_id}: ask the service and "
                         f"record_check first (ctx.record_check('done' | 'not_done' | 'unknown'))")
        self.external_request_id = external_request_id


class OutcomeUnknown(Exception):
    """ctx.record_check('unknown'): nobody can say whether the earlier request ran, so the database
    has moved the call to outcome_unknown and a human decides. The call has ended: let it
    propagate (the worker writes nothing more for it)."""


# ------------------------------------------------------------------------------ the call


@dataclass(frozen=True)
class ClaimedCall:
    id: uuid.UUID
    tool: str
    payload: Any
    fencing_token: int
    attempt: int
    idempotency_key: str
    side_effect: str
    lease_seconds: float
    heartbeat_seconds: float
    jitter_seconds: float
    lease_until: datetime
    deadline_at: datetime | None
    agent_id: str | None
    # set when a previous owner recorded a side effect: the request may already have run
    previous_side_effect_at: datetime | None
    previous_request_id: str | None
    # the chain the call belongs to (its own id for a first call) and its stage in it
    chain_id: uuid.UUID | None = None
    stage: int = 0
    # the call's W3C trace id (set at enqueue; a chain's next stage carries it), or None.
    # trace_known: the claim's row said (a claim statement from before it returned trace_id did
    # not: console.worker.tracing reads it when it is first needed)
    trace_id: str | None = None
    trace_known: bool = True

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ClaimedCall:
        return cls(
            id=row["id"], tool=row["tool"], payload=row["payload"],
            fencing_token=row["fencing_token"], attempt=row["attempt"],
            idempotency_key=row["idempotency_key"], side_effect=row["side_effect"],
            lease_seconds=float(row["lease_seconds"]),
            heartbeat_seconds=float(row["heartbeat_seconds"]),
            jitter_seconds=float(row["jitter_seconds"]), lease_until=row["lease_until"],
            deadline_at=row["deadline_at"], agent_id=row["agent_id"],
            previous_side_effect_at=row["side_effect_started_at"],
            previous_request_id=row["external_request_id"],
            chain_id=row.get("chain_id"), stage=row.get("stage") or 0,
            trace_id=row.get("trace_id"), trace_known="trace_id" in row,
        )

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]


# a claim as the worker keeps it: the call, the monotonic time its claim was sent, and the lease
# time the database reported left at that moment
Claimed = tuple[ClaimedCall, float, float]


@dataclass(frozen=True)
class NextStage:
    """A handler's answer that finishes its call with `result` AND enqueues the next stage of the
    call's chain, in one transaction (worker/complete_and_enqueue.sql): the next stage exists if
    and only if this one's result was stored. Made by ctx.next_stage(); see console.worker.runner."""

    tool: str
    idempotency_key: str
    payload: Any
    result: Any = None


@dataclass
class CallOutcome:
    """What happened to one claimed call, from this worker's point of view."""

    job_id: uuid.UUID
    fencing_token: int
    # succeeded | result_rejected | cancelled | failed | requeued | outcome_unknown | lease_lost
    # | deadline_passed (the call outlived its deadline: nothing more could be written for it)
    status: str
    detail: str = ""
    completed_despite_cancel: bool = False
    # the next call, claimed in the same transaction as this one's completion (run loop only)
    next_call: Claimed | None = None
    # the chain's next stage, enqueued in the same transaction as this one's completion (NextStage);
    # None when there was none, or when it was refused (its chain has a cancel request)
    next_stage_id: uuid.UUID | None = None


def serialise_result(result: Any) -> bytes:
    """A result as the worker sends it (complete.sql's `result`) and as result_rejected keeps it
    (result_sha256, result_size): one canonical JSON text, keys sorted, no spaces, UTF-8, so that
    whoever holds the result can hash it again and compare. Raises TypeError or ValueError for a
    result that is not JSON."""
    return json.dumps(result, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()



class PreconditionLapsed(Exception):
    """A write's precondition no longer held once the shared connection was free: not sent."""


class HandlerAbandoned(Exception):
    """The call's handler outlived its deadline by a heartbeat interval: the worker stops waiting
    (the call ends as deadline_passed; whatever the handler returns later is journaled, never
    written)."""
