"""The reference worker: the lease protocol of seed 000 and the side-effect rules of seed 004.

Usable by any Python program::

    def handler(ctx: CallContext) -> dict:
        ctx.start_side_effect(request_id)           # recorded before calling out
        reply = api.submit(fence=ctx.fencing_token, idempotency_key=ctx.idempotency_key, ...)
        return reply.result

    Worker(dsn, "worker-1", {"payment_capture": handler}).run(stop_event)

What it guarantees, whatever the handler does:

* the heartbeat runs on its own thread and its own connection, every H seconds;
* a heartbeat that returns zero rows means the lease is lost: the worker logs `heartbeat_lost`,
  tells the handler (ctx.lease_lost), refuses any new side effect and never reports success
  except through complete.sql, whose guard rejects it (`result_rejected`);
* a new irreversible step is refused when ownership cannot be confirmed before a conservative
  deadline (`ownership_unknown`, with job, token, last confirmed lease and external request id);
* a side effect is recorded (start_side_effect.sql) before the request leaves;
* a cancel learnt through the heartbeat is confirmed once the handler stops;
* no answer after a side effect started: unverifiable -> outcome_unknown (a human decides),
  verifiable or read-only -> a retryable failure (the next owner is told what may have run).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn

from psycopg.types.json import Jsonb

from console.db.connect import Conn, connect, run_one
from console.shared.config import WORKER_LIMITS, SessionLimits
from console.shared.errors import (
    DatabaseUnavailable,
    LeasectlError,
    PermissionDenied,
    ProtocolViolation,
    RowLocked,
    StatementTimedOut,
)

log = logging.getLogger("leasectl.worker")


def _utcnow() -> str:
    return datetime.now(UTC).isoformat()


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


@dataclass
class Outcome:
    """What happened to one claimed call, from this worker's point of view."""

    job_id: uuid.UUID
    fencing_token: int
    status: str  # succeeded | result_rejected | cancelled | failed | requeued | outcome_unknown | lease_lost
    detail: str = ""
    completed_despite_cancel: bool = False
    # the next call, claimed in the same transaction as this one's completion (run loop only)
    next_call: tuple[ClaimedCall, float, float] | None = None


# ------------------------------------------------------------------------------ heartbeat


class Heartbeat:
    """The lease of one claimed call, renewed every H seconds by its worker's heartbeat thread
    (one long-lived thread and connection per worker, never the thread running the tool).

    `confirmed_until` is a local monotonic deadline: the moment the request that confirmed the
    lease was *sent*, plus the lease time the database reported left. Measuring from the send
    time makes it conservative whatever the round trip did.
    """

    def __init__(self, worker: Worker, call: ClaimedCall, claimed_at_monotonic: float,
                 lease_left: float) -> None:
        self.worker = worker
        self.call = call
        self.lost = threading.Event()
        self.cancel_requested = threading.Event()
        self.stopped = threading.Event()
        self.confirmed_until = claimed_at_monotonic + lease_left
        self.last_confirmed_lease: datetime = call.lease_until
        self.next_beat = time.monotonic() + call.heartbeat_seconds
        self.failures = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        self.worker._serve_heartbeat(self)

    def stop(self) -> None:
        """No renewal after this returns: one already in flight is waited for."""
        self.stopped.set()
        self.worker._serve_heartbeat(None, only_if=self)
        with self._lock:
            pass

    def schedule_next(self) -> None:
        interval = self.call.heartbeat_seconds
        # after a failure, retry sooner: the lease is running out while we cannot reach it
        self.next_beat = time.monotonic() + (interval if self.failures == 0 else min(interval, 0.5))

    def beat(self, wait: float | None = None, *, scheduled: bool = False) -> bool | None:
        """One renewal. True: renewed; False: lost (zero rows); None: no answer from the database.

        `wait` bounds how long to queue behind a renewal already in flight (one that hangs on
        the network must not hang the caller too). A `scheduled` beat is skipped once stopped.
        """
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            return None
        try:
            if self.lost.is_set():
                return False
            if scheduled and self.stopped.is_set():
                return None
            sent = time.monotonic()
            try:
                conn = self.worker._heartbeat_conn()
                row = run_one(conn, "worker/heartbeat", job_id=self.call.id,
                              worker_id=self.worker.worker_id,
                              fencing_token=self.call.fencing_token)
            except LeasectlError as exc:
                self.failures += 1
                self.worker._drop_heartbeat_conn()
                self.worker._log("heartbeat_error", self.call, error=str(exc),
                                 confirmed_left=round(self.confirmed_until - time.monotonic(), 3))
                self.worker._database_error(self.call, "worker/heartbeat", exc)
                return None
            self.failures = 0
            if row is None:
                self.lost.set()
                self.worker._log("heartbeat_lost", self.call, reason="zero_rows")
                self.worker._record_event(self.call, "heartbeat_lost", {"reason": "zero_rows"})
                return False
            self.confirmed_until = sent + (row["lease_until"] - row["db_now"]).total_seconds()
            self.last_confirmed_lease = row["lease_until"]
            if row["cancel_requested"] and not self.cancel_requested.is_set():
                self.cancel_requested.set()
                self.worker._log("cancel_heard", self.call)
            self.worker._log("heartbeat_ok", self.call, lease_until=row["lease_until"].isoformat(),
                             level=logging.DEBUG)
            self.worker._observe("heartbeat", self.call, row["db_now"])
            return True
        finally:
            self._lock.release()

    def seconds_confirmed(self) -> float:
        return self.confirmed_until - time.monotonic()


