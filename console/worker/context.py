"""What a handler sees of its call: identity, fencing token, and the lease's verdicts."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, NoReturn

from console.shared.errors import LeasectlError
from console.worker.calls import (
    CancelRequested,
    ClaimedCall,
    DeadlinePassed,
    LeaseLost,
    OwnershipUnknown,
    PreconditionLapsed,
)

if TYPE_CHECKING:
    from console.worker.heartbeat import Heartbeat
    from console.worker.runner import Worker


class CallContext:
    """What a handler sees of its call: identity, fencing token, and the lease's verdicts."""

    def __init__(self, worker: Worker, call: ClaimedCall, heartbeat: Heartbeat) -> None:
        self.worker = worker
        self.call = call
        self._heartbeat = heartbeat
        self.side_effect_started = False
        self.external_request_id: str | None = None
        self.lease_left_at_start: float | None = None

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
            self._heartbeat.wait(left)

    def start_side_effect(self, external_request_id: str | None = None) -> str:
        """Record that an irreversible request is about to leave. Call it right before sending.

        Raises LeaseLost, CancelRequested or OwnershipUnknown when the request must NOT be sent.
        Returns the external request id to send along (generated when not given).
        """
        self.checkpoint()
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
                row = self.worker._write("worker/start_side_effect", only_if=margin_held, job_id=self.call.id,
                                         worker_id=self.worker_id, fencing_token=self.fencing_token,
                                         external_request_id=request_id)
            except PreconditionLapsed:
                if attempt == 1:
                    self._ownership_unknown(request_id)
                continue
            except LeasectlError as exc:
                self.worker._database_error(self.call, "worker/start_side_effect", exc)
                self._ownership_unknown(request_id)
            break
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
        # the lease as the database saw it when it recorded the start: the margin the request left with
        self.lease_left_at_start = (row["lease_until"] - row["db_now"]).total_seconds()
        self.worker._log("tool_request_started", self.call, request=request_id,
                         lease_left_seconds=round(self.lease_left_at_start, 3))
        return request_id

    def _confirm_margin(self, margin: float, request_id: str) -> None:
        """Enough lease left to finish the step, or confirm it first; ownership unknown when it
        can't be confirmed in time."""
        if self._heartbeat.seconds_confirmed() >= margin:
            return
        renewed = self._heartbeat.beat(wait=margin / 2)
        if renewed is False:
            raise LeaseLost(f"lease on {self.call.short_id} lost")
        if renewed is None or self._heartbeat.seconds_confirmed() < margin:
            self._ownership_unknown(request_id)
        self.checkpoint()

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
