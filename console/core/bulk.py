"""A bulk action's rows, and its plan: which of the calls read in one snapshot it will send and
which it skips, and why (console/core/actions.py says what each action may apply to). Sending is
console/db/bulk.py's; the words are console/operator/present/bulk.py's.

Up to LIMIT calls a bulk action is sent at once (`apply`); over it -- or when asked to run in the
background -- it becomes a bulk operation (migration 0023): the plan's calls, each with the state
and token read for it, frozen in the database and worked in batches by the CLI or the supervisor,
resumable, stoppable. `BulkOperation` is one, as the database keeps it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from console.core.actions import ActionSpec, action_named

# what became of one call of a bulk action
BulkOutcomeKind = Literal["applied", "refused", "failed", "skipped"]
# a bulk operation: running -> finished, or running -> stopping -> stopped (migration 0023)
OperationState = Literal["running", "stopping", "stopped", "finished"]
OPERATION_OVER: tuple[str, ...] = ("stopped", "finished")

# up to this many calls a bulk action is sent at once; over it, it becomes a bulk operation
LIMIT = 1_000


class Readable(Protocol):
    """What a plan reads of a call (console.core.models.JobSummary has it, and so has Selected)."""

    @property
    def id(self) -> uuid.UUID: ...

    @property
    def state(self) -> str: ...

    @property
    def fencing_token(self) -> int: ...

    @property
    def side_effect(self) -> str: ...

    @property
    def lease_live(self) -> bool: ...


class Selected:
    """One call as a plan keeps it: what the guard needs (its id, the state and fencing token read
    for it) and what the plan and its words read (side-effect class, a live lease). Small on
    purpose: an operation's plan may hold hundreds of thousands."""

    __slots__ = ("fencing_token", "id", "lease_live", "side_effect", "state")

    def __init__(self, id: uuid.UUID, state: str, fencing_token: int, side_effect: str, lease_live: bool) -> None:
        self.id = id
        self.state = state
        self.fencing_token = fencing_token
        self.side_effect = side_effect
        self.lease_live = lease_live

    @classmethod
    def of(cls, call: Readable) -> Selected:
        if isinstance(call, Selected):
            return call
        return cls(call.id, call.state, call.fencing_token, call.side_effect, call.lease_live)

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]

    def __repr__(self) -> str:
        return f"Selected({self.short_id}, {self.state}, token {self.fencing_token})"


@dataclass(frozen=True)
class BulkPlan:
    """What a bulk action would do, from one snapshot: the calls it will send and those it skips."""

    action: str
    send: list[Selected]
    skipped: list[tuple[Selected, str]]
    # the action's own parameters as chosen (console.core.actions.CHOICES), sent with every call
    choices: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", action_named(self.action).name)

    @property
    def spec(self) -> ActionSpec:
        return action_named(self.action)

    @property
    def count(self) -> int:
        return len(self.send)

    @property
    def unverifiable(self) -> int:
        return sum(1 for c in self.send if c.side_effect == "mutating_unverifiable")

    @property
    def is_operation(self) -> bool:
        """Over LIMIT calls: sent as a bulk operation, in batches, resumable (never at once)."""
        return self.count > LIMIT

    def by_class_and_state(self) -> list[tuple[str, str, int]]:
        counted = Counter((c.side_effect, c.state) for c in self.send)
        return [(side, state, n) for (side, state), n in sorted(counted.items())]

    def skipped_by_reason(self) -> list[tuple[str, int]]:
        return sorted(Counter(why for _, why in self.skipped).items(), key=lambda kv: -kv[1])


class BulkOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: uuid.UUID
    outcome: BulkOutcomeKind
    state: str
    fencing_token: int
    why: str = ""
    request_id: uuid.UUID | None = None

    @property
    def short_id(self) -> str:
        return str(self.job_id)[:8]


class BulkResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    action: str
    batch_id: uuid.UUID
    outcomes: list[BulkOutcome]

    def count(self, outcome: BulkOutcomeKind) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    @property
    def all_applied(self) -> bool:
        return all(o.outcome == "applied" for o in self.outcomes)

    def not_applied(self) -> list[BulkOutcome]:
        return [o for o in self.outcomes if o.outcome != "applied"]


def plan(action: str, calls: Iterable[Readable], **choices: Any) -> BulkPlan:
    """Split the calls into those the action may apply to, as read, and those it skips (with why)."""
    spec = action_named(action)
    chosen = spec.chosen(choices)
    send: list[Selected] = []
    skipped: list[tuple[Selected, str]] = []
    for call in calls:
        selected = Selected.of(call)
        why = spec.why_not(selected, chosen)
        if why:
            skipped.append((selected, why))
        else:
            send.append(selected)
    return BulkPlan(action=spec.name, send=send, skipped=skipped, choices=chosen)


# ----------------------------------------------------------------------------- operations


class BulkOperation(BaseModel):
    """A bulk operation as the database keeps it (bulk_operations, migration 0023): the contract's
    id, action, filter, total, done, refused, state, operator, and the rest of its record."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: uuid.UUID
    action: str
    filter: str | None = None
    choices: dict[str, Any] = {}
    operator: str
    reason: str
    total: int
    done: int = 0
    applied: int = 0
    refused: int = 0
    failed: int = 0
    skipped: int = 0
    state: OperationState
    background: bool = False
    created_at: datetime
    db_role: str | None = None
    request_id: uuid.UUID | None = None
    updated_at: datetime | None = None
    worked_by: str | None = None
    stop_requested_by: str | None = None
    stop_requested_at: datetime | None = None
    stop_reason: str | None = None
    finished_at: datetime | None = None
    error: str | None = None
    error_at: datetime | None = None
    db_now: datetime | None = None

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]

    @property
    def over(self) -> bool:
        return self.state in OPERATION_OVER

    @property
    def left(self) -> int:
        """Calls not settled yet (a stopped operation never sends them)."""
        return self.total - self.done

    @property
    def not_applied(self) -> int:
        return self.refused + self.failed + self.skipped

    @property
    def all_applied(self) -> bool:
        """Over, and every call it selected was applied."""
        return self.state == "finished" and self.applied == self.total and self.skipped == 0

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    def idle_seconds(self) -> float | None:
        """How long since its last progress (a batch committed), by the database's clock."""
        if self.db_now is None or self.updated_at is None:
            return None
        return max(0.0, (self.db_now - self.updated_at).total_seconds())

    def rate(self) -> float | None:
        """Calls settled per second since it started (to its end, once over)."""
        end = self.finished_at or self.updated_at
        if end is None or self.done == 0:
            return None
        seconds = (end - self.created_at).total_seconds()
        return self.done / seconds if seconds > 0 else None


class OperationCall(BaseModel):
    """One call of an operation that was not applied: refused, failed or skipped, and why."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    job_id: uuid.UUID
    outcome: BulkOutcomeKind
    why: str | None = None
    seen_state: str
    seen_token: int
    request_id: uuid.UUID | None = None
    settled_at: datetime | None = None
    worked_by: str | None = None

    @property
    def short_id(self) -> str:
        return str(self.job_id)[:8]


def operation_document(op: BulkOperation, not_applied: list[OperationCall] | None = None) -> dict[str, Any]:
    """`leasectl bulk status --json`: the operation's record, the contract's keys first; with the
    calls not applied when given (one operation)."""
    record = op.model_dump(mode="json")
    first = ("id", "action", "filter", "total", "done", "refused", "state", "operator")
    document = {key: record[key] for key in first} | {k: v for k, v in record.items() if k not in first}
    if not_applied is not None:
        document["not_applied"] = [c.model_dump(mode="json") for c in not_applied]
    return document