# ------------------------------------------------------------------------------ context


class CallContext:
    """What a handler sees of its call: identity, fencing token, and the lease's verdicts."""

    def __init__(self, worker: Worker, call: ClaimedCall, heartbeat: Heartbeat) -> None:
        self.worker = worker
        self.call = call
        self._heartbeat = heartbeat
        self.side_effect_started = False
        self.external_request_id: str | None = None

    # identity the receiver needs
    @property
    def fencing_token(self) -> int:
        return self.call.fencing_token

    @property
    def idempotency_key(self) -> str:
        return self.call.idempotency_key

    @property
    def payload(self) -> Any:
        return self.call.payload

    @property
    def worker_id(self) -> str:
        return self.worker.worker_id

    @property
    def lease_lost(self) -> bool:
        return self._heartbeat.lost.is_set()

    @property
    def cancel_requested(self) -> bool:
        return self._heartbeat.cancel_requested.is_set()

    def checkpoint(self) -> None:
        """Raise if the call must stop here: lease lost or cancel requested."""
        if self.lease_lost:
            raise LeaseLost(f"lease on {self.call.short_id} lost")
        if self.cancel_requested:
            raise CancelRequested(f"cancel requested for {self.call.short_id}")

    def sleep(self, seconds: float) -> None:
        """Wait, but wake at once (and raise) if the lease is lost or a cancel arrives."""
        deadline = time.monotonic() + seconds
        while True:
            self.checkpoint()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._heartbeat.lost.wait(min(left, 0.05))

    def start_side_effect(self, external_request_id: str | None = None) -> str:
        """Record that an irreversible request is about to leave. Call it right before sending.

        Raises LeaseLost, CancelRequested or OwnershipUnknown when the request must NOT be sent.
        Returns the external request id to send along (generated when not given).
        """
        self.checkpoint()
        request_id = external_request_id or f"req-{uuid.uuid4().hex[:12]}"
        margin = self.call.heartbeat_seconds + self.call.jitter_seconds
        if self._heartbeat.seconds_confirmed() < margin:
            # not enough lease left to be sure of finishing the step: confirm it first
            renewed = self._heartbeat.beat(wait=margin / 2)
            if renewed is False:
                raise LeaseLost(f"lease on {self.call.short_id} lost")
            if renewed is None or self._heartbeat.seconds_confirmed() < margin:
                self._ownership_unknown(request_id)
            self.checkpoint()
        if self.worker.partitioned.is_set():
            self._ownership_unknown(request_id)
        try:
            row = run_one(self.worker._main_conn(), "worker/start_side_effect", job_id=self.call.id,
                          worker_id=self.worker_id, fencing_token=self.fencing_token,
                          external_request_id=request_id)
        except LeasectlError as exc:
            self.worker._drop_main_conn()
            self.worker._database_error(self.call, "worker/start_side_effect", exc)
            self._ownership_unknown(request_id)
        if row is None:
            # learn why: a cancel request, the lease gone, or (still ours) the deadline passed
            still_ours = self._heartbeat.beat(wait=margin / 2)
            if self.cancel_requested:
                raise CancelRequested(f"cancel requested for {self.call.short_id}")
            if still_ours and self.call.deadline_at is not None:
                raise DeadlinePassed(f"the chain's deadline passed before {request_id} could start")
            raise LeaseLost(f"start_side_effect for {self.call.short_id} got zero rows")
        self.side_effect_started = True
        self.external_request_id = request_id
        self.worker._log("tool_request_started", self.call, request=request_id)
        return request_id

    def record_event(self, kind: str, details: dict[str, Any] | None = None) -> None:
        self.worker._record_event(self.call, kind, details or {})

    def _ownership_unknown(self, request_id: str) -> NoReturn:
        details: dict[str, Any] = {
            "last_confirmed_lease": self._heartbeat.last_confirmed_lease.isoformat(),
            "external_request_id": request_id,
            "seconds_confirmed": round(self._heartbeat.seconds_confirmed(), 3),
        }
        self.worker._log("ownership_unknown", self.call, **details)
        self.worker._record_event(self.call, "ownership_unknown", details)
        raise OwnershipUnknown(
            f"cannot confirm ownership of {self.call.short_id} (token {self.fencing_token}) "
            f"before a conservative deadline; not sending {request_id}"
        )


