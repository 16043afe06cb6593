"""The reference worker: the lease protocol of docs/seeds.md §000 and the side-effect rules of docs/seeds.md §004.

Usable by any Python program::

    def handler(ctx: CallContext) -> dict:
        ctx.start_side_effect(request_id)           # recorded before calling out
        reply = api.submit(fence=ctx.fencing_token, idempotency_key=ctx.idempotency_key, ...)
        return reply.result

    Worker(dsn, "worker-1", {"payment_capture": handler}, concurrency=50).run(stop_event)

What it guarantees for every call, whatever the handler does and however many run at once:

* the heartbeat runs on its own thread and its own connection, never the thread running the tool;
* a lease missing from the heartbeat's answer is lost: that call logs `heartbeat_lost`, learns it
  (ctx.lease_lost), refuses any new side effect and never reports success except through
  complete.sql, whose guard rejects it (`result_rejected`); the other calls carry on;
* a new irreversible step is refused when ownership cannot be confirmed before a conservative
  deadline (`ownership_unknown`, with job, token, last confirmed lease and external request id);
* a side effect is recorded (start_side_effect.sql) before the request leaves;
* a cancel learnt through the heartbeat is confirmed once the handler stops;
* no answer after a side effect started: unverifiable -> outcome_unknown (a human decides),
  verifiable or read-only -> a retryable failure (the next owner is told what may have run);
* a lock wait or a statement timeout met on the way is journaled (`database_error`, details.cause);
* every write is fenced: it names the call's token and changes nothing once the lease is gone;
* a completion is durable before the next claim: the two share one transaction
  (complete_and_claim.sql), never a buffer;
* a result that is not stored is kept for checking: every `result_rejected` the worker journals
  carries `result_sha256` and `result_size`, of the very bytes it sent or would have sent
  (console.worker.calls.serialise_result: canonical JSON, keys sorted, UTF-8).

Deadlines (docs/seeds.md §004.5: one deadline for the whole chain; 4 s left, take less than 4 s).
`ctx.time_left()` is the time left before the call's deadline_at, by the database's clock (each
claim and heartbeat answer carries db_now and deadline_at; the worker keeps their difference on
its monotonic clock), None without a deadline. The lease never runs past the deadline (the
database caps it), so nothing can be written for a call after it. When the deadline passes while
the handler runs, the handler is told as of a cancel or a lost lease: ctx.checkpoint(),
ctx.sleep() and ctx.start_side_effect() raise DeadlinePassed. A handler of a call with a
deadline runs on a thread of its own; one still running a heartbeat interval after the deadline
is abandoned: the call's outcome is `deadline_passed` (journaled as `deadline_passed`), its slot
is free for another call, and whatever it returns later is never reported done -- it is journaled
as `result_rejected` (reason deadline_passed, written false, with its sha256 and size). Python
cannot stop a thread: an abandoned handler keeps its thread until it returns. The sweep ends the
call in the database by the ordinary rules (a verifiable call whose request went out unchecked
waits in outcome_unknown).

A verifiable request is checked before it is repeated (docs/seeds.md §004.8). A
mutating_verifiable call reclaimed after its request went out carries it (ctx.call.
previous_request_id, ctx.needs_check): ask the service, then record what it said::

    if ctx.needs_check:
        found = api.status(ctx.idempotency_key)
        if found is not None:
            ctx.record_check("done", {"confirmation": found["id"]})
            return found                            # it happened: the result, no second request
        ctx.record_check("not_done")                # ("unknown" ends the call: a human decides)
    ctx.start_side_effect(request_id)

ctx.start_side_effect() raises CheckRequired, and sends nothing, while no check followed the
request the call carries; left uncaught, the call waits in outcome_unknown for a human.

Chains. A handler that returns `ctx.next_stage(tool, idempotency_key, payload, result=...)`
finishes its call with `result` and enqueues the chain's next stage in ONE transaction
(worker/complete_and_enqueue.sql): the next stage exists if and only if this result was stored,
so what was done between stages is a fact, not a guess (docs/seeds.md §000). A return value,
not a call that enqueues at once: a handler that fails after deciding on a next stage leaves no
stage behind, and the result and its successor cannot be separated. The database makes the next
stage this call's child (same chain, stage + 1, a deadline no later than this one's); a rejected
result enqueues nothing; a chain with a cancel request keeps the result and starts no stage
(CallOutcome.next_stage_id is None).

Traces. Every attempt is a span of the call's W3C trace (the trace it was enqueued with, carried
to a chain's next stage): `ctx.traceparent` is what to send with a request (`traceparent` header:
the call's trace, the attempt's own span id, sampled), `ctx.trace_id` the trace. With
opentelemetry-api installed and a tracer provider configured (`tracer_provider=`, else the global
one) the attempt is a recorded span carrying the call id, tool, fencing token and attempt, current
while the handler runs; without it nothing changes (console.worker.tracing).

Concurrency. `Worker(..., concurrency=N)` runs up to N calls at once in one process, each on a
thread of its own, with ONE connection for claims and writes and ONE for heartbeats and events,
whatever N (PostgreSQL copes with hundreds of connections, not with one per running call). The
thread that calls run() claims while fewer than N calls run; a call that completes claims the next
in the same transaction and goes on with it. With N = 1 the calling thread runs the call itself,
as the single-call worker always did.

Threads, not asyncio, because the handler API is synchronous and stays so: a handler calls a
blocking HTTP client, an SDK or a subprocess, and `ctx.sleep`, `ctx.start_side_effect` block.
Under asyncio one handler that blocks (a sync client, a native library stuck on a socket, a
CPU-bound parse) would stop the event loop and with it the heartbeat of every other call in the
process -- exactly the failure docs/seeds.md §000 warns about ("do not run the heartbeat in the thread
running the tool"). A thread that blocks stops only its own call; the heartbeat thread renews
the others, and its answers reach each call through the call's own lease object. A thread that
waits (I/O, ctx.sleep) costs no CPU and holds no GIL; its stack is reserved, not used (a few tens
of KB resident each). The price of one connection per role: writes of concurrent calls queue one
behind the other on the claim connection, so a completion stuck on a row lock delays the
others' writes by up to lock_timeout.

Heartbeats: see console.worker.heartbeat (one statement per beat, worker/heartbeat_many.sql).
What a handler's CallContext and the heartbeat thread may ask of the worker (a write, the log, the
journal, the heartbeat's connection) is console.worker.host's, and nothing else of Worker's.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from psycopg.types.json import Jsonb

from console.db.connect import Conn
from console.db.lane import Lane
from console.shared.config import WORKER_LIMITS, SessionLimits
from console.shared.errors import (
    DatabaseUnavailable,
    LeasectlError,
    PermissionDenied,
    ProtocolViolation,
    RowLocked,
    StatementTimedOut,
)
from console.worker import statements
from console.worker.calls import (
    CallOutcome,
    CancelRequested,
    CheckRequired,
    Claimed,
    ClaimedCall,
    DeadlinePassed,
    HandlerAbandoned,
    LeaseLost,
    NextStage,
    OutcomeUnknown,
    OwnershipUnknown,
    PreconditionLapsed,
    ToolFailed,
    ToolNoAnswer,
    serialise_result,
)
from console.worker.context import CallContext, Handler
from console.worker.heartbeat import Heartbeat, Renewals, RenewalStats
from console.worker.tracing import CallSpan

log = logging.getLogger("leasectl.worker")

__all__ = [
    "CallContext", "CancelRequested", "CheckRequired", "ClaimedCall", "DeadlinePassed", "Handler", "Heartbeat",
    "LeaseLost", "NextStage", "OutcomeUnknown", "OwnershipUnknown", "RenewalStats", "ToolFailed", "ToolNoAnswer",
    "Worker",
]


# a final write (complete, fail, confirm cancel) that meets a locked row is sent this many times
# in all (each waits lock_timeout) before the call is left to its lease: the sweep or the next
# owner takes it from there, as after a crash
FINAL_WRITE_ATTEMPTS = 3


def _utcnow() -> str:
    return datetime.now(UTC).isoformat()


class _HandlerRun:
    """A handler of a call with a deadline, on a thread of its own, so that the call's thread can
    stop waiting for one that blocks past the deadline (a thread cannot be stopped from outside).
    Whatever an abandoned handler returns later goes to `late` (journaled as a rejected result,
    never written)."""

    def __init__(self, handler: Handler, ctx: CallContext,
                 late: Callable[[ClaimedCall, Any, BaseException | None], None]) -> None:
        self.handler = handler
        self.ctx = ctx
        self.late = late
        self.finished = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self._abandoned = False
        self._lock = threading.Lock()

    def __call__(self) -> None:
        try:
            with self.ctx.span.current():  # the attempt's span, current on this thread too
                self.result = self.handler(self.ctx)
        except BaseException as exc:  # noqa: BLE001 - handed to the call's thread, which raises it again
            self.error = exc
        with self._lock:
            self.finished.set()
            abandoned = self._abandoned
        if abandoned:
            self.late(self.ctx.call, self.result, self.error)

    def abandon(self) -> bool:
        """Stop waiting for it, unless it has just finished (then its answer is taken as usual)."""
        with self._lock:
            if self.finished.is_set():
                return False
            self._abandoned = True
            return True

    def answer(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


Observer = Callable[[str, Any, int, datetime | None], None]


class _Budget:
    """How many more calls run() may claim (max_calls), shared by the claiming thread and every
    call that claims its successor."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.taken = 0
        self._lock = threading.Lock()

    def reserve(self) -> bool:
        if self.limit is None:
            return True
        with self._lock:
            if self.taken >= self.limit:
                return False
            self.taken += 1
            return True

    def release(self) -> None:
        if self.limit is not None:
            with self._lock:
                self.taken -= 1


