"""Bulk actions: cancel, mark terminal or approve a retry of every call a filter selects (or the
calls marked on a screen), as safe under races as one action.

* One snapshot: the calls and the state and fencing token of each are read in one statement;
  each call is then sent through its own guarded operator statement with what was read for it,
  so a call that changed in between is refused (and journaled as refused), never acted on blind.
* One batch: every call's journal row carries the same batch id (details.batch_id), beside its
  own request id.
* Batched commits: calls go in transactions of BATCH_SIZE, each call under its own savepoint.
  A commit per call would cost a WAL flush each (1,000 flushes); one transaction for all would
  hold 1,000 row locks until the last call is done, and one locked row would undo the rest.
  With 50 a transaction holds at most 50 row locks for a few milliseconds, a locked row (lock
  timeout) fails only its own call (journaled with its cause), and the flushes are 20.
* What the action cannot apply to (approve on a running call) is not sent: it is listed as
  skipped, with why, before anything is confirmed.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from console.core.filters import JobFilter, grammar
from console.core.models import Action, JobSummary
from console.db.actions import QUERY, checked_words, journal_failure, not_possible, refusal_of
from console.db.connect import Conn, action_transaction, run, run_one
from console.db.reads import jobs
from console.shared.errors import BadInput, RowLocked, StatementTimedOut

LIMIT = 1_000
BATCH_SIZE = 50

Outcome = Literal["applied", "refused", "failed", "skipped"]


class BulkPlan(BaseModel):
    """What a bulk action would do, from one snapshot: the calls it will send and those it skips."""

    model_config = ConfigDict(frozen=True)

    action: Action
    send: list[JobSummary]
    skipped: list[tuple[JobSummary, str]]
    terminal_state: str | None = None
    force: bool = False

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

    def confirmation(self) -> str:
        """What the operator types to confirm: the count; for unverifiable retries, the words too."""
        if self.action == "approve_retry" and self.unverifiable:
            return f"approve {self.count} unverifiable"
        return str(self.count)


class BulkOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: uuid.UUID
    outcome: Outcome
    state: str
    fencing_token: int
    why: str = ""
    request_id: uuid.UUID | None = None

    @property
    def short_id(self) -> str:
        return str(self.job_id)[:8]


class BulkResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    action: Action
    batch_id: uuid.UUID
    outcomes: list[BulkOutcome]

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    @property
    def all_applied(self) -> bool:
        return all(o.outcome == "applied" for o in self.outcomes)

    def not_applied(self) -> list[BulkOutcome]:
        return [o for o in self.outcomes if o.outcome != "applied"]


def snapshot(conn: Conn, *, where: JobFilter | None = None, ids: list[uuid.UUID] | None = None,
             limit: int | None = None) -> list[JobSummary]:
    """The calls a filter (or a marking) selects, each with its state and token, in one snapshot.
    More than `limit` is bad input: the filter must be narrowed, never silently cut."""
    if where is None and not ids:
        raise BadInput("a bulk action needs a filter (--where) or marked calls", hint=grammar())
    if where is not None and where.at is not None:
        raise BadInput("at: selects how calls were in the past; a bulk action acts on what is true now",
                       hint="drop at: from the filter")
    limit = LIMIT if limit is None else limit
    found = jobs(conn, where, ids=ids, limit=limit + 1)
    if len(found) > limit:
        raise BadInput(f"the filter matches more than {limit:,} calls: narrow it (a bulk action acts on at most "
                       f"{limit:,})", hint=grammar())
    return found


def plan(action: Action, calls: list[JobSummary], *, terminal_state: str | None = None,
         force: bool = False) -> BulkPlan:
    send, skipped = [], []
    for call in calls:
        why = not_possible(action, call, terminal_state=terminal_state, force=force)
        if why:
            skipped.append((call, why))
        else:
            send.append(call)
    return BulkPlan(action=action, send=send, skipped=skipped, terminal_state=terminal_state, force=force)


def apply(conn: Conn, plan: BulkPlan, *, operator: str, reason: str,
          progress: Callable[[int, int], None] | None = None) -> BulkResult:
    """Send every planned call through its guarded operator statement, BATCH_SIZE per commit,
    each under its own savepoint; the skipped calls are reported as such."""
    reason, operator = checked_words(reason, operator)
    batch_id = uuid.uuid4()
    outcomes: list[BulkOutcome] = [BulkOutcome(job_id=c.id, outcome="skipped", state=c.state,
                                               fencing_token=c.fencing_token, why=why) for c, why in plan.skipped]
    extra: dict[str, object] = ({"terminal_state": plan.terminal_state, "force": plan.force}
                                if plan.action == "mark_terminal" else {})
    done = 0
    for start in range(0, len(plan.send), BATCH_SIZE):
        batch = plan.send[start:start + BATCH_SIZE]
        # a lost connection ends the bulk action: the batches before this one are committed (their
        # calls are in the journal under the batch id), this one is not, or -- lost while committing
        # -- unknown; the error says which and where to look
        with action_transaction(conn, f"a batch of {len(batch)} of the {len(plan.send)} calls ({done} committed "
                                      f"before it)",
                                look=f"`leasectl audit actions` lists the calls of batch {batch_id} that were "
                                     "applied"):
            run(conn, "meta/batch_id", batch_id=str(batch_id))
            for call in batch:
                outcomes.append(_one(conn, plan.action, call, operator, reason, extra))
        done += len(batch)
        if progress is not None:
            progress(done, len(plan.send))
    return BulkResult(action=plan.action, batch_id=batch_id, outcomes=outcomes)


def _one(conn: Conn, action: Action, call: JobSummary, operator: str, reason: str,
         extra: dict[str, object]) -> BulkOutcome:
    request_id = uuid.uuid4()
    try:
        with conn.transaction():  # a savepoint: a locked row fails this call only
            run(conn, "meta/request_id", request_id=str(request_id))
            row = run_one(conn, QUERY[action], job_id=call.id, seen_state=call.state,
                          seen_token=call.fencing_token, operator=operator, reason=reason, **extra)
    except (RowLocked, StatementTimedOut) as exc:
        journal_failure(conn, action, call.id, operator, reason, exc, call.state, call.fencing_token, request_id)
        return BulkOutcome(job_id=call.id, outcome="failed", state=call.state, fencing_token=call.fencing_token,
                           why=str(exc), request_id=request_id)
    if row is not None:
        return BulkOutcome(job_id=call.id, outcome="applied", state=row["state"], fencing_token=row["fencing_token"],
                           request_id=request_id)
    why, now = refusal_of(conn, call.id, request_id)
    return BulkOutcome(job_id=call.id, outcome="refused", state=now.state if now else call.state,
                       fencing_token=now.fencing_token if now else call.fencing_token, why=why, request_id=request_id)