# ------------------------------------------------------------------------------ worker


Observer = Callable[[str, uuid.UUID, int, datetime | None], None]


@dataclass
class Worker:
    dsn: str
    worker_id: str
    handlers: Mapping[str, Handler] | Handler
    tools: list[str] | None = None
    poll_interval: float = 0.2
    limits: SessionLimits = field(default_factory=lambda: WORKER_LIMITS)
    # called as observer(kind, job_id, fencing_token, db_time) after each successful guarded write
    observer: Observer | None = None
    # the demo sets this to simulate a worker cut off from the database
    partitioned: threading.Event = field(default_factory=threading.Event)
    _main: Conn | None = field(default=None, init=False, repr=False)
    _hb: Conn | None = field(default=None, init=False, repr=False)
    _main_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _events_lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _pending_events: list[tuple[ClaimedCall, str, dict[str, Any]]] = field(
        default_factory=list, init=False, repr=False)
    _beat_cond: threading.Condition = field(default_factory=threading.Condition, init=False, repr=False)
    _identity_checked: bool = field(default=False, init=False, repr=False)
    _active: Heartbeat | None = field(default=None, init=False, repr=False)
    _beater: threading.Thread | None = field(default=None, init=False, repr=False)
    _closing: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.tools is None and isinstance(self.handlers, Mapping):
            self.tools = sorted(self.handlers)

    # --------------------------------------------------------------- connections
    def _main_conn(self) -> Conn:
        if self._main is None or self._main.closed or self._main.broken:
            self._main = connect(self.dsn, limits=self.limits,
                                 application_name=f"leasectl-worker:{self.worker_id}")
        return self._main

    def _drop_main_conn(self) -> None:
        if self._main is not None:
            self._main.close()
            self._main = None

    def _heartbeat_conn(self) -> Conn:
        if self._hb is None or self._hb.closed or self._hb.broken:
            self._hb = connect(self.dsn, limits=self.limits,
                               application_name=f"leasectl-worker:{self.worker_id}:heartbeat")
        return self._hb

    def _drop_heartbeat_conn(self) -> None:
        if self._hb is not None:
            self._hb.close()
            self._hb = None

    def close(self) -> None:
        with self._beat_cond:
            self._closing = True
            self._active = None
            self._beat_cond.notify_all()
        if self._beater is not None and self._beater is not threading.current_thread():
            self._beater.join(timeout=5)
        self._beater = None
        self._closing = False
        self._drop_main_conn()
        self._drop_heartbeat_conn()

    # --------------------------------------------------------------- heartbeat thread
    def _serve_heartbeat(self, heartbeat: Heartbeat | None, only_if: Heartbeat | None = None) -> None:
        with self._beat_cond:
            if only_if is not None and self._active is not only_if:
                return
            self._active = heartbeat
            if self._beater is None or not self._beater.is_alive():
                self._beater = threading.Thread(target=self._beat_loop, daemon=True,
                                                name=f"heartbeat-{self.worker_id}")
                self._beater.start()
            self._beat_cond.notify_all()

    def _beat_loop(self) -> None:
        while True:
            with self._beat_cond:
                if self._closing:
                    return
                heartbeat = self._active
                if heartbeat is None:
                    self._beat_cond.wait(timeout=1.0)
                    continue
                delay = heartbeat.next_beat - time.monotonic()
                if delay > 0:
                    self._beat_cond.wait(timeout=delay)
                    continue
            if self.partitioned.is_set():
                # a simulated network partition (the demo): the beat never reaches the database
                heartbeat.schedule_next()
                continue
            heartbeat.beat(scheduled=True)
            heartbeat.schedule_next()
            if heartbeat.lost.is_set():
                self._serve_heartbeat(None, only_if=heartbeat)

    # --------------------------------------------------------------- logging
    def _log(self, event: str, call: ClaimedCall, level: int = logging.INFO, **fields: Any) -> None:
        if not log.isEnabledFor(level):
            return
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        log.log(level, "%s job=%s token=%s worker=%s %s", event, call.short_id, call.fencing_token,
                self.worker_id, extra)

    def _record_event(self, call: ClaimedCall, kind: str, details: dict[str, Any]) -> None:
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
                    run_one(self._heartbeat_conn(), "worker/record_event", job_id=call.id, kind=kind,
                            actor=self.worker_id, fencing_token=call.fencing_token,
                            details=Jsonb(details))
                except ProtocolViolation as exc:
                    # the database will never accept this one (not ours to write): keep the log
                    # line, drop the event, and let the ones behind it through
                    self._log("event_refused", call, kind=kind, error=str(exc), level=logging.ERROR)
                except LeasectlError as exc:
                    self._drop_heartbeat_conn()
                    self._log("event_pending", call, kind=kind, error=str(exc), level=logging.WARNING)
                    return
                self._pending_events.pop(0)

    def _observe(self, kind: str, call: ClaimedCall, db_time: datetime | None) -> None:
        if self.observer is not None:
            self.observer(kind, call.id, call.fencing_token, db_time)

    # --------------------------------------------------------------- the loop
    def check_identity(self) -> None:
        """Before the first claim: may this login own calls as worker_id? A leasectl_worker login
        owns calls only as `<login>` or `<login>:<name>` (the database refuses any other owner)."""
        if self._identity_checked:
            return
        row = run_one(self._main_conn(), "worker/check_identity", worker_id=self.worker_id)
        if row is not None and not row["acceptable"]:
            raise PermissionDenied(f"worker id {self.worker_id!r} is not yours: the login {row['login']} may own "
                                   f"calls only as {row['expected']}",
                                   hint="start the worker with a worker_id of that form")
        self._identity_checked = True

    def claim(self) -> tuple[ClaimedCall, float, float] | None:
        if self.partitioned.is_set():
            return None
        self.check_identity()
        sent = time.monotonic()
        row = run_one(self._main_conn(), "worker/claim", worker_id=self.worker_id, tools=self.tools)
        return self._claimed(row, sent)

    def _claimed(self, row: Mapping[str, Any] | None, sent: float) -> tuple[ClaimedCall, float, float] | None:
        if row is None or row["id"] is None:
            return None
        call = ClaimedCall.from_row(row)
        lease_left = (row["lease_until"] - row["db_now"]).total_seconds()
        self._log("job_claimed", call, lease_until=row["lease_until"].isoformat(), attempt=call.attempt,
                  previous_request=call.previous_request_id)
        self._observe("claim", call, row["db_now"])
        return call, sent, lease_left

    def run_once(self) -> Outcome | None:
        """Claim one call and take it to an outcome. None when there was nothing to do."""
        if self._pending_events:
            self.flush_events()
        claimed = self.claim()
        if claimed is None:
            return None
        return self.process(*claimed)

    def run(self, stop: threading.Event, *, max_calls: int | None = None, drain: bool = False) -> int:
        """Work until `stop` is set (or, with `drain`, until there is nothing left to claim).
        Survives database restarts: it backs off and reconnects. Completing a call and claiming
        the next share one transaction (complete_and_claim.sql)."""
        done = 0
        backoff = self.poll_interval
        claimed: tuple[ClaimedCall, float, float] | None = None
        while not stop.is_set() and (max_calls is None or done < max_calls):
            try:
                if self._pending_events:
                    self.flush_events()
                if claimed is None:
                    claimed = self.claim()
                if claimed is None:
                    if drain:
                        break
                    stop.wait(self.poll_interval)
                    continue
                more = max_calls is None or done + 1 < max_calls
                outcome = self.process(*claimed, chain=more)
                claimed = outcome.next_call if not stop.is_set() else None
                done += 1
                backoff = self.poll_interval
            except PermissionDenied:
                self.close()
                raise  # a worker id the database will never accept: retrying cannot help
            except DatabaseUnavailable as exc:
                log.warning("database unavailable for %s: %s", self.worker_id, exc)
                claimed = None
                self.close()
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except LeasectlError as exc:
                log.warning("worker %s: %s", self.worker_id, exc)
                claimed = None
                self._drop_main_conn()
                stop.wait(backoff)
        self.close()
        return done

    def _handler_for(self, tool: str) -> Handler:
        if isinstance(self.handlers, Mapping):
            return self.handlers[tool]
        return self.handlers

    def process(self, call: ClaimedCall, claimed_at: float, lease_left: float, *,
                chain: bool = False) -> Outcome:
        """Run the tool and record its outcome. With `chain`, a successful completion also claims
        the next call in the same transaction (returned as Outcome.next_call)."""
        heartbeat = Heartbeat(self, call, claimed_at, lease_left)
        heartbeat.start()
        ctx = CallContext(self, call, heartbeat)
        try:
            try:
                result = self._handler_for(call.tool)(ctx)
            finally:
                heartbeat.stop()
        except CancelRequested:
            return self._confirm_cancel(call)
        except LeaseLost as exc:
            self._log("stopped_lease_lost", call, detail=str(exc))
            return Outcome(call.id, call.fencing_token, "lease_lost", str(exc))
        except OwnershipUnknown as exc:
            # nothing irreversible was started; the lease decides who continues
            return Outcome(call.id, call.fencing_token, "lease_lost", str(exc))
        except ToolNoAnswer as exc:
            return self._no_answer(call, ctx, str(exc))
        except ToolFailed as exc:
            return self._fail(call, {"message": str(exc)}, retryable=exc.retryable)
        except Exception as exc:  # noqa: BLE001 - a crashing tool must not crash the worker
            if ctx.side_effect_started:
                return self._no_answer(call, ctx, f"{type(exc).__name__}: {exc}")
            return self._fail(call, {"message": f"{type(exc).__name__}: {exc}"}, retryable=True)
        if heartbeat.cancel_requested.is_set() and result is None:
            return self._confirm_cancel(call)
        if not heartbeat.lost.is_set() and heartbeat.seconds_confirmed() < call.heartbeat_seconds:
            # the last confirmation is old (a long pause, a stopped process): ask once more, so
            # that a lost lease is known and logged as such before anything is written
            heartbeat.beat(wait=call.heartbeat_seconds)
        if heartbeat.lost.is_set():
            # the lease is known lost: the result is not written at all
            self._log("result_rejected", call, reason="lease_lost")
            self._record_event(call, "result_rejected", {"reason": "lease_lost", "written": False})
            return Outcome(call.id, call.fencing_token, "result_rejected", "lease lost before commit")
        return self._complete(call, result, chain=chain)

    # --------------------------------------------------------------- endings
    def _guarded(self, name: str, call: ClaimedCall, **params: Any) -> dict[str, Any] | None:
        """Run a final guarded write. If the connection breaks, the write may or may not have
        committed: reconnect and send it once more (the guard makes a repeat harmless); the
        caller then tells "my first attempt landed" from "rejected" by reading the call."""
        for attempt in range(2):
            try:
                with self._main_lock:
                    return run_one(self._main_conn(), name, **params)
            except DatabaseUnavailable:
                self._drop_main_conn()
                if attempt == 1:
                    raise
                time.sleep(0.2)
            except LeasectlError as exc:
                self._database_error(call, name, exc)
                raise
        return None  # pragma: no cover - the loop returns or raises

    def _database_error(self, call: ClaimedCall, statement: str, error: LeasectlError) -> None:
        """A lock wait or a heavy statement met on the way (seed 004): journaled with its cause,
        so that the two are counted apart (details.cause: lock_timeout | statement_timeout)."""
        cause = {RowLocked: "lock_timeout", StatementTimedOut: "statement_timeout"}.get(type(error))
        if cause is not None:
            self._record_event(call, "database_error", {"cause": cause, "statement": statement,
                                                        "error": str(error)})

    def _landed(self, call: ClaimedCall, state: str) -> dict[str, Any] | None:
        """After a zero-row answer to a retried write: did the first attempt commit?"""
        try:
            row = run_one(self._main_conn(), "views/job", job_id=call.id)
        except LeasectlError:
            return None
        if row and row["state"] == state and row["owner_id"] == self.worker_id \
                and row["fencing_token"] == call.fencing_token:
            return row
        return None

    def _complete(self, call: ClaimedCall, result: Any, *, chain: bool = False) -> Outcome:
        if self.partitioned.is_set():
            # cut off: the write cannot reach the database; it is sent after the partition
            while self.partitioned.is_set():
                time.sleep(0.05)
        sent = time.monotonic()
        next_call = None
        both = None
        if chain:
            try:
                with self._main_lock:
                    both = run_one(self._main_conn(), "worker/complete_and_claim", job_id=call.id,
                                   worker_id=self.worker_id, fencing_token=call.fencing_token,
                                   result=Jsonb(result), tools=self.tools)
            except DatabaseUnavailable:
                # fate unknown; the plain retry below cannot claim a second call by accident
                self._drop_main_conn()
        if both is not None:
            row = both if both["completed"] else None
            next_call = self._claimed(both, sent)
        else:
            row = self._guarded("worker/complete", call, job_id=call.id, worker_id=self.worker_id,
                                fencing_token=call.fencing_token, result=Jsonb(result))
        if row is None and (landed := self._landed(call, "succeeded")) is not None:
            row = landed  # our first attempt committed; only its answer was lost
        if row is None:
            self._log("result_rejected", call, reason="zero_rows")
            self._record_event(call, "result_rejected", {"reason": "zero_rows"})
            return Outcome(call.id, call.fencing_token, "result_rejected", "complete.sql: zero rows",
                           next_call=next_call)
        self._observe("complete", call, row["finished_at"])
        self._log("job_completed", call, despite_cancel=row["completed_despite_cancel"])
        return Outcome(call.id, call.fencing_token, "succeeded",
                       completed_despite_cancel=row["completed_despite_cancel"], next_call=next_call)

    def _confirm_cancel(self, call: ClaimedCall) -> Outcome:
        row = self._guarded("worker/confirm_cancel", call, job_id=call.id, worker_id=self.worker_id,
                            fencing_token=call.fencing_token)
        if row is None:
            self._log("cancel_not_confirmed", call, reason="zero_rows")
            return Outcome(call.id, call.fencing_token, "lease_lost", "confirm_cancel.sql: zero rows")
        self._observe("cancel", call, row["finished_at"])
        self._log("cancel_confirmed", call)
        return Outcome(call.id, call.fencing_token, "cancelled")

    def _fail(self, call: ClaimedCall, error: dict[str, Any], *, retryable: bool) -> Outcome:
        row = self._guarded("worker/fail", call, job_id=call.id, worker_id=self.worker_id,
                            fencing_token=call.fencing_token, error=Jsonb(error), retryable=retryable)
        if row is None:
            self._log("failure_rejected", call, reason="zero_rows")
            return Outcome(call.id, call.fencing_token, "lease_lost", "fail.sql: zero rows")
        self._observe("fail", call, None)
        # an unverifiable call whose request went out is never retried on its own: a human decides
        status = {"queued": "requeued", "outcome_unknown": "outcome_unknown"}.get(row["state"], "failed")
        self._log("job_" + status, call, error=error.get("message"))
        return Outcome(call.id, call.fencing_token, status, str(error.get("message", "")))

    def _no_answer(self, call: ClaimedCall, ctx: CallContext, message: str) -> Outcome:
        error = {"message": message, "external_request_id": ctx.external_request_id,
                 "side_effect_started": ctx.side_effect_started}
        if ctx.side_effect_started and call.side_effect == "mutating_unverifiable":
            row = self._guarded("worker/report_outcome_unknown", call, job_id=call.id,
                                worker_id=self.worker_id, fencing_token=call.fencing_token,
                                error=Jsonb(error))
            if row is None:
                self._log("outcome_unknown_rejected", call, reason="zero_rows")
                return Outcome(call.id, call.fencing_token, "lease_lost",
                               "report_outcome_unknown.sql: zero rows")
            self._observe("outcome_unknown", call, None)
            self._log("outcome_unknown", call, request=ctx.external_request_id)
            return Outcome(call.id, call.fencing_token, "outcome_unknown", message)
        # read-only: safe to redo; verifiable: the next owner checks the status first
        return self._fail(call, error, retryable=True)
