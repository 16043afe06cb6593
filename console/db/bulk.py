"""Bulk actions: cancel, mark terminal or approve a retry of every call a filter selects (or the
calls marked on a screen), as safe under races as one action.

* One snapshot: the calls and the state and fencing token of each are read in one snapshot; each
  call is then sent through its own guarded operator statement with what was read for it, so a call
  that changed in between is refused (and journaled as refused), never acted on blind.
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

Up to LIMIT calls, `apply` sends them at once. Over it (or when asked to run in the background) the
plan becomes a bulk operation (migration 0023; `start`): its calls frozen in the database with the
state and token read for each, then worked batch by batch (`work`) by the CLI that started it, by
`leasectl bulk resume`, or by the supervisor -- several at once if need be. A batch is one
transaction: the database hands it calls no other worker holds (bulk/next_batch.sql), each is sent
through its guarded statement as above, and its outcome is recorded in that same transaction, from
the journal row the guard wrote (bulk/settle_call.sql). A crash mid-batch undoes the batch's
actions and their outcomes together; so the unsettled calls are exactly those not acted on, and
whoever resumes takes them: no call acted on twice, none skipped. `stop` asks it to stop: the
batches in flight finish, no other begins.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

from console.core.actions import ActionSpec, action_named
from console.core.bulk import (
    LIMIT,
    BulkOperation,
    BulkOutcome,
    BulkPlan,
    BulkResult,
    OperationCall,
    Selected,
    plan,
)
from console.core.filters import JobFilter, grammar, id_range
from console.core.models import JobSummary
from console.db.actions import checked_words, journal_failure, refusal_of
from console.db.connect import Conn, action_transaction, rows_as, run, run_one
from console.db.reads import jobs
from console.shared.errors import BadInput, RowLocked, StatementTimedOut
from console.shared.faults import crash_at
from console.shared.text import sanitize

# the three steps of a bulk action: snapshot (here), plan (console/core/bulk.py: no I/O), apply (here)
__all__ = ["BATCH_SIZE", "LIMIT", "OPERATION_LIMIT", "BulkOperation", "BulkOutcome", "BulkPlan", "BulkResult",
           "apply", "close", "not_applied", "operation", "operations", "plan", "resolve", "selection", "snapshot",
           "start", "stop", "work"]

BATCH_SIZE = 50
# an operation's calls are read in one snapshot, page by page, and kept in the plan (a few hundred
# bytes each) to be shown and confirmed, then frozen in one statement
OPERATION_LIMIT = 1_000_000
SNAPSHOT_PAGE = 10_000
# a running operation nobody has advanced for this long is the supervisor's (its CLI was stopped or
# killed); one started with --background is the supervisor's at once
WORKER_IDLE_SECONDS = 30.0
# how long the freezing of a large operation (one statement) and the paged snapshot may take
FREEZE_TIMEOUT = "300s"


def snapshot(conn: Conn, *, where: JobFilter | None = None, ids: list[uuid.UUID] | None = None,
             limit: int | None = None) -> list[JobSummary]:
    """The calls a filter (or a marking) selects, each with its state and token, in one snapshot.
    More than `limit` is bad input: the filter must be narrowed, never silently cut."""
    _check_selection(where, ids)
    limit = LIMIT if limit is None else limit
    found = jobs(conn, where, ids=ids, limit=limit + 1)
    if len(found) > limit:
        raise BadInput(f"the filter matches more than {limit:,} calls: narrow it (a bulk action acts on at most "
                       f"{limit:,})", hint=grammar())
    return found


def selection(conn: Conn, *, where: JobFilter | None = None, ids: list[uuid.UUID] | None = None,
              limit: int | None = None) -> list[Selected]:
    """Every call a filter (or a marking) selects, of any number up to `limit`, each with its state
    and token: read page by page inside one repeatable-read transaction, so every page is of one
    snapshot, and kept small (console.core.bulk.Selected). More than `limit` is bad input."""
    _check_selection(where, ids)
    limit = OPERATION_LIMIT if limit is None else limit
    found: list[Selected] = []
    before = None
    with conn.transaction():
        run(conn, "meta/snapshot")
        run(conn, "meta/statement_timeout_local", statement_timeout=FREEZE_TIMEOUT)
        run(conn, "bulk/snapshot_planning")
        while True:
            page = jobs(conn, where, ids=ids, before=before, limit=SNAPSHOT_PAGE)
            found.extend(Selected.of(call) for call in page)
            if len(found) > limit:
                raise BadInput(f"the filter matches more than {limit:,} calls: narrow it (a bulk operation acts on "
                               f"at most {limit:,})", hint=grammar())
            if len(page) < SNAPSHOT_PAGE:
                return found
            before = (page[-1].created_at, page[-1].id)


def _check_selection(where: JobFilter | None, ids: list[uuid.UUID] | None) -> None:
    if where is None and not ids:
        raise BadInput("a bulk action needs a filter (--where) or marked calls", hint=grammar())
    if where is not None and where.at is not None:
        raise BadInput("at: selects how calls were in the past; a bulk action acts on what is true now",
                       hint="drop at: from the filter")


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
    for start_at in range(0, len(plan.send), BATCH_SIZE):
        batch = plan.send[start_at:start_at + BATCH_SIZE]
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


def _one(conn: Conn, action: str, query: str, call: Selected, operator: str, reason: str,
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


# ----------------------------------------------------------------------------- operations


def start(conn: Conn, plan: BulkPlan, *, operator: str, reason: str, filter_text: str | None = None,
          background: bool = False) -> BulkOperation:
    """Freeze the plan as a bulk operation (one statement: its calls with the state and token read
    for each, the skipped ones with why), journaled as bulk_started. Nothing is sent yet: `work`
    sends it, here or elsewhere. An operator login only (the database refuses any other)."""
    reason, operator = checked_words(reason, operator)
    if not plan.send:
        raise BadInput("nothing to send: every selected call would be skipped")
    request_id = uuid.uuid4()
    skipped = [call for call, _why in plan.skipped]
    with action_transaction(conn, f"the start of a bulk operation over {len(plan.send):,} calls",
                            look=f"`leasectl bulk status` lists it if it was started (request {request_id})"):
        run(conn, "meta/request_id", request_id=str(request_id))
        run(conn, "meta/statement_timeout_local", statement_timeout=FREEZE_TIMEOUT)
        row = run_one(conn, "bulk/create", action=plan.action, filter=filter_text,
                      choices=json.dumps(plan.choices), operator=operator, reason=reason, background=background,
                      job_ids=[c.id for c in plan.send], seen_states=[c.state for c in plan.send],
                      seen_tokens=[c.fencing_token for c in plan.send],
                      skipped_ids=[c.id for c in skipped], skipped_states=[c.state for c in skipped],
                      skipped_tokens=[c.fencing_token for c in skipped], skipped_why=[w for _c, w in plan.skipped])
    assert row is not None
    found = operation(conn, row["id"])
    assert found is not None
    return found


def resolve(conn: Conn, ref: str) -> uuid.UUID:
    """A bulk operation's full id or a unique prefix of it; unknown and ambiguous are bad input."""
    low, high = id_range(ref, "bulk operation")
    rows = run(conn, "bulk/operation_by_prefix", id_low=low, id_high=high)
    if not rows:
        raise BadInput(f"no bulk operation with id {sanitize(ref, max_chars=48)}",
                       hint="`leasectl bulk status` lists them")
    if len(rows) > 1:
        listed = ", ".join(f"{str(r['id'])[:13]}… ({r['action']}, {r['state']})" for r in rows[:4])
        raise BadInput(f"'{sanitize(ref, max_chars=48)}' is ambiguous: {listed}", hint="give more characters of the id")
    found: uuid.UUID = rows[0]["id"]
    return found


