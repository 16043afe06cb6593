"""Leases, renewed: one heartbeat thread and one heartbeat connection per worker process, one
statement per beat for every lease the process holds (worker/heartbeat_many.sql).

Scheduling. Each lease wants a renewal every H seconds (its tool's heartbeat_seconds) after its
last one. When the earliest lease is due, the thread renews it together with every lease due
within the next half of its own interval: early renewal only adds margin, and the leases of a
process fall into one cohort after a beat or two, so a process with a thousand calls in flight
sends about one statement per H instead of a thousand. The thread sleeps until the next lease
is due; taking up or dropping a call wakes it only when the new lease is due before that moment
(a no-op call that ends within H never wakes it at all).

Verdicts. A lease missing from the answer is lost: that call alone learns it (lost), logs and
journals heartbeat_lost, and is dropped from the schedule; the others carry on. A cancel request
in the answer is the call's alone too. A statement that fails (the database is gone, a lock wait,
a statement timeout) confirms nothing: every lease in it counts a failure and is retried soon --
within half a second after a lock wait or a timeout, when the heartbeat's lane tries again after
a lost connection (console.db.lane: jittered, and never later than H). After a lock wait, one
probe that waits for no lock (worker/heartbeat_locked.sql, SKIP LOCKED) finds the rows another
transaction holds; every other lease is renewed at once in one statement, and the held ones count
a failure (journaled with the cause) and are probed again, never waited for, at their next beats:
only the call whose row is locked can run out of lease, not the whole process.
A lease is never renewed after its call stopped: a renewal in flight when the call ends gives no
verdict to it.

Deadlines. A call's lease never runs past its deadline_at (claim and heartbeat cap it, migration
0014), so the deadline is also when the lease ends for good. Each lease keeps the deadline on the
local monotonic clock, from the database's answers (deadline_at - db_now, counted from the moment
the statement was sent: early, never late); `time_left()` reads it. When it comes, the thread
raises the lease's `deadline_passed` verdict (a sleeping handler wakes, as for a cancel or a lost
lease) and renews it no more; a renewal refused at that moment is the deadline, not a lost lease,
and is not journaled as heartbeat_lost.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from console.db.connect import Row
from console.db.lane import LaneBusy
from console.shared.errors import LeasectlError, RowLocked
from console.worker import statements

if TYPE_CHECKING:
    from console.worker.calls import ClaimedCall
    from console.worker.host import LeaseHost

log = logging.getLogger("leasectl.worker")

W = TypeVar("W", bound=threading.Event)


class _Flag:
    """One of a lease's verdicts (lost, cancel requested, deadline passed, stopped), as an event a
    handler can ask `is_set()` and wait for. Cheaper than threading.Event: a call makes four and
    waits on none unless its handler sleeps."""

    __slots__ = ("_lease", "_on")

    def __init__(self, lease: Heartbeat) -> None:
        self._on = False
        self._lease = lease

    def is_set(self) -> bool:
        return self._on

    def set(self) -> None:
        self._lease.raise_verdict(self)

    def mark(self) -> None:
        """Turn it on and wake nobody: for the lease's own code, which wakes its waiters itself, once
        for all the verdicts of an answer, and for `stopped`, which nobody waits for."""
        self._on = True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until this or another verdict that stops the call is set (or the timeout)."""
        self._lease.wait(timeout)
        return self._on


