"""Chains of calls as one story (docs/seeds.md §000 stages, §004 the chain's deadline): the rules,
no I/O.

A chain is a first call and every call made after it (`parent_id`, migration 0014): the same
`chain_id`, one stage further each time, and a deadline no later than the parent's. Its story is
where its time went: each stage waited in the queue (enqueued -> first claimed), ran (first claimed
-> finished, or now while it runs), and how much of the chain's deadline was left when it started
and when it ended. The rows come from queries/views/chain.sql and chains.sql; everything derived
here takes the database's clock as `now`, never the machine's. Stages are the database's numbers
(the first call is stage 0), as the call's fields say them.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import datetime
from typing import Literal

from console.core.filters import FieldFilter
from console.core.models import LIVE_STATES, TERMINAL_STATES, Row

Outcome = Literal["running", "succeeded", "failed", "cancelled", "needs_human"]

# `/` on the Chains screen (console.core.filters.FieldFilter): agent: and key: are prefixes
CHAIN_KEYS = {"agent": "the agent of the chain's first call (a prefix)", "tool": "a tool of any of its calls",
              "key": "the chain's key stem (a prefix: key:report:42)",
              "outcome": "running, succeeded, failed, cancelled or needs_human"}


class ChainStage(Row):
    """One call of a chain, as the chain story tells it."""

    id: uuid.UUID
    parent_id: uuid.UUID | None = None
    stage: int = 0
    tool: str
    idempotency_key: str
    state: str
    owner_id: str | None = None
    owners: list[str] = []  # every owner, in the order of their first claim (views/chain.sql only)
    attempt: int = 0
    agent_id: str | None = None
    created_at: datetime
    claimed_at: datetime | None = None
    started_at: datetime | None = None  # the first claim
    finished_at: datetime | None = None
    left_running_at: datetime | None = None  # the last time it left running without finishing
    deadline_at: datetime | None = None
    terminal_reason: str | None = None
    this_call: bool = False

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    def ended(self, now: datetime) -> datetime | None:
        """When it stopped running: finished, now while it runs, or when it last left running
        (outcome unknown, requeued); None if it never ran."""
        if self.started_at is None:
            return None
        if self.live:
            return now
        return self.finished_at or self.left_running_at

    def ran(self, now: datetime) -> float | None:
        """Seconds from its first claim until it stopped running (or now)."""
        end = self.ended(now)
        return None if end is None or self.started_at is None else max((end - self.started_at).total_seconds(), 0.0)

    def waited(self, now: datetime) -> float | None:
        """Seconds in the queue before its first claim (still waiting: until now; never started and
        ended: until it ended)."""
        until = self.started_at or (now if self.state == "queued" else self.finished_at)
        return None if until is None else max((until - self.created_at).total_seconds(), 0.0)


def seconds_left(deadline: datetime | None, at: datetime | None) -> float | None:
    """How much of a deadline was left at an instant (negative: it had passed)."""
    if deadline is None or at is None:
        return None
    return (deadline - at).total_seconds()


class TimeSpent(Row):
    """Where a chain's time went, in seconds: since its first call was enqueued (total), running,
    waiting in queues, and between stages."""

    total: float
    ran: float
    waited: float
    between: float


class Chain(Row):
    """A chain's calls in stage order, read in one statement."""

    chain_id: uuid.UUID
    calls: int
    stages: list[ChainStage]
    db_now: datetime

    @property
    def short_id(self) -> str:
        return str(self.chain_id)[:8]

    @property
    def lone(self) -> bool:
        """A chain of one: a call with no parent that made no later call."""
        return self.calls <= 1

    @property
    def first(self) -> ChainStage | None:
        return self.stages[0] if self.stages else None

    @property
    def stage_count(self) -> int:
        """How many stages it has so far (a later one may still be enqueued)."""
        return max((s.stage for s in self.stages), default=-1) + 1

    @property
    def deadline_at(self) -> datetime | None:
        """The chain's deadline: the earliest any of its calls carries (the database caps a child's
        at its parent's, so this is the first call's unless a later stage asked for less)."""
        deadlines = [s.deadline_at for s in self.stages if s.deadline_at is not None]
        return min(deadlines) if deadlines else None

    @property
    def agent_id(self) -> str | None:
        return self.first.agent_id if self.first else None

    @property
    def stem(self) -> str:
        return key_stem([s.idempotency_key for s in self.stages])

    @property
    def current(self) -> ChainStage | None:
        """The stage the chain is at: the first one not finished (queued, running, waiting for a
        human), else the last."""
        for s in self.stages:
            if not s.finished:
                return s
        return self.stages[-1] if self.stages else None

    @property
    def outcome(self) -> Outcome:
        return chain_outcome([s.state for s in self.stages])

    @property
    def over(self) -> bool:
        return self.outcome in ("succeeded", "failed", "cancelled")

    def ended(self, now: datetime) -> datetime:
        """When the chain stopped (its last finish), or now while it goes on."""
        if not self.over:
            return now
        ends = [s.finished_at or s.left_running_at for s in self.stages]
        return max((e for e in ends if e is not None), default=now)

    def slowest(self, now: datetime) -> ChainStage | None:
        """The stage that ran longest (the earliest of equals); None before any has started."""
        ran = [(s.ran(now), -i, s) for i, s in enumerate(self.stages)]
        started = [(r, i, s) for r, i, s in ran if r is not None]
        return max(started, key=lambda x: (x[0], x[1]))[2] if started else None

    def deadline_left(self, now: datetime) -> float | None:
        """The deadline's remainder now while the chain goes on, at its end once it is over."""
        return seconds_left(self.deadline_at, self.ended(now))

    def time_spent(self, now: datetime) -> TimeSpent:
        """Where the chain's time went: running, waiting in queues, and between stages (after a
        stage ended, before the next was enqueued)."""
        ran = sum(s.ran(now) or 0.0 for s in self.stages)
        waited = sum(s.waited(now) or 0.0 for s in self.stages)
        between = 0.0
        for before, after in itertools.pairwise(self.stages):
            end = before.ended(now) if before.stage < after.stage else None
            if end is not None and after.created_at > end:
                between += (after.created_at - end).total_seconds()
        first = self.first
        total = (self.ended(now) - first.created_at).total_seconds() if first else 0.0
        return TimeSpent(total=max(total, 0.0), ran=ran, waited=waited, between=between)

    def deadline_passed_in(self, now: datetime) -> tuple[ChainStage, str] | None:
        """Where the deadline ran out: the stage, and whether it was `running`, `waiting` (in the
        queue) or `between` (after the stage before it ended); None if it has not passed."""
        deadline = self.deadline_at
        if deadline is None or deadline > self.ended(now):
            return None
        previous_end: datetime | None = None
        for s in self.stages:
            if previous_end is not None and previous_end <= deadline < s.created_at:
                return s, "between"
            queue_end = s.started_at or (now if s.state == "queued" else s.finished_at)
            if queue_end is not None and s.created_at <= deadline < queue_end:
                return s, "waiting"
            end = s.ended(now)
            if s.started_at is not None and end is not None and s.started_at <= deadline <= end:
                return s, "running"
            previous_end = end or s.finished_at
        return None