def operation(conn: Conn, operation_id: uuid.UUID) -> BulkOperation | None:
    row = run_one(conn, "bulk/operation", operation_id=operation_id)
    return BulkOperation.model_validate(row) if row else None


def operations(conn: Conn, *, limit: int = 50) -> list[BulkOperation]:
    """The operations, the live ones (running, stopping) first, then newest first."""
    return rows_as(BulkOperation, run(conn, "bulk/operations", limit=limit))


def not_applied(conn: Conn, operation_id: uuid.UUID, *, limit: int = 200) -> list[OperationCall]:
    """The calls of an operation that were refused, failed or skipped, in the order they were worked."""
    return rows_as(OperationCall, run(conn, "bulk/not_applied", operation_id=operation_id, limit=limit))


def _existing(conn: Conn, operation_id: uuid.UUID) -> BulkOperation:
    found = operation(conn, operation_id)
    if found is None:
        raise BadInput(f"no bulk operation {operation_id}", hint="`leasectl bulk status` lists them")
    return found


def work(conn: Conn, operation_id: uuid.UUID, *, worker: str, batch_size: int | None = None,
         deadline: float | None = None, max_batches: int | None = None, wait: bool = True,
         progress: Callable[[BulkOperation], None] | None = None,
         on_batch: Callable[[int, float], None] | None = None) -> BulkOperation:
    """Send the operation's unsettled calls, a batch per transaction, until none is left, it is
    stopped, `deadline` (time.monotonic()) passes or `max_batches` are committed; a stopping operation
    is then closed (stopped), once the batches in flight elsewhere have committed. With `wait`, calls
    another worker holds are
    waited for (taken over if that worker dies); without, left to it. `progress` hears the
    operation after each batch; `on_batch` the batch's size and how long its transaction held its
    row locks. Returns the operation as it is then."""
    op = _existing(conn, operation_id)
    spec = action_named(op.action)
    extra = spec.bind(op.choices)
    size = batch_size or BATCH_SIZE
    committed = 0
    while op.state == "running":
        out_of_time = deadline is not None and time.monotonic() >= deadline
        if out_of_time or (max_batches is not None and committed >= max_batches):
            return op
        began = time.perf_counter()
        took = _batch(conn, op, spec, extra, worker, size, committed)
        if took:
            committed += 1
            if on_batch is not None:
                on_batch(took, time.perf_counter() - began)
            crash_at("bulk:between_batches")
        op = _existing(conn, operation_id)
        if took:
            if progress is not None:
                progress(op)
        elif op.state == "running":  # the calls left are in another worker's batches
            if not wait:
                return op
            time.sleep(0.2)
    if op.state == "stopping":
        try:
            op = close(conn, operation_id, worker=worker)
        except RowLocked:  # a batch in flight elsewhere still holds it: its worker (or the next) closes it
            op = _existing(conn, operation_id)
    if progress is not None:
        progress(op)
    return op