class Heartbeat:
    """The lease of one claimed call, renewed by its worker's heartbeat thread (never the thread
    running the tool).

    `confirmed_until` is a local monotonic deadline: the moment the request that confirmed the
    lease was *sent*, plus the lease time the database reported left. Measuring from the send
    time makes it conservative whatever the round trip did.

    `renewals` is the worker's schedule (Renewals) the lease joins at start() and leaves at stop().
    """

    def __init__(self, renewals: Renewals, call: ClaimedCall, claimed_at_monotonic: float,
                 lease_left: float) -> None:
        self.renewals = renewals
        self.call = call
        self.lost = _Flag(self)
        self.cancel_requested = _Flag(self)
        self.deadline_passed = _Flag(self)
        self.stopped = _Flag(self)
        self.confirmed_until = claimed_at_monotonic + lease_left
        # the call's deadline on the local monotonic clock (None: it has none). From the claim:
        # lease_left is lease_until - db_now, so lease_left + (deadline_at - lease_until) is
        # deadline_at - db_now, counted from when the claim was sent (before the database read its
        # clock): early, never late. Every renewal's answer sets it again (take_answer).
        self.deadline_mono: float | None = None
        if call.deadline_at is not None:
            self.deadline_mono = (claimed_at_monotonic + lease_left
                                  + (call.deadline_at - call.lease_until).total_seconds())
        self.last_confirmed_lease: datetime = call.lease_until
        self.interval = call.heartbeat_seconds
        self.next_beat = time.monotonic() + self.interval
        self.failures = 0
        # its last renewal alone met a lock wait or a timeout: renewed on its own until it succeeds
        self.suspect = False
        self._lock = threading.Lock()
        self._wake: threading.Event | None = None

    # ---------------------------------------------------------------- the schedule
    def start(self) -> None:
        self.renewals.add(self)

    def stop(self) -> None:
        """No renewal after this returns: one already in flight is waited for (its verdict, a
        lost lease say, is known and journaled before the call moves on)."""
        self.renewals.remove(self)

    def schedule_next(self, sent: float | None = None) -> None:
        """The next beat one period H after the renewal was *sent* (`sent`, monotonic), not after
        its answer came back: a statement renewing 25,000 leases takes a noticeable part of a
        second, and counted from the answer every period would grow by it (measured: renewals at
        0.94 of the rate 100,000 leases need). After a failure, retry sooner: the lease is running
        out while we cannot reach it. A lock wait or a timeout (the connection is sound) is retried
        within half a second; a lost connection when the heartbeat's lane tries again (the one
        jittered backoff), but never later than one period H: the lease was sized for a beat every
        H (docs/seeds.md §000.8)."""
        now = time.monotonic()
        if self.failures == 0:
            self.next_beat = (now if sent is None else min(sent, now)) + self.interval
            return
        reconnect = self.renewals.host.heartbeat_lane.retry_in()
        self.next_beat = now + min(self.interval, 0.5 if reconnect is None else reconnect)

    def beat(self, wait: float | None = None, *, scheduled: bool = False) -> bool | None:
        """One renewal now. True: renewed; False: lost (missing from the answer); None: no answer
        from the database. `wait` bounds how long to queue behind a statement already in flight on
        the heartbeat connection (one that hangs on the network must not hang the caller too)."""
        verdicts = self.renewals.renew([self], scheduled=scheduled, wait=wait)
        return verdicts[0] if verdicts else None

    def seconds_confirmed(self) -> float:
        return self.confirmed_until - time.monotonic()

    def time_left(self) -> float | None:
        """Seconds before the call's deadline by the database's clock (negative once it passed);
        None when the call has no deadline."""
        deadline = self.deadline_mono
        return None if deadline is None else deadline - time.monotonic()

    def past_deadline(self) -> bool:
        """The deadline has passed (the verdict was raised, or the clock says so now: then it is
        raised here, waking whoever waits)."""
        if self.deadline_passed.is_set():
            return True
        left = self.time_left()
        if left is not None and left <= 0:
            self.deadline_passed.set()
            return True
        return False

    def wait_for_handler(self) -> float:
        """How long to wait for the handler of a call with a deadline before looking again: until
        the deadline and one heartbeat interval more (time for a handler told at the deadline to
        stop), an interval at most (each renewal's answer sets the deadline anew). 0 or less: it
        is late, stop waiting for it."""
        grace = self.call.heartbeat_seconds
        left = self.time_left()
        return grace if left is None else min(left + grace, grace)

    def wake_at(self) -> float:
        """When the heartbeat thread must look at this lease next: its renewal, or its deadline."""
        deadline = self.deadline_mono
        return self.next_beat if deadline is None else min(self.next_beat, deadline)

    # ---------------------------------------------------------------- verdicts
    def raise_verdict(self, flag: _Flag) -> None:
        """Turn on one of this lease's flags (flag.set()), waking whoever waits unless it is `stopped`."""
        with self._lock:
            flag.mark()
            wake = self._wake
        if wake is not None and flag is not self.stopped:
            wake.set()

    def wake_event(self, kind: type[W], make: Callable[[], W]) -> W:
        """The event set when the lease is lost, a cancel is requested or the deadline passes (never
        cleared), of `kind`: one of another kind (or none yet) is replaced by `make()`, set at once
        when a verdict is already in. An event loop passes a kind that also wakes its task."""
        with self._lock:
            wake = self._wake
            if not isinstance(wake, kind):
                wake = make()
                self._wake = wake
                if self.lost.is_set() or self.cancel_requested.is_set() or self.deadline_passed.is_set():
                    wake.set()
        return wake

    def wait(self, timeout: float | None) -> None:
        """Sleep until the lease is lost, a cancel is requested, the deadline passes, or the timeout."""
        self.wake_event(threading.Event, threading.Event).wait(timeout)

    def take_answer(self, row: Row | None, sent: float, scheduled: bool) -> tuple[bool | None, float | None, bool]:
        """Take one answer of a renewal sent at `sent` (monotonic): the lease's row, or None when
        the lease is gone. Returns the verdict (None: not this lease's to take), for a renewal
        the lease time that was left when the database renewed it, and whether the lease was
        found lost just now (not known lost before)."""
        with self._lock:
            if scheduled and self.stopped.is_set():
                return None, None, False
            if self.lost.is_set():
                return False, None, False
            if row is None:
                self.lost.mark()
                # refused once the deadline has passed: the lease ended with it (it never runs past
                # it), which is the deadline's verdict and not a renewal that failed. The estimate is
                # early, never late: a database past the deadline means our clock is past it too.
                if self.deadline_mono is not None and self.deadline_mono <= time.monotonic():
                    self.deadline_passed.mark()
                wake = self._wake
                cancel = False
            else:
                self.failures = 0
                self.suspect = False
                margin = (self.last_confirmed_lease - row["db_now"]).total_seconds()
                self.confirmed_until = sent + (row["lease_until"] - row["db_now"]).total_seconds()
                self.last_confirmed_lease = row["lease_until"]
                deadline_at = row["deadline_at"]
                self.deadline_mono = None if deadline_at is None else \
                    sent + (deadline_at - row["db_now"]).total_seconds()
                cancel = bool(row["cancel_requested"]) and not self.cancel_requested.is_set()
                if cancel:
                    self.cancel_requested.mark()
                wake = self._wake if cancel else None
        if wake is not None:
            wake.set()
        if row is None:
            return False, None, True
        if cancel:
            self.renewals.host.log_event("cancel_heard", self.call)
        return True, margin, False


