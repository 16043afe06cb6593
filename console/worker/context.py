"""What a handler sees of its call: identity, fencing token, the lease's verdicts, the time left
before its deadline, its trace (the `traceparent` to send on: console.worker.tracing), and the
steps it takes through the shared SQL (a side effect's start, a check of an earlier request, the
next stage of its chain)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from psycopg.types.json import Jsonb

from console.shared.errors import LeasectlError
from console.worker.calls import (
    CancelRequested,
    CheckRequired,
    ClaimedCall,
    DeadlinePassed,
    LeaseLost,
    NextStage,
    OutcomeUnknown,
    OwnershipUnknown,
    PreconditionLapsed,
)
from console.worker.tracing import CallSpan

# what worker/record_check.sql takes as `found`
CHECK_FOUND = ("done", "not_done", "unknown")

if TYPE_CHECKING:
    from console.worker.heartbeat import Heartbeat
    from console.worker.host import CallHost


class CallContext:
    """What a handler sees of its call: identity, fencing token, and the lease's verdicts."""

    def __init__(self, worker: CallHost, call: ClaimedCall, heartbeat: Heartbeat,
                 span: CallSpan | None = None) -> None:
        self.worker = worker
        self.call = call
        self._heartbeat = heartbeat
        # this attempt as a span of the call's trace
        self.span = span if span is not None else CallSpan(call, worker.worker_id)
        self.side_effect_started = False
        self.external_request_id: str | None = None
        self.lease_left_at_start: float | None = None
        # the request the call carries on its row (an earlier attempt's, then each one this
        # handler starts), and whether a check found it not_done since it started: what
        # start_side_effect.sql asks of a mutating_verifiable call before another request
        self._carried_request: str | None = call.previous_request_id
        self._checked_not_done = False
        # what the last record_check found (None: no check recorded by this handler)
        self.check_found: str | None = None
        # set once the database has ended the call under this handler (record_check 'unknown'):
        # the worker then writes nothing more for it, whatever the handler does next
        self.ended: str | None = None

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
    def trace_id(self) -> str | None:
        """The call's W3C trace id (given at enqueue, or its parent's), or None."""
        return self.span.trace_id

    @property
    def traceparent(self) -> str | None:
        """The W3C `traceparent` to send with a request (the receiver's `traceparent` header): the
        call's trace, this attempt's span id, sampled. None when the call has no trace."""
        return self.span.traceparent

    @property
    def lease_lost(self) -> bool:
        return self._heartbeat.lost.is_set()

    @property
    def cancel_requested(self) -> bool:
        return self._heartbeat.cancel_requested.is_set()

    def time_left(self) -> float | None:
        """Seconds left before the call's deadline (deadline_at, the whole chain's), by the
        database's clock; 0.0 once it passed; None when the call has no deadline.

        Size every wait and every timeout of the tool by it: 4 s left, take less than 4 s
        (docs/seeds.md §004.5). It is measured as the database sees it, never by this machine's
        wall clock: each claim and heartbeat answer carries db_now and deadline_at, and the worker
        keeps the difference on the local monotonic clock, counted from when the statement was sent
        -- so it errs early, never late. A result written after the deadline is refused (the lease
        ends with it), and a handler still running then is told, then abandoned (see
        console.worker.runner)."""
        left = self._heartbeat.time_left()
        return None if left is None else max(left, 0.0)

    @property
    def deadline_passed(self) -> bool:
        return self._heartbeat.past_deadline()

    @property
    def needs_check(self) -> bool:
        """True while a new request must wait for a check: the call is mutating_verifiable and
        carries a request (an earlier attempt's, or one this handler started) that no
        record_check('not_done') has followed. start_side_effect() raises CheckRequired then."""
        return (self.call.side_effect == "mutating_verifiable" and self._carried_request is not None
                and not self._checked_not_done)

    def checkpoint(self) -> None:
        """Raise if the call must stop here: deadline passed, lease lost or cancel requested."""
        if self.deadline_passed:
            raise DeadlinePassed(f"the deadline of {self.call.short_id} has passed")
        if self.lease_lost:
            raise LeaseLost(f"lease on {self.call.short_id} lost")
        if self.cancel_requested:
            raise CancelRequested(f"cancel requested for {self.call.short_id}")

    def sleep(self, seconds: float) -> None:
        """Wait, but wake at once (and raise) if the lease is lost, a cancel arrives or the
        deadline passes."""
        end = time.monotonic() + seconds
        while (left := self.sleep_slice(end)) is not None:
            self._heartbeat.wait(left)

    def sleep_slice(self, end: float) -> float | None:
        """One wait of a sleep until `end` (monotonic): raises if the call must stop, None once the
        sleep is over, else how long to wait at most before looking again (never past the
        deadline: the heartbeat thread raises the verdict then too, but this wakes on time even
        when that thread is busy with a slow statement)."""
        self.checkpoint()
        left = end - time.monotonic()
        if left <= 0:
            return None
        until_deadline = self._heartbeat.time_left()
        return left if until_deadline is None else min(left, max(until_deadline, 0.0))

    def start_side_effect(self, external_request_id: str | None = None) -> str:
        """Record that an irreversible request is about to leave. Call it right before sending.

        Raises LeaseLost, CancelRequested, DeadlinePassed or OwnershipUnknown when the request must
        NOT be sent, and CheckRequired when the call (mutating_verifiable) carries a request that
        may have run and no record_check('not_done') followed it: ask the service first.
        Returns the external request id to send along (generated when not given).
        """
        self.checkpoint()
        carried = self._carried_request
        if self.needs_check and carried is not None:
            raise CheckRequired(self.call.short_id, carried)
        request_id = external_request_id or f"req-{uuid.uuid4().hex[:12]}"
        margin = self.call.heartbeat_seconds + self.call.jitter_seconds

        def margin_held() -> bool:
            return self._heartbeat.seconds_confirmed() >= margin

        # the margin is checked twice: before waiting for the shared write connection, and again
        # once it is ours (another call's statement can hold it while heartbeats fail); a margin
        # that lapsed in the wait is confirmed anew, once
        for attempt in range(2):
            self._confirm_margin(margin, request_id)
            if self.worker.partitioned.is_set():
                self._ownership_unknown(request_id)
            try:
                row = self.worker.write("worker/start_side_effect", only_if=margin_held, job_id=self.call.id,
                                        worker_id=self.worker_id, fencing_token=self.fencing_token,
                                        external_request_id=request_id)
            except PreconditionLapsed:
                if attempt == 1:
                    self._ownership_unknown(request_id)
                continue
            except LeasectlError as exc:
                self.worker.report_database_error(self.call, "worker/start_side_effect", exc)
                self._ownership_unknown(request_id)
            break
        if row is None:
            # learn why: a cancel request, the deadline passed, the lease gone, or (still ours) an
            # earlier request the database wants checked first
            still_ours = self._heartbeat.beat(wait=margin / 2)
            if self.cancel_requested:
                raise CancelRequested(f"cancel requested for {self.call.short_id}")
            if self.deadline_passed:
                raise DeadlinePassed(f"the chain's deadline passed before {request_id} could start")
            if still_ours and self.call.side_effect == "mutating_verifiable" and self._carried_request is not None:
                raise CheckRequired(self.call.short_id, self._carried_request)
            raise LeaseLost(f"start_side_effect for {self.call.short_id} got zero rows")
        self.side_effect_started = True
        self.external_request_id = request_id
        self._carried_request = request_id
        self._checked_not_done = False  # a request of ours is out: another one needs a check again
        # the lease as the database saw it when it recorded the start: the margin the request left with
        self.lease_left_at_start = (row["lease_until"] - row["db_now"]).total_seconds()
        self.worker.log_event("tool_request_started", self.call, request=request_id,
                              lease_left_seconds=round(self.lease_left_at_start, 3))
        return request_id

    def _confirm_margin(self, margin: float, request_id: str) -> None:
        """Enough lease left to finish the step, or confirm it first; ownership unknown when it
        can't be confirmed in time."""
        if self._heartbeat.seconds_confirmed() >= margin:
            return
        renewed = self._heartbeat.beat(wait=margin / 2)
        if renewed is False:
            if self.deadline_passed:
                raise DeadlinePassed(f"the deadline of {self.call.short_id} passed before {request_id} could start")
            raise LeaseLost(f"lease on {self.call.short_id} lost")
        confirmed = self._heartbeat.seconds_confirmed()
        if renewed and confirmed < margin:
            left = self._heartbeat.time_left()
            if left is not None and left <= confirmed + 0.001:
                # renewed, and the lease ends with the deadline (it never runs past it): what is
                # short is the time, not the ownership. No retry can have more of it.
                raise DeadlinePassed(f"{max(left, 0.0):.2f} s left before the deadline of {self.call.short_id}: "
                                     f"too little to start {request_id} (it needs {margin:g} s)", retryable=False)
        if renewed is None or confirmed < margin:
            self._ownership_unknown(request_id)
        self.checkpoint()

    def record_check(self, found: str, details: dict[str, Any] | None = None) -> None:
        """Record what the service said about the request the call carries, before repeating it
        (docs/seeds.md §004.8; worker/record_check.sql, journaled by the database as
        side_effect_checked):

        * `done`: it happened. Return what the service reports as the call's result; send nothing.
        * `not_done`: it did not. start_side_effect() may send the request again, under this token.
        * `unknown`: nobody can say. The database moves the call to outcome_unknown (a human
          decides) and this raises OutcomeUnknown: the call has ended, let it propagate.

        `details` (JSON) is kept with the check: what the service answered. Raises LeaseLost (or
        DeadlinePassed) when the call is not this worker's any more: nothing was recorded.
        """
        if found not in CHECK_FOUND:
            raise ValueError(f"found must be one of {', '.join(CHECK_FOUND)}, not {found!r}")
        if self.worker.partitioned.is_set():
            raise OwnershipUnknown(f"cannot reach the database to record the check of {self.call.short_id}")
        if found == "unknown":
            # the database ends the call (no lease left): renewals stop first, so that none is
            # refused after it and journaled as a lost lease
            self._heartbeat.stop()
        try:
            row = self.worker.write("worker/record_check", job_id=self.call.id, worker_id=self.worker_id,
                                    fencing_token=self.fencing_token, found=found,
                                    details=None if details is None else Jsonb(details))
        except LeasectlError as exc:
            self.worker.report_database_error(self.call, "worker/record_check", exc)
            raise
        if row is None:
            if self.deadline_passed:
                raise DeadlinePassed(f"the deadline of {self.call.short_id} passed before its check was recorded")
            raise LeaseLost(f"record_check for {self.call.short_id} got zero rows: not the owner any more")
        self.check_found = found
        self.worker.log_event("side_effect_checked", self.call, found=found, request=row["external_request_id"])
        if row["state"] == "outcome_unknown":
            self.ended = "outcome_unknown"
            raise OutcomeUnknown(f"the check of {self.call.short_id} could not tell whether request "
                                 f"{row['external_request_id']} ran: the call waits for a human")
        if found == "not_done":
            self._checked_not_done = True

    def next_stage(self, tool: str, idempotency_key: str, payload: Any, *, result: Any = None) -> NextStage:
        """What to return to finish this call with `result` and enqueue the next stage of its
        chain (`tool`, `idempotency_key`, `payload`) in the same transaction:

            return ctx.next_stage("summarise", f"{ctx.idempotency_key}:summarise", {"pages": ids},
                                  result={"pages": len(ids)})

        The next stage is this call's child: same chain, stage + 1, a deadline no later than this
        one's, the same agent, session, model, provider, priority and trace (the database sets
        them). If this result is rejected (the lease was lost), nothing is enqueued; if the chain
        has a cancel request, the result stands and no next stage starts. Nothing happens until
        the handler returns it."""
        return NextStage(tool=tool, idempotency_key=idempotency_key, payload=payload, result=result)

    def record_event(self, kind: str, details: dict[str, Any] | None = None) -> None:
        self.worker.record_event(self.call, kind, details or {})

    def _ownership_unknown(self, request_id: str) -> NoReturn:
        details: dict[str, Any] = {
            "last_confirmed_lease": self._heartbeat.last_confirmed_lease.isoformat(),
            "external_request_id": request_id,
            "seconds_confirmed": round(self._heartbeat.seconds_confirmed(), 3),
        }
        self.worker.log_event("ownership_unknown", self.call, **details)
        self.worker.record_event(self.call, "ownership_unknown", details)
        raise OwnershipUnknown(
            f"cannot confirm ownership of {self.call.short_id} (token {self.fencing_token}) "
            f"before a conservative deadline; not sending {request_id}"
        )


Handler = Callable[[CallContext], Any]
