"""What a worker holds and what a handler may raise: a claimed call, its outcome, the handler's
signals. No database, no threads: the vocabulary the rest of console.worker shares."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from console.worker.context import CallContext

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
    """The chain's deadline has passed: no new step may start. fail.sql records it for good."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


class ToolNoAnswer(Exception):
    """The tool gave no answer: after a side effect started, its outcome is unknown."""


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
        )

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]


Handler = Callable[["CallContext"], Any]

# a claim as the worker keeps it: the call, the monotonic time its claim was sent, and the lease
# time the database reported left at that moment
Claimed = tuple[ClaimedCall, float, float]


@dataclass
class CallOutcome:
    """What happened to one claimed call, from this worker's point of view."""

    job_id: uuid.UUID
    fencing_token: int
    status: str  # succeeded | result_rejected | cancelled | failed | requeued | outcome_unknown | lease_lost
    detail: str = ""
    completed_despite_cancel: bool = False
    # the next call, claimed in the same transaction as this one's completion (run loop only)
    next_call: Claimed | None = None



class PreconditionLapsed(Exception):
    """A write's precondition no longer held once the shared connection was free: not sent."""