def chain_outcome(states: list[str]) -> Outcome:
    """A call waiting for a human makes the whole chain wait for one; any call still queued or
    running keeps it running; then the worst ending of its calls."""
    if "outcome_unknown" in states:
        return "needs_human"
    if any(s in ("queued", *LIVE_STATES) for s in states):
        return "running"
    if "failed" in states:
        return "failed"
    if "cancelled" in states:
        return "cancelled"
    return "succeeded"


def key_stem(keys: list[str]) -> str:
    """What a chain's keys share, up to its last `:` (`report:42:stage:1`, `…:2` -> `report:42:stage`);
    keys with nothing in common: the first key's stem (up to its last `:`), or the key."""
    if not keys:
        return ""
    shared = keys[0]
    for key in keys[1:]:
        n = 0
        while n < min(len(shared), len(key)) and shared[n] == key[n]:
            n += 1
        shared = shared[:n]
    if len(keys) > 1 and ":" in shared:
        return shared[: shared.rindex(":")]
    first = keys[0]
    return first[: first.rindex(":")] if ":" in first else first


def chain_matches(where: FieldFilter, chain: Chain) -> bool:
    """`/` on the Chains screen: agent: and key: are prefixes, tool: any of its calls' tools,
    outcome: exact (a bare word is an agent prefix, as on the fleet's lists)."""
    for key, wanted in where.terms.items():
        if key == "agent" and not (chain.agent_id or "").startswith(wanted):
            return False
        if key == "key" and not chain.stem.startswith(wanted):
            return False
        if key == "tool" and wanted not in {s.tool for s in chain.stages}:
            return False
        if key == "outcome" and chain.outcome != wanted.replace("-", "_"):
            return False
    return True