@dataclass
class RenewalStats:
    """What the heartbeat thread did so far (for benchmarks and operators)."""

    statements: int = 0          # heartbeat_many.sql statements answered
    renewed: int = 0             # leases renewed
    lost: int = 0                # leases found lost
    failed_statements: int = 0   # statements that got no answer
    largest_batch: int = 0
    # the least lease time left (database clock) when a lease was renewed on schedule: the margin
    # the protocol had against losing it; None until the first scheduled renewal
    smallest_margin: float | None = None


class Renewals:
    """The heartbeat thread of one worker process and its schedule of leases."""

    def __init__(self, host: LeaseHost) -> None:
        self.host = host
        self.stats = RenewalStats()
        self._cond = threading.Condition()
        self._leases: dict[Any, Heartbeat] = {}
        # in a scheduled renewal being sent or answered: remove() waits for its verdict (under _cond)
        self._in_flight: set[Heartbeat] = set()
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None
        self._closing = False
        self._stats_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._leases)

    def add(self, lease: Heartbeat) -> None:
        superseded = None
        with self._cond:
            superseded = self._leases.get(lease.call.id)
            self._leases[lease.call.id] = lease
            if self._thread is None or not self._thread.is_alive():
                self._closing = False
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name=f"heartbeat-{self.host.worker_id}")
                self._thread.start()
            elif lease.wake_at() < self._wake_at:
                self._cond.notify()
        # granted the call again under a newer token, this worker knows the older lease is over
        if superseded is not None and superseded is not lease \
                and superseded.take_answer(None, time.monotonic(), scheduled=False)[2]:
            self._lost(superseded, "superseded")

    def remove(self, lease: Heartbeat) -> None:
        """Take a stopping call off the schedule, once a renewal in flight for it is answered."""
        with self._cond:
            while lease in self._in_flight:
                self._cond.wait()
            lease.stopped.mark()
            if self._leases.get(lease.call.id) is lease:
                del self._leases[lease.call.id]

    def remove_if_idle(self, lease: Heartbeat) -> bool:
        """remove() when no renewal is in flight for the lease (then it does not wait); False
        otherwise, and nothing changed. For a caller that must not block (an event loop)."""
        with self._cond:
            if lease in self._in_flight:
                return False
            lease.stopped.mark()
            if self._leases.get(lease.call.id) is lease:
                del self._leases[lease.call.id]
            return True

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._leases.clear()
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    # ---------------------------------------------------------------- the thread
    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._closing:
                    return
                now = time.monotonic()
                if not self._leases:
                    self._wake_at = now + 1.0
                    self._cond.wait(1.0)
                    continue
                soonest = min(lease.wake_at() for lease in self._leases.values())
                if soonest > now:
                    self._wake_at = soonest
                    self._cond.wait(soonest - now)
                    continue
                # a lease at its deadline is over: no renewal can extend it (the database caps it
                # there) and its call is told, as of a lost lease
                ended = [lease for lease in self._leases.values()
                         if lease.deadline_mono is not None and lease.deadline_mono <= now]
                for lease in ended:
                    del self._leases[lease.call.id]
                due = [lease for lease in self._leases.values() if lease.next_beat <= now + lease.interval / 2]
                self._wake_at = math.inf  # busy: a new lease need not wake us, we look again after
            for lease in ended:
                self.host.log_event("deadline_reached", lease.call)
                lease.deadline_passed.set()
            if not due:
                continue
            if self.host.partitioned.is_set():
                # a simulated network partition (the demo): the beat never reaches the database
                for lease in due:
                    lease.schedule_next()
                continue
            # one statement for all; a lease whose row was found locked is probed first (_send)
            self.renew(due, scheduled=True)

    # ---------------------------------------------------------------- one statement
    def renew(self, batch: list[Heartbeat], *, scheduled: bool, wait: float | None = None) -> list[bool | None]:
        """Renew these leases in one statement; a verdict for each (True renewed, False lost,
        None no answer, or not taken because the call stopped)."""
        if not scheduled:
            return self._send(batch, scheduled=False, wait=wait)
        with self._cond:
            batch = [lease for lease in batch if not lease.stopped.is_set()]
            for lease in batch:
                self._in_flight.add(lease)
        sent = time.monotonic()
        try:
            return self._send(batch, scheduled=True, wait=wait)
        finally:
            with self._cond:
                for lease in batch:
                    self._in_flight.discard(lease)
                    lease.schedule_next(sent)
                    if lease.lost.is_set() and self._leases.get(lease.call.id) is lease:
                        del self._leases[lease.call.id]
                self._cond.notify_all()

    def _send(self, batch: list[Heartbeat], *, scheduled: bool, wait: float | None,
              probed: bool = False) -> list[bool | None]:
        host = self.host
        if not batch:
            return []
        if not probed and any(lease.suspect for lease in batch):
            # a row found locked before: leave out whatever is still locked, without waiting for it
            return self._around_locks(batch, scheduled=scheduled, wait=wait, error=None)
        answer: list[Row] | None = None
        error: LeasectlError | None = None
        sent = time.monotonic()
        try:
            with host.heartbeat_lane.use(wait=wait) as conn:
                sent = time.monotonic()
                answer = statements.rows(conn, "worker/heartbeat_many",
                                         job_ids=[lease.call.id for lease in batch], worker_id=host.worker_id,
                                         fencing_tokens=[lease.call.fencing_token for lease in batch])
        except LaneBusy:
            return [None] * len(batch)
        except LeasectlError as exc:  # a lost connection is dropped by the lane, a lock wait leaves it sound
            error = exc
        if error is not None:
            if isinstance(error, RowLocked) and not probed:
                # one locked row must not hold back every lease of the process
                return self._around_locks(batch, scheduled=scheduled, wait=wait, error=error)
            self._failed(batch, error)
            return [None] * len(batch)
        return self._verdicts(batch, answer or [], sent, scheduled)

    def _around_locks(self, batch: list[Heartbeat], *, scheduled: bool, wait: float | None,
                      error: RowLocked | None) -> list[bool | None]:
        """Renew at once, in one statement, every lease whose row is free this instant (found with
        SKIP LOCKED: no lock wait); a lease whose row is held is not renewed this time (a failure,
        retried within half a second, journaled with its cause), and waits for nothing. Only the
        call whose row is locked can run out of lease: the others never wait behind it."""
        host = self.host
        try:
            locked_ids = {row["id"] for row in host.heartbeat_lane.run(lambda conn: statements.rows(
                conn, "worker/heartbeat_locked", job_ids=[lease.call.id for lease in batch],
                worker_id=host.worker_id))}
        except LeasectlError as exc:
            self._failed(batch, exc)
            return [None] * len(batch)
        free = [lease for lease in batch if lease.call.id not in locked_ids]
        held = [lease for lease in batch if lease.call.id in locked_ids]
        verdicts = dict(zip([lease.call.id for lease in free],
                            self._send(free, scheduled=scheduled, wait=wait, probed=True), strict=True))
        if held:
            for lease in held:
                lease.suspect = True
            self._failed(held, error or RowLocked("the row is locked by another transaction (lock_timeout)"))
        return [verdicts.get(lease.call.id) for lease in batch]

    def _failed(self, batch: list[Heartbeat], error: LeasectlError) -> None:
        with self._stats_lock:
            self.stats.failed_statements += 1
        now = time.monotonic()
        for lease in batch:
            lease.failures += 1
            self.host.log_event("heartbeat_error", lease.call, error=str(error),
                                confirmed_left=round(lease.confirmed_until - now, 3))
            self.host.report_database_error(lease.call, "worker/heartbeat_many", error)

    def _verdicts(self, batch: list[Heartbeat], answer: list[Row], sent: float,
                  scheduled: bool) -> list[bool | None]:
        held = {row["id"]: row for row in answer}
        verdicts: list[bool | None] = []
        lost: list[Heartbeat] = []
        margins: list[float] = []
        for lease in batch:
            row = held.get(lease.call.id)
            verdict, margin, newly_lost = lease.take_answer(row, sent, scheduled)
            verdicts.append(verdict)
            if newly_lost:
                lost.append(lease)
            elif verdict and margin is not None and scheduled:
                margins.append(margin)
            if verdict and row is not None:
                self.host.observe("heartbeat", lease.call, row["db_now"])
        with self._stats_lock:
            stats = self.stats
            stats.statements += 1
            stats.renewed += len(held)
            stats.lost += len(lost)
            stats.largest_batch = max(stats.largest_batch, len(batch))
            if margins:
                least = min(margins)
                stats.smallest_margin = least if stats.smallest_margin is None else min(stats.smallest_margin, least)
        for lease in lost:
            self._lost(lease, "zero_rows")
        return verdicts

    def _lost(self, lease: Heartbeat, reason: str) -> None:
        if lease.deadline_passed.is_set():
            # the lease ended with the deadline, as the database caps it: not a renewal that failed
            # (renewal_failures counts heartbeat_lost); the call's end is journaled as deadline_passed
            self.host.log_event("lease_ended_at_deadline", lease.call, reason=reason)
            return
        self.host.log_event("heartbeat_lost", lease.call, reason=reason)
        self.host.record_event(lease.call, "heartbeat_lost", {"reason": reason})
