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
  skipped, with why, before anything is confirmed (the plan, console/core/bulk.py, from the
  action's entry in console/core/actions.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from console.core.bulk import BulkOutcome, BulkPlan, BulkResult, plan
from console.core.filters import JobFilter, grammar
from console.core.models import JobSummary
from console.db.actions import checked_words, journal_failure, refusal_of
from console.db.connect import Conn, action_transaction, run, run_one
from console.db.reads import jobs
from console.shared.errors import BadInput, RowLocked, StatementTimedOut

# the three steps of a bulk action: snapshot (here), plan (console/core/bulk.py: no I/O), apply (here)
__all__ = ["BATCH_SIZE", "LIMIT", "BulkOutcome", "BulkPlan", "BulkResult", "apply", "plan", "snapshot"]

LIMIT = 1_000
BATCH_SIZE = 50


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


def apply(conn: Conn, plan: BulkPlan, *, operator: str, reason: str,
          progress: Callable[[int, int], None] | None = None) -> BulkResult:
    """Send every planned call through its guarded operator statement, BATCH_SIZE per commit,
    each under its own savepoint; the skipped calls are reported as such."""
    reason, operator = checked_words(reason, operator)
    batch_id = uuid.uuid4()
    outcomes: list[BulkOutcome] = [BulkOutcome(job_id=c.id, outcome="skipped", state=c.state,
                                               fencing_token=c.fencing_token, why=why) for c, why in plan.skipped]
    spec = plan.spec
    extra = spec.bind(plan.choices)
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
                outcomes.append(_one(conn, spec.name, spec.query, call, operator, reason, extra))
        done += len(batch)
        if progress is not None:
            progress(done, len(plan.send))
    return BulkResult(action=plan.action, batch_id=batch_id, outcomes=outcomes)


def _one(conn: Conn, action: str, query: str, call: JobSummary, operator: str, reason: str,
         extra: dict[str, object]) -> BulkOutcome:
    request_id = uuid.uuid4()
    try:
        with conn.transaction():  # a savepoint: a locked row fails this call only
            run(conn, "meta/request_id", request_id=str(request_id))
            row = run_one(conn, query, job_id=call.id, seen_state=call.state,
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
