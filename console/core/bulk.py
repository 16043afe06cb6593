"""A bulk action's rows, and its plan: which of the calls read in one snapshot it will send and
which it skips, and why (console/core/actions.py says what each action may apply to). Sending is
console/db/bulk.py's; the words are console/operator/present/bulk.py's."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from console.core.actions import ActionSpec, action_named
from console.core.models import JobSummary

# what became of one call of a bulk action
BulkOutcomeKind = Literal["applied", "refused", "failed", "skipped"]


class BulkPlan(BaseModel):
    """What a bulk action would do, from one snapshot: the calls it will send and those it skips."""

    model_config = ConfigDict(frozen=True)

    action: str
    send: list[JobSummary]
    skipped: list[tuple[JobSummary, str]]
    # the action's own parameters as chosen (console.core.actions.CHOICES), sent with every call
    choices: dict[str, Any] = {}

    @field_validator("action")
    @classmethod
    def _known(cls, action: str) -> str:
        return action_named(action).name

    @property
    def spec(self) -> ActionSpec:
        return action_named(self.action)

    @property
    def count(self) -> int:
        return len(self.send)

    @property
    def unverifiable(self) -> int:
        return sum(1 for c in self.send if c.side_effect == "mutating_unverifiable")

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


def plan(action: str, calls: list[JobSummary], **choices: Any) -> BulkPlan:
    """Split the calls into those the action may apply to, as read, and those it skips (with why)."""
    spec = action_named(action)
    chosen = spec.chosen(choices)
    send, skipped = [], []
    for call in calls:
        why = spec.why_not(call, chosen)
        if why:
            skipped.append((call, why))
        else:
            send.append(call)
    return BulkPlan(action=spec.name, send=send, skipped=skipped, choices=chosen)