class _Chain:
    """Asked by a completion whether to claim the next call in the same transaction. `halted`: the
    worker met an error that ends its run (no call claims a successor then)."""

    def __init__(self, stop: threading.Event, budget: _Budget, halted: Callable[[], bool]) -> None:
        self.stop = stop
        self.budget = budget
        self.halted = halted
        self.reserved = False

    def __call__(self) -> bool:
        if self.stop.is_set() or self.halted() or not self.budget.reserve():
            return False
        self.reserved = True
        return True

    def settle(self, outcome: CallOutcome | None) -> None:
        if self.reserved and (outcome is None or outcome.next_call is None):
            self.budget.release()
        self.reserved = False


@dataclass
class Worker:
    dsn: str
    worker_id: str
    handlers: Mapping[str, Handler] | Handler
    tools: list[str] | None = None
    poll_interval: float = 0.2
    limits: SessionLimits = field(default_factory=lambda: WORKER_LIMITS)
    # called as observer(kind, job_id, fencing_token, db_time) after each successful guarded write
    # (from whichever thread made it)
    observer: Observer | None = None
    # the demo sets this to simulate a worker cut off from the database
    partitioned: threading.Event = field(default_factory=threading.Event)
    # calls in flight at once in this process (one thread each); connections stay two
    concurrency: int = 1
    # OpenTelemetry's TracerProvider for the attempts' spans (console.worker.tracing); None: the
    # global one. Unused without opentelemetry-api installed
    tracer_provider: Any = None
    # the two connections (console.db.lane: each made again after a loss, with the one backoff);
    # the heartbeat's is its own, so that no claim or write, however slow, holds up a renewal
    _main: Lane = field(init=False, repr=False)
    _hb: Lane = field(init=False, repr=False)
    _events_lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _pending_events: list[tuple[ClaimedCall, str, dict[str, Any]]] = field(
        default_factory=list, init=False, repr=False)
    _identity_checked: bool = field(default=False, init=False, repr=False)
    _renewals: Renewals = field(init=False, repr=False)
    _slots: threading.Condition = field(default_factory=threading.Condition, init=False, repr=False)
    _busy: int = field(default=0, init=False, repr=False)
    _done: int = field(default=0, init=False, repr=False)
    _fatal: BaseException | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.tools is None and isinstance(self.handlers, Mapping):
            self.tools = sorted(self.handlers)
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {self.concurrency}")
        self._renewals = Renewals(self)
        # the DSN is read at each connection: a worker pointed elsewhere reconnects there
        self._main = Lane(lambda: self.dsn, limits=self.limits, application_name=f"leasectl-worker:{self.worker_id}")
        self._hb = Lane(lambda: self.dsn, limits=self.limits,
                        application_name=f"leasectl-worker:{self.worker_id}:heartbeat")

    @property
    def renewal_stats(self) -> RenewalStats:
        """What the heartbeat thread did so far: statements, leases renewed and lost, the least
        lease time left at a scheduled renewal."""
        return self._renewals.stats

    # --------------------------------------------------------------- connections
    def connect(self) -> None:
        """Open both connections now (they are otherwise opened when first needed)."""
        self._main.connect()
        self._hb.connect()

    def close(self) -> None:
        self._renewals.close()
        self._main.close()
        self._hb.close()

    @property
    def heartbeat_lane(self) -> Lane:
        """The heartbeats' own connection, also the one events go on (console.worker.host.LeaseHost)."""
        return self._hb

    def write(self, name: str, *, only_if: Callable[[], bool] | None = None,
              **params: Any) -> dict[str, Any] | None:
        """One statement on the claim connection, which the calls of this process share. `only_if`
        is asked once the connection is ours, right before sending: the wait for it (other calls'
        statements, up to their lock timeout) can outlast what the caller checked before it."""
        def send(conn: Conn) -> dict[str, Any] | None:
            if only_if is not None and not only_if():
                raise PreconditionLapsed(name)
            return statements.first(conn, name, **params)

        return self._main.run(send)

    # --------------------------------------------------------------- logging and events
    def log_event(self, event: str, call: ClaimedCall, level: int = logging.INFO, **fields: Any) -> None:
        if not log.isEnabledFor(level):
            return
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        log.log(level, "%s job=%s token=%s worker=%s %s", event, call.short_id, call.fencing_token,
                self.worker_id, extra)

    def record_event(self, call: ClaimedCall, kind: str, details: dict[str, Any]) -> None:
        """Best effort now, delivered later: the local log has it at once; the database (which may
        be what failed) gets it as soon as it answers again, with the time it was observed."""
        with self._events_lock:
            self._pending_events.append((call, kind, {**details, "observed_at": _utcnow()}))
        self.flush_events()

    def flush_events(self) -> None:
        with self._events_lock:
            while self._pending_events:
                call, kind, details = self._pending_events[0]
                try:
                    self._send_event(call, kind, details)
                except ProtocolViolation as exc:
                    # the database will never accept this one (not ours to write): keep the log
                    # line, drop the event, and let the ones behind it through
                    self.log_event("event_refused", call, kind=kind, error=str(exc), level=logging.ERROR)
                except LeasectlError as exc:
                    self.log_event("event_pending", call, kind=kind, error=str(exc), level=logging.WARNING)
                    return
                self._pending_events.pop(0)

    def _send_event(self, call: ClaimedCall, kind: str, details: dict[str, Any]) -> None:
        # on the heartbeat's connection: the claim connection may be what is stuck
        self._hb.run(lambda conn: statements.first(conn, "worker/record_event", job_id=call.id, kind=kind,
                                                   actor=self.worker_id, fencing_token=call.fencing_token,
                                                   details=Jsonb(details)))

    def observe(self, kind: str, call: ClaimedCall, db_time: datetime | None) -> None:
        if self.observer is not None:
            self.observer(kind, call.id, call.fencing_token, db_time)

    def _reject_result(self, call: ClaimedCall, body: bytes, reason: str, *, written: bool | None = None,
                       next_stage: NextStage | None = None, **details: Any) -> None:
        """Journal a result that is not stored, keeping what is needed to check it later: the
        sha256 and the size of the serialised result (docs/contract.md §5, result_rejected)."""
        facts: dict[str, Any] = {"reason": reason, **({} if written is None else {"written": written}),
                                 "result_sha256": hashlib.sha256(body).hexdigest(), "result_size": len(body),
                                 **details}
        if next_stage is not None:
            # and the stage that was not enqueued with it
            facts["next_stage"] = {"tool": next_stage.tool, "idempotency_key": next_stage.idempotency_key}
        self.log_event("result_rejected", call, reason=reason, result_sha256=facts["result_sha256"],
                       result_size=len(body))
        self.record_event(call, "result_rejected", facts)

    def _late(self, call: ClaimedCall, result: Any, error: BaseException | None) -> None:
        """An abandoned handler has finished, after its call's deadline: nothing is written."""
        if error is not None:
            self.log_event("late_handler_ended", call, error=f"{type(error).__name__}: {error}")
            return
        next_stage = result if isinstance(result, NextStage) else None
        try:
            body = serialise_result(next_stage.result if next_stage is not None else result)
        except (TypeError, ValueError) as exc:
            self.log_event("late_result_not_json", call, logging.WARNING, error=exc)
            return
        self._reject_result(call, body, "deadline_passed", written=False, next_stage=next_stage, abandoned=True)

    def report_database_error(self, call: ClaimedCall, statement: str, error: LeasectlError) -> None:
        """A lock wait, a deadlock or a heavy statement met on the way (docs/seeds.md §004): logged, and
        journaled with its cause, so that lock waits and heavy statements are counted apart
        (details.cause: lock_timeout | statement_timeout)."""
        self.log_event("database_error", call, logging.WARNING, statement=statement, error=error)
        # a deadlock is not one of the two causes the history names (docs/contract.md §5): logged only
        cause = {RowLocked: "lock_timeout", StatementTimedOut: "statement_timeout"}.get(type(error))
        if cause is not None:
            self.record_event(call, "database_error", {"cause": cause, "statement": statement,
                                                       "error": str(error)})

    # --------------------------------------------------------------- claiming
    def check_identity(self) -> None:
        """Before the first claim: may this login own calls as worker_id? A leasectl_worker login
        owns calls only as `<login>` or `<login>:<name>` (the database refuses any other owner)."""
        if self._identity_checked:
            return
        row = self.write("worker/check_identity", worker_id=self.worker_id)
        if row is not None and not row["acceptable"]:
            raise PermissionDenied(f"worker id {self.worker_id!r} is not yours: the login {row['login']} may own "
                                   f"calls only as {row['expected']}",
                                   hint="start the worker with a worker_id of that form")
        self._identity_checked = True
        pooler = self._main.pooler
        if pooler is not None and not pooler.keeps_sessions:
            # said once per worker: what a pooler in transaction mode changes for it
            log.warning("worker %s reaches the database through a connection pooler in transaction mode (%s): "
                        "its limits are set in every transaction, statements are %s; it needs no LISTEN (it "
                        "polls for calls every %g s)", self.worker_id, pooler.how,
                        "prepared (LEASECTL_POOLER_PREPARES)" if pooler.prepares else "not prepared",
                        self.poll_interval)

    def claim(self) -> Claimed | None:
        if self.partitioned.is_set():
            return None
        self.check_identity()
        sent = time.monotonic()
        row = self.write("worker/claim", worker_id=self.worker_id, tools=self.tools)
        return self._claimed(row, sent)

    def _claimed(self, row: Mapping[str, Any] | None, sent: float) -> Claimed | None:
        if row is None or row["id"] is None:
            return None
        call = ClaimedCall.from_row(row)
        lease_left = (row["lease_until"] - row["db_now"]).total_seconds()
        if log.isEnabledFor(logging.INFO):
            self.log_event("job_claimed", call, lease_until=row["lease_until"].isoformat(), attempt=call.attempt,
                           previous_request=call.previous_request_id)
        self.observe("claim", call, row["db_now"])
        return call, sent, lease_left

    # --------------------------------------------------------------- the loop
    def run_once(self) -> CallOutcome | None:
        """Claim one call and take it to an outcome in this thread. None when there was nothing."""
        if self._pending_events:
            self.flush_events()
        claimed = self.claim()
        if claimed is None:
            return None
        return self.process(*claimed)

    def run(self, stop: threading.Event, *, max_calls: int | None = None, drain: bool = False) -> int:
        """Work until `stop` is set (or, with `drain`, until there is nothing left to claim and
        nothing running), with up to `concurrency` calls at once. Survives database restarts: it
        backs off and reconnects. Completing a call and claiming the next share one transaction
        (complete_and_claim.sql). Returns how many calls it took to an outcome. Calls in flight
        when `stop` is set run to their end (they claim no successor)."""
        budget = _Budget(max_calls)
        self._done = 0
        self._fatal = None
        threads: list[threading.Thread] = []
        try:
            while not stop.is_set() and self._fatal is None:
                if self._pending_events:
                    self.flush_events()
                with self._slots:
                    if self._busy >= self.concurrency:
                        self._slots.wait(min(self.poll_interval, 0.2))
                        continue
                if not budget.reserve():
                    if self._idle():
                        break  # max_calls reached and every call finished
                    self._wait_for_slot(stop)
                    continue
                try:
                    claimed = self.claim()
                except PermissionDenied as exc:
                    budget.release()
                    self._fatal = exc  # a worker id the database will never accept: retrying cannot help
                    break
                except LeasectlError as exc:
                    budget.release()
                    self._trouble(exc, stop)
                    continue
                if claimed is None:
                    budget.release()
                    if drain and self._idle():
                        break
                    stop.wait(self.poll_interval)
                    continue
                with self._slots:
                    self._busy += 1
                if self.concurrency == 1:
                    self._serve(claimed, stop, budget)
                else:
                    thread = threading.Thread(target=self._serve, args=(claimed, stop, budget), daemon=True,
                                              name=f"call-{self.worker_id}")
                    thread.start()
                    threads = [t for t in threads if t.is_alive()] + [thread]
            for thread in threads:
                thread.join()
        finally:
            self.close()
        if self._fatal is not None:
            raise self._fatal
        return self._done

    def _idle(self) -> bool:
        with self._slots:
            return self._busy == 0

    def _wait_for_slot(self, stop: threading.Event) -> None:
        with self._slots:
            if self._busy and not stop.is_set():
                self._slots.wait(min(self.poll_interval, 0.2))

    def _trouble(self, exc: LeasectlError, stop: threading.Event) -> None:
        """The claim connection failed. Lost: wait for the lane's next attempt (the one jittered
        backoff, so that a fleet that lost the database at one instant does not come back at one
        instant). Any other error: wait a poll interval."""
        if isinstance(exc, DatabaseUnavailable):  # the lane has dropped the connection and counted it
            retry_in = self._main.retry_in() or 0.0
            log.warning("database unavailable for %s: %s; next attempt in %.1f s", self.worker_id, exc, retry_in)
            stop.wait(retry_in)
            return
        log.warning("worker %s: %s", self.worker_id, exc)
        if not isinstance(exc, (RowLocked, StatementTimedOut)):
            # a lock wait or a timeout leaves the shared connection sound: the other calls keep it
            self._main.close()
        stop.wait(self.poll_interval)

    def _serve(self, claimed: Claimed | None, stop: threading.Event, budget: _Budget) -> None:
        """Run a claimed call, then each successor its completion claimed, until none is left."""
        chain = _Chain(stop, budget, halted=lambda: self._fatal is not None)
        try:
            while claimed is not None:
                outcome: CallOutcome | None = None
                try:
                    outcome = self.process(*claimed, chain=chain)
                except PermissionDenied as exc:
                    self._fatal = exc
                    return
                except LeasectlError as exc:
                    self._trouble(exc, stop)
                    return
                finally:
                    chain.settle(outcome)
                with self._slots:
                    self._done += 1
                claimed = outcome.next_call
        finally:
            with self._slots:
                self._busy -= 1
                self._slots.notify_all()

    def _handler_for(self, tool: str) -> Handler:
        if isinstance(self.handlers, Mapping):
            return self.handlers[tool]
        return self.handlers

    def process(self, call: ClaimedCall, claimed_at: float, lease_left: float, *,
                chain: bool | Callable[[], bool] = False) -> CallOutcome:
        """Run the tool and record its outcome. With `chain` (or when it answers True at the moment
        of completing), a successful completion also claims the next call in the same transaction
        (returned as CallOutcome.next_call). The attempt is a span of the call's trace
        (console.worker.tracing), ended with the outcome."""
        span = self.call_span(call)
        span.start()
        try:
            outcome = self._attempt(call, claimed_at, lease_left, span, chain=chain)
        except BaseException as exc:
            span.end(error=exc)
            raise
        span.end(outcome)
        return outcome

    def call_span(self, call: ClaimedCall) -> CallSpan:
        """The attempt's span; the call's trace read from the database when first needed, if the
        claim's row did not carry it."""
        return CallSpan(call, self.worker_id, lookup=lambda: self.trace_of(call),
                        tracer_provider=self.tracer_provider)

    def trace_of(self, call: ClaimedCall) -> str | None:
        """The call's trace id as the database has it (for a claim statement that did not return it)."""
        row = self.write("views/job", job_id=call.id)
        return None if row is None else row["trace_id"]

    def _attempt(self, call: ClaimedCall, claimed_at: float, lease_left: float, span: CallSpan, *,
                 chain: bool | Callable[[], bool] = False) -> CallOutcome:
        heartbeat = Heartbeat(self._renewals, call, claimed_at, lease_left)
        heartbeat.start()
        ctx = CallContext(self, call, heartbeat, span)
        try:
            try:
                result = self._run_handler(call, ctx, heartbeat)
            finally:
                heartbeat.stop()
        except HandlerAbandoned:
            return self._ended_at_deadline(call, "abandoned")
        except Exception as exc:  # noqa: BLE001 - a crashing tool must not crash the worker
            outcome = self._raised(call, ctx, heartbeat, exc)
        else:
            outcome = self._returned(call, ctx, heartbeat, result, chain)
        if outcome.status == "lease_lost" and heartbeat.past_deadline():
            # nothing could be written: the lease ended with the deadline
            return self._ended_at_deadline(call, "stopped", outcome.detail)
        return outcome

    def _run_handler(self, call: ClaimedCall, ctx: CallContext, heartbeat: Heartbeat) -> Any:
        """The handler's answer. A call without a deadline runs it on this thread; a call with one
        on a thread of its own, waited for until the deadline and then one heartbeat interval more
        (time for a handler told at the deadline to stop): past that it is abandoned."""
        handler = self._handler_for(call.tool)
        if call.deadline_at is None:
            with ctx.span.current():
                return handler(ctx)
        run = _HandlerRun(handler, ctx, late=self._late)
        threading.Thread(target=run, daemon=True, name=f"handler-{self.worker_id}-{call.short_id}").start()
        while (wait := heartbeat.wait_for_handler()) > 0:
            if run.finished.wait(wait):
                return run.answer()
        if run.abandon():
            raise HandlerAbandoned(call.short_id)
        return run.answer()  # it finished at this very moment

    def _raised(self, call: ClaimedCall, ctx: CallContext, heartbeat: Heartbeat, exc: Exception) -> CallOutcome:
        if ctx.ended is not None:
            return self._checked_unknown(call, str(exc))
        if heartbeat.past_deadline():
            # whatever the handler met (DeadlinePassed, its own timeout sized by time_left()):
            # past the deadline nothing is written -- the lease ended with it, and a failure
            # slipped in during the last milliseconds would only requeue a call with no time left.
            # The sweep ends it by the ordinary rules.
            return self._ended_at_deadline(call, "stopped", f"{type(exc).__name__}: {exc}")
        if isinstance(exc, CancelRequested):
            return self._confirm_cancel(call)
        if isinstance(exc, LeaseLost):
            self.log_event("stopped_lease_lost", call, detail=str(exc))
            return CallOutcome(call.id, call.fencing_token, "lease_lost", str(exc))
        if isinstance(exc, OwnershipUnknown):
            # nothing irreversible was started; the lease decides who continues
            return CallOutcome(call.id, call.fencing_token, "lease_lost", str(exc))
        if isinstance(exc, ToolNoAnswer):
            return self._no_answer(call, ctx, str(exc))
        if isinstance(exc, CheckRequired):
            # the handler cannot say what became of the earlier request: not a guess, a human
            # (fail.sql's failure of a request that went out unchecked ends in outcome_unknown)
            return self._fail(call, {"message": str(exc), "unchecked_request": exc.external_request_id},
                              retryable=False)
        if isinstance(exc, ToolFailed):
            return self._fail(call, {"message": str(exc)}, retryable=exc.retryable)
        if ctx.side_effect_started:
            return self._no_answer(call, ctx, f"{type(exc).__name__}: {exc}")
        return self._fail(call, {"message": f"{type(exc).__name__}: {exc}"}, retryable=True)

    def _returned(self, call: ClaimedCall, ctx: CallContext, heartbeat: Heartbeat, result: Any,
                  chain: bool | Callable[[], bool]) -> CallOutcome:
        if ctx.ended is not None:
            # the database has ended the call (record_check 'unknown'): a human decides, with no
            # result from us
            self.log_event("result_not_written", call, logging.WARNING, reason=ctx.ended)
            return self._checked_unknown(call, "record_check: unknown")
        if heartbeat.cancel_requested.is_set() and result is None:
            return self._confirm_cancel(call)
        next_stage = result if isinstance(result, NextStage) else None
        try:
            body = serialise_result(next_stage.result if next_stage is not None else result)
        except (TypeError, ValueError) as exc:
            return self._raised(call, ctx, heartbeat, TypeError(f"the result is not JSON: {exc}"))
        if heartbeat.past_deadline():
            # a late result (the worker's reckoning of the database's deadline errs early, never
            # late): never reported done, kept by its hash
            self._reject_result(call, body, "deadline_passed", written=False, next_stage=next_stage)
            return CallOutcome(call.id, call.fencing_token, "result_rejected", "deadline passed before commit")
        if not heartbeat.lost.is_set() and heartbeat.seconds_confirmed() < call.heartbeat_seconds:
            # the last confirmation is old (a long pause, a stopped process): ask once more, so
            # that a lost lease is known and logged as such before anything is written
            heartbeat.beat(wait=call.heartbeat_seconds)
        if heartbeat.lost.is_set():
            # the lease is known lost (or ended with the deadline): the result is not written at all
            reason = "deadline_passed" if heartbeat.past_deadline() else "lease_lost"
            self._reject_result(call, body, reason, written=False, next_stage=next_stage)
            return CallOutcome(call.id, call.fencing_token, "result_rejected",
                               reason.replace("_", " ") + " before commit")
        if next_stage is not None:
            return self._complete_and_enqueue(call, body, next_stage)
        return self._complete(call, body, chain=chain() if callable(chain) else chain)

    # --------------------------------------------------------------- endings
    def _guarded(self, name: str, call: ClaimedCall, **params: Any) -> dict[str, Any] | None:
        """Run a final guarded write. If the connection breaks, the write may or may not have
        committed: reconnect (when the lane's backoff says) and send it once more -- the guard
        makes a repeat harmless, which is why the worker may, where nothing else resends; the
        caller then tells "my first attempt landed" from "rejected" by reading the call."""
        broken = waited = 0
        while True:
            try:
                return self.write(name, **params)
            except DatabaseUnavailable:
                broken += 1
                if broken == 2:
                    raise
                self._main.pause()
            except (RowLocked, StatementTimedOut) as exc:
                # a long transaction elsewhere holds the row (or the server is slow): the answer
                # is worth keeping, and the guard still fences the retry (zero rows once the lease
                # is gone); journaled each time with its cause
                self.report_database_error(call, name, exc)
                waited += 1
                if waited == FINAL_WRITE_ATTEMPTS:
                    raise
            except LeasectlError as exc:
                self.report_database_error(call, name, exc)
                raise

    def _landed(self, call: ClaimedCall, state: str) -> dict[str, Any] | None:
        """After a zero-row answer to a retried write: did the first attempt commit?"""
        try:
            row = self.write("views/job", job_id=call.id)
        except LeasectlError:
            return None
        if row and row["state"] == state and row["owner_id"] == self.worker_id \
                and row["fencing_token"] == call.fencing_token:
            return row
        return None

    def _wait_out_partition(self) -> None:
        if self.partitioned.is_set():
            # cut off: the write cannot reach the database; it is sent after the partition
            while self.partitioned.is_set():
                time.sleep(0.05)

    def _complete(self, call: ClaimedCall, body: bytes, *, chain: bool = False) -> CallOutcome:
        self._wait_out_partition()
        sent = time.monotonic()
        next_call = None
        both = None
        if chain:
            try:
                both = self.write("worker/complete_and_claim", job_id=call.id, worker_id=self.worker_id,
                                  fencing_token=call.fencing_token, result=statements.result_param(body),
                                  tools=self.tools)
            except DatabaseUnavailable:
                pass  # fate unknown; the plain retry below cannot claim a second call by accident
            except (RowLocked, StatementTimedOut) as exc:
                # rolled back, nothing claimed: journaled, then the plain complete retries it
                self.report_database_error(call, "worker/complete_and_claim", exc)
        if both is not None:
            row = both if both["completed"] else None
            next_call = self._claimed(both, sent)
        else:
            row = self.complete_alone(call, body)
        return self._completed(call, body, row, next_call=next_call)

    def complete_alone(self, call: ClaimedCall, body: bytes) -> dict[str, Any] | None:
        """complete.sql for one call (resent once after a lost connection: the guard makes a repeat
        harmless); None when its result was not stored."""
        return self._guarded("worker/complete", call, job_id=call.id, worker_id=self.worker_id,
                             fencing_token=call.fencing_token, result=statements.result_param(body))

    def _completed(self, call: ClaimedCall, body: bytes, row: Mapping[str, Any] | None, *,
                   next_call: Claimed | None = None, statement: str = "complete.sql") -> CallOutcome:
        """The outcome of a completion whose answer is `row` (None: zero rows, or no answer)."""
        if row is None and (landed := self._landed(call, "succeeded")) is not None:
            row = landed  # our first attempt committed; only its answer was lost
        if row is None:
            self._reject_result(call, body, "zero_rows")
            return CallOutcome(call.id, call.fencing_token, "result_rejected", f"{statement}: zero rows",
                               next_call=next_call)
        self.observe("complete", call, row["finished_at"])
        self.log_event("job_completed", call, despite_cancel=row["completed_despite_cancel"])
        return CallOutcome(call.id, call.fencing_token, "succeeded",
                           completed_despite_cancel=row["completed_despite_cancel"], next_call=next_call)

    def _complete_and_enqueue(self, call: ClaimedCall, body: bytes, next_stage: NextStage) -> CallOutcome:
        """Store the result and enqueue the chain's next stage in one transaction: both or neither."""
        self._wait_out_partition()
        row = self._guarded("worker/complete_and_enqueue", call, job_id=call.id, worker_id=self.worker_id,
                            fencing_token=call.fencing_token, result=statements.result_param(body),
                            next_tool=next_stage.tool, next_idempotency_key=next_stage.idempotency_key,
                            next_payload=Jsonb(next_stage.payload))
        next_id = None if row is None else row["next_id"]
        if row is None and (landed := self._landed(call, "succeeded")) is not None:
            # our first attempt committed, and its next stage with it; only its answer (and the
            # next stage's id: find it by its key) was lost
            row = landed
        if row is None:
            self._reject_result(call, body, "zero_rows", next_stage=next_stage)
            return CallOutcome(call.id, call.fencing_token, "result_rejected",
                               "complete_and_enqueue.sql: zero rows; no next stage")
        self.observe("complete", call, row["finished_at"])
        if next_id is None:
            self.log_event("next_stage_not_enqueued", call, tool=next_stage.tool, key=next_stage.idempotency_key)
        self.log_event("job_completed", call, despite_cancel=row["completed_despite_cancel"], next_stage=next_id)
        return CallOutcome(call.id, call.fencing_token, "succeeded",
                           completed_despite_cancel=row["completed_despite_cancel"], next_stage_id=next_id)

    def _ended_at_deadline(self, call: ClaimedCall, handler: str, detail: str = "") -> CallOutcome:
        """The call outlived its deadline: nothing more can be written for it (its lease ended with
        the deadline), so the worker says so in the journal and moves on; the sweep ends the call.
        `handler`: stopped (it was told and ended) or abandoned (it still runs: whatever it returns
        is journaled as result_rejected, never written)."""
        self.log_event("deadline_passed", call, logging.WARNING, handler=handler)
        self.record_event(call, "deadline_passed", {
            "handler": handler,
            "deadline_at": call.deadline_at.isoformat() if call.deadline_at is not None else None})
        return CallOutcome(call.id, call.fencing_token, "deadline_passed",
                           detail or f"the deadline passed; the handler was {handler}")

    def _checked_unknown(self, call: ClaimedCall, detail: str) -> CallOutcome:
        """record_check('unknown') moved the call to outcome_unknown: a human decides."""
        self.observe("outcome_unknown", call, None)
        self.log_event("outcome_unknown", call, reason="check_unknown")
        return CallOutcome(call.id, call.fencing_token, "outcome_unknown", detail)

    def _confirm_cancel(self, call: ClaimedCall) -> CallOutcome:
        row = self._guarded("worker/confirm_cancel", call, job_id=call.id, worker_id=self.worker_id,
                            fencing_token=call.fencing_token)
        if row is None:
            self.log_event("cancel_not_confirmed", call, reason="zero_rows")
            return CallOutcome(call.id, call.fencing_token, "lease_lost", "confirm_cancel.sql: zero rows")
        self.observe("cancel", call, row["finished_at"])
        self.log_event("cancel_confirmed", call)
        return CallOutcome(call.id, call.fencing_token, "cancelled")

    def _fail(self, call: ClaimedCall, error: dict[str, Any], *, retryable: bool) -> CallOutcome:
        row = self._guarded("worker/fail", call, job_id=call.id, worker_id=self.worker_id,
                            fencing_token=call.fencing_token, error=Jsonb(error), retryable=retryable)
        if row is None:
            self.log_event("failure_rejected", call, reason="zero_rows")
            return CallOutcome(call.id, call.fencing_token, "lease_lost", "fail.sql: zero rows")
        self.observe("fail", call, None)
        # an unverifiable call whose request went out is never retried on its own: a human decides
        status = {"queued": "requeued", "outcome_unknown": "outcome_unknown"}.get(row["state"], "failed")
        self.log_event("job_" + status, call, error=error.get("message"))
        return CallOutcome(call.id, call.fencing_token, status, str(error.get("message", "")))

    def _no_answer(self, call: ClaimedCall, ctx: CallContext, message: str) -> CallOutcome:
        error = {"message": message, "external_request_id": ctx.external_request_id,
                 "side_effect_started": ctx.side_effect_started}
        if ctx.side_effect_started and call.side_effect == "mutating_unverifiable":
            row = self._guarded("worker/report_outcome_unknown", call, job_id=call.id,
                                worker_id=self.worker_id, fencing_token=call.fencing_token,
                                error=Jsonb(error))
            if row is None:
                self.log_event("outcome_unknown_rejected", call, reason="zero_rows")
                return CallOutcome(call.id, call.fencing_token, "lease_lost",
                                   "report_outcome_unknown.sql: zero rows")
            self.observe("outcome_unknown", call, None)
            self.log_event("outcome_unknown", call, request=ctx.external_request_id)
            return CallOutcome(call.id, call.fencing_token, "outcome_unknown", message)
        # read-only: safe to redo; verifiable: the next owner checks the status first
        return self._fail(call, error, retryable=True)