def _batch(conn: Conn, op: BulkOperation, spec: ActionSpec, extra: dict[str, object], worker: str, size: int,
           committed: int) -> int:
    """One batch: up to `size` calls nobody else holds, each sent and settled, in one transaction.
    Returns how many calls it took (0: none could be taken)."""
    with action_transaction(conn, f"a batch of bulk operation {op.short_id}",
                            look=f"`leasectl bulk status {op.id}` says which calls were settled: a batch's calls "
                                 "and their outcomes commit together"):
        run(conn, "meta/batch_id", batch_id=str(op.id))
        rows = run(conn, "bulk/next_batch", operation_id=op.id, batch_size=size)
        for n, row in enumerate(rows):
            error = None
            try:
                # a savepoint: a locked row fails this call only. Its journal row gets a request id
                # of its own, which the outcome records (bulk/settle_call.sql finds the row by the
                # call and the batch: a call is sent once in a transaction)
                with conn.transaction():
                    run_one(conn, spec.query, job_id=row["job_id"], seen_state=row["seen_state"],
                            seen_token=row["seen_token"], operator=op.operator, reason=op.reason, **extra)
            except (RowLocked, StatementTimedOut) as exc:
                journal_failure(conn, spec.name, row["job_id"], op.operator, op.reason, exc, row["seen_state"],
                                row["seen_token"], uuid.uuid4())
                error = str(exc)
            run_one(conn, "bulk/settle_call", operation_id=op.id, job_id=row["job_id"], error=error, worker=worker)
            if committed and n == len(rows) // 2:
                crash_at("bulk:mid_batch")  # half a batch acted on and settled, nothing of it committed
    return len(rows)


def close(conn: Conn, operation_id: uuid.UUID, *, worker: str) -> BulkOperation:
    """A stopping operation becomes stopped once the batches in flight have committed (RowLocked
    while one still holds it, past the lock timeout); any other is returned as it is."""
    with action_transaction(conn, f"the close of bulk operation {str(operation_id)[:8]}",
                            look=f"`leasectl bulk status {operation_id}` shows its state"):
        row = run_one(conn, "bulk/close", operation_id=operation_id, worker=worker)
    if row is None:
        raise BadInput(f"no bulk operation {operation_id}", hint="`leasectl bulk status` lists them")
    return _existing(conn, operation_id)


def stop(conn: Conn, operation_id: uuid.UUID, *, operator: str, reason: str) -> tuple[bool, BulkOperation]:
    """Ask a running operation to stop (journaled): (True, the operation as it is then -- stopped, or
    stopping while a batch in flight finishes), or (False, the operation as it is) when it was not
    running (stopping already, or over: the refusal is journaled). BadInput for no such operation."""
    reason, operator = checked_words(reason, operator)
    request_id = uuid.uuid4()
    with action_transaction(conn, f"the stop of bulk operation {str(operation_id)[:8]}",
                            look=f"`leasectl bulk status {operation_id}` shows whether it is stopping "
                                 f"(request {request_id})"):
        run(conn, "meta/request_id", request_id=str(request_id))
        row = run_one(conn, "bulk/stop", operation_id=operation_id, operator=operator, reason=reason)
    if row is None:
        return False, _existing(conn, operation_id)
    try:
        return True, close(conn, operation_id, worker=f"stop by {operator}")
    except RowLocked:  # a batch in flight: it finishes, then its worker (or the supervisor) closes it
        return True, _existing(conn, operation_id)


def note_error(conn: Conn, operation_id: uuid.UUID, error: str, *, worker: str) -> None:
    """Keep the error a worker met (shown with the operation's progress); best effort."""
    run(conn, "bulk/note_error", operation_id=operation_id, error=error, worker=worker)
