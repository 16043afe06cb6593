"""The lease-health rules the console colours by: how urgent each label, state and age is.

The labels themselves are computed by the database (leasectl_job_health, migrations/0001); their
words are in console/operator/present/words.py.
"""

from __future__ import annotations

from typing import Literal

Urgency = Literal["ok", "watch", "warn", "bad", "none"]

# worst first, as leasectl_health_rank() in migrations/0001 (past_deadline: 0014) sorts triage (a test
# keeps them equal). past_deadline: a running call whose deadline passed; its lease ended with it
# (no lease outlives its deadline, docs/seeds.md §004) and the sweep ends it: as bad as an expired lease.
# past_max_hold (0016): held as long as its tool's max_hold_seconds allows; its lease ended with the
# hold and the ordinary rules for an expired lease resolve it.
HEALTH_RANK = {"outcome_unknown": 0, "past_deadline": 1, "past_max_hold": 1, "lease_expired": 1, "cancel_unheard": 2,
               "zombie": 3, "heartbeat_late": 4, "over_stage_timeout": 5, "healthy": 9}

HEALTH_URGENCY: dict[str, Urgency] = {
    "healthy": "ok",
    "over_stage_timeout": "watch",
    "heartbeat_late": "warn",
    "zombie": "warn",
    "cancel_unheard": "warn",
    "lease_expired": "bad",
    "past_deadline": "bad",
    "past_max_hold": "bad",
    "outcome_unknown": "bad",
}

STATE_URGENCY: dict[str, Urgency] = {
    "queued": "none", "running": "ok", "cancel_requested": "warn", "succeeded": "ok",
    "failed": "bad", "cancelled": "none", "outcome_unknown": "bad",
}



def heartbeat_urgency(age: float | None, heartbeat_seconds: float | None, jitter: float | None) -> Urgency:
    """Green while beats arrive on time, amber once one is late, red when R would be missed."""
    if age is None or heartbeat_seconds is None:
        return "none"
    allowance = heartbeat_seconds + (jitter or 0)
    if age <= allowance:
        return "ok"
    if age <= 2 * allowance:
        return "warn"
    return "bad"


def lease_urgency(left: float | None, heartbeat_seconds: float | None) -> Urgency:
    """Red once expired, amber when less than one heartbeat interval remains."""
    if left is None:
        return "none"
    if left < 0:
        return "bad"
    if heartbeat_seconds is not None and left < heartbeat_seconds:
        return "warn"
    return "ok"


def deadline_urgency(left: float | None) -> Urgency:
    if left is None:
        return "none"
    if left < 0:
        return "bad"
    if left < 60:
        return "warn"
    return "ok"
