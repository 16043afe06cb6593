"""The asyncio worker: many calls of async handlers on one event loop, under the same lease protocol
as console.worker.runner.Worker::

    async def handler(ctx: AsyncCallContext) -> dict:
        await ctx.start_side_effect(request_id)     # recorded before calling out
        reply = await client.post(url, json=..., headers={"Idempotency-Key": ctx.idempotency_key})
        return reply.json()

    AsyncWorker(dsn, "worker-1", {"fetch_page": handler}, concurrency=1000).run(stop_event)

What differs from Worker, and why:

* A call is a task on the loop, not a thread: 100,000 calls that wait on the network cost their
  coroutines' memory, not 100,000 stacks.
* Heartbeats never run on the loop (docs/seeds.md §000: "do not run the heartbeat in the thread
  running the tool"). They are Worker's: one thread, one connection, one statement for every
  lease due (worker/heartbeat_many.sql). A handler that blocks the loop (a synchronous client, a
  CPU-bound parse) delays the other handlers, never their renewals.
* Claims come in batches (worker/claim_many.sql): only as many as the worker can start at once,
  so that no claimed call waits in the process while its lease runs.
* Completions are committed in groups (worker/complete_many.sql): a group closes at `group_size`
  results or after `group_wait` seconds, and each handler's result counts as stored -- its
  outcome says succeeded, the observer hears "complete" -- only after the group's commit. A crash
  at any instant loses no completion the worker reported: what it did not report is not written,
  or written and found by the next owner's guard (tests/db/test_async_worker.py kills it).
* Database work runs on a small pool of threads, never on the loop, through three connections:
  a Worker's two (claims and writes; heartbeats and events) and one for the completions, so that
  a group commits while the next batch is claimed. Three per process, whatever the number of
  calls. The room to claim is what the running handlers leave: a call whose result waits for its
  group's commit starts nothing, and its lease is renewed until its group is sent.

Every rule of the call itself is Worker's own code, run on that pool: a failure, a cancel
confirmed, a side effect's start, a check recorded, a chain's next stage, a deadline (a handler
still running a heartbeat interval after it is cancelled, and whatever it returns is journaled as
result_rejected, never written).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from console.db.lane import Lane
from console.shared.errors import LeasectlError, PermissionDenied
from console.worker import statements
from console.worker.calls import (
    CallOutcome,
    ClaimedCall,
    HandlerAbandoned,
    NextStage,
    serialise_result,
)
from console.worker.context import CallContext
from console.worker.heartbeat import Heartbeat
from console.worker.runner import Worker
from console.worker.tracing import CallSpan

log = logging.getLogger("leasectl.worker")

# how long the end of serve() waits for handlers cancelled at their deadline that have not ended
ABANDONED_WAIT = 5.0

P = ParamSpec("P")
T = TypeVar("T")

AsyncHandler = Callable[["AsyncCallContext"], Awaitable[Any]]


class _LoopWake(threading.Event):
    """A lease's wake-up (console.worker.heartbeat.Heartbeat.wake_event) that also wakes the call's
    task on the loop. Every reason to wake is a verdict that stays (lost, cancel, deadline), so
    neither side ever clears it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.on_loop = asyncio.Event()

    def set(self) -> None:
        super().set()
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits on it any more
            self.loop.call_soon_threadsafe(self.on_loop.set)


class AsyncCallContext:
    """What an async handler sees of its call: CallContext's identity and verdicts, its steps awaited
    (they run Worker's code off the loop)."""

    def __init__(self, worker: AsyncWorker, ctx: CallContext, heartbeat: Heartbeat) -> None:
        self.worker = worker
        self.sync = ctx
        self.call = ctx.call
        self._heartbeat = heartbeat

    # identity and verdicts: no I/O
    @property
    def fencing_token(self) -> int:
        return self.sync.fencing_token

    @property
    def idempotency_key(self) -> str:
        return self.sync.idempotency_key

    @property
    def payload(self) -> Any:
        return self.sync.payload

    @property
    def worker_id(self) -> str:
        return self.sync.worker_id

    @property
    def trace_id(self) -> str | None:
        """CallContext.trace_id: the call's W3C trace id, or None."""
        return self.sync.trace_id

    @property
    def traceparent(self) -> str | None:
        """CallContext.traceparent: the call's trace and this attempt's span, to send on."""
        return self.sync.traceparent

    @property
    def lease_lost(self) -> bool:
        return self.sync.lease_lost

    @property
    def cancel_requested(self) -> bool:
        return self.sync.cancel_requested

    @property
    def deadline_passed(self) -> bool:
        return self.sync.deadline_passed

    @property
    def needs_check(self) -> bool:
        return self.sync.needs_check

    @property
    def side_effect_started(self) -> bool:
        return self.sync.side_effect_started

    @property
    def external_request_id(self) -> str | None:
        return self.sync.external_request_id

    def time_left(self) -> float | None:
        """CallContext.time_left: seconds before the deadline by the database's clock, or None."""
        return self.sync.time_left()

    def checkpoint(self) -> None:
        """Raise if the call must stop here: deadline passed, lease lost or cancel requested."""
        self.sync.checkpoint()

    def next_stage(self, tool: str, idempotency_key: str, payload: Any, *, result: Any = None) -> NextStage:
        return self.sync.next_stage(tool, idempotency_key, payload, result=result)

    async def sleep(self, seconds: float) -> None:
        """Wait, but wake at once (and raise) if the lease is lost, a cancel arrives or the deadline
        passes. The other calls run meanwhile."""
        wake = self._wake()
        end = time.monotonic() + seconds
        while (left := self.sync.sleep_slice(end)) is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await wake.on_loop.wait()

    async def start_side_effect(self, external_request_id: str | None = None) -> str:
        """CallContext.start_side_effect, awaited: record that an irreversible request is about to
        leave (raises, and records nothing, when it must not be sent)."""
        return await self.worker.off_loop(self.sync.start_side_effect, external_request_id)

    async def record_check(self, found: str, details: dict[str, Any] | None = None) -> None:
        """CallContext.record_check, awaited: what the service said of the request the call carries."""
        await self.worker.off_loop(self.sync.record_check, found, details)

    async def record_event(self, kind: str, details: dict[str, Any] | None = None) -> None:
        await self.worker.off_loop(self.sync.record_event, kind, details)

    def _wake(self) -> _LoopWake:
        return self._heartbeat.wake_event(_LoopWake, lambda: _LoopWake(self.worker.loop))


@dataclass
class GroupStats:
    """What the completion groups did: how many statements, how many results they carried."""

    groups: int = 0
    results: int = 0
    largest: int = 0


def _stop_all(leases: list[Heartbeat]) -> None:
    for lease in leases:
        lease.stop()  # waits for a renewal in flight: the completion must not meet it on the row


class _Completions:
    """Group commit: results wait here until their group's statement has committed."""

    def __init__(self, worker: AsyncWorker) -> None:
        self.worker = worker
        self.stats = GroupStats()
        self._waiting: list[tuple[Heartbeat, bytes, asyncio.Future[dict[str, Any] | None]]] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="completions")

    async def store(self, lease: Heartbeat, body: bytes) -> dict[str, Any] | None:
        """The row complete_many.sql returned for the lease's call once its group has committed;
        None when its result was not stored (the lease was lost) or the group's fate is unknown.
        The lease is renewed while it waits, and no more once its group is sent."""
        future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((lease, body, future))
        self._wake.set()
        return await future

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        await self._task

    async def _loop(self) -> None:
        size, wait = self.worker.group_size, self.worker.group_wait
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._waiting:
                if self._closing:
                    return
                continue
            if len(self._waiting) < size and wait > 0 and not self._closing and not self.worker.handlers_done():
                await asyncio.sleep(wait)  # let the group fill: results that arrive meanwhile join it
            group, self._waiting = self._waiting[:size], self._waiting[size:]
            if self._waiting:
                self._wake.set()
            try:
                rows = await self._send(group)
            except Exception as exc:  # noqa: BLE001 - a bug here must not leave every waiting call hanging
                for _, _, future in group:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.stats.groups += 1
            self.stats.results += len(group)
            self.stats.largest = max(self.stats.largest, len(group))
            for lease, _, future in group:
                if not future.done():
                    future.set_result(rows.get(lease.call.id))

    async def _send(self, group: list[tuple[Heartbeat, bytes, asyncio.Future[dict[str, Any] | None]]]
                    ) -> dict[Any, dict[str, Any] | None]:
        await self.worker.off_loop(_stop_all, [lease for lease, _, _ in group])
        try:
            return await self.worker.off_loop(self.worker.complete_group, [(x.call, b) for x, b, _ in group])
        except LeasectlError as exc:
            # rolled back or fate unknown: each result is sent alone (complete.sql), whose guard
            # makes a repeat of a committed one harmless; a refusal is told as such
            log.warning("a group of %d completions failed (%s); each is sent alone", len(group), exc)
            rows: dict[Any, dict[str, Any] | None] = {}
            for lease, body, _ in group:
                try:
                    rows[lease.call.id] = await self.worker.off_loop(self.worker.complete_alone, lease.call, body)
                except LeasectlError:
                    rows[lease.call.id] = None
            return rows


@dataclass
class AsyncWorker(Worker):
    """A Worker whose handlers are coroutines: up to `concurrency` calls at once on one event loop,
    claimed in batches of up to `claim_batch`, completed in groups of up to `group_size` (a group
    waits at most `group_wait` seconds for more). `pool` threads do the database work."""

    handlers: Mapping[str, AsyncHandler] | AsyncHandler  # type: ignore[assignment]
    concurrency: int = 100
    claim_batch: int = 100
    group_size: int = 64
    group_wait: float = 0.002
    pool: int = 4
    loop: asyncio.AbstractEventLoop = field(init=False, repr=False)
    _executor: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _completions: _Completions | None = field(default=None, init=False, repr=False)
    # calls in flight (claimed, not yet at an outcome), and of those, handlers running: the room to
    # claim is what the handlers leave (a call whose result waits for its group starts nothing)
    _running: int = field(default=0, init=False, repr=False)
    _handlers: int = field(default=0, init=False, repr=False)
    # the third connection: completions, so that a group commits while the next claim is sent
    _done_lane: Lane = field(init=False, repr=False)
    _freed: asyncio.Event | None = field(default=None, init=False, repr=False)
    # handlers cancelled past their deadline and still running: waited for a moment at the end, so
    # that a late answer is journaled (result_rejected) before the process goes
    _abandoned: set[asyncio.Future[Any]] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._done_lane = Lane(lambda: self.dsn, limits=self.limits,
                               application_name=f"leasectl-worker:{self.worker_id}:completions")

    def connect(self) -> None:
        super().connect()
        self._done_lane.connect()

    def close(self) -> None:
        super().close()
        self._done_lane.close()

    def handlers_done(self) -> bool:
        """No handler is running: every result that will come soon has come (a group need not wait)."""
        return self._handlers == 0

    def _handler_ended(self) -> None:
        self._handlers -= 1
        assert self._freed is not None
        self._freed.set()

    @property
    def group_stats(self) -> GroupStats:
        return self._completions.stats if self._completions is not None else GroupStats()

    def run(self, stop: threading.Event, *, max_calls: int | None = None, drain: bool = False) -> int:
        """Worker.run's contract on an event loop of its own (asyncio.run): work until `stop` is set
        (or, with `drain`, until nothing is left to claim and nothing runs); calls in flight then
        run to their end. Returns how many calls it took to an outcome."""
        return asyncio.run(self.serve(stop, max_calls=max_calls, drain=drain))

    async def off_loop(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run blocking work (the database) on the pool, never on the loop."""
        assert self._executor is not None, "only while serving"
        return await self.loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def serve(self, stop: threading.Event, *, max_calls: int | None = None, drain: bool = False) -> int:
        self.loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(self.pool, thread_name_prefix=f"db-{self.worker_id}")
        self._completions = _Completions(self)
        self._freed = asyncio.Event()
        self._done = 0
        self._fatal = None
        tasks: set[asyncio.Task[None]] = set()
        taken = 0
        try:
            while not stop.is_set() and self._fatal is None:
                room = self.concurrency - self._handlers
                if max_calls is not None:
                    room = min(room, max_calls - taken)
                    if room <= 0 and self._running == 0:
                        break  # max_calls reached and every call finished
                if room <= 0:
                    await self._wait_for_room()
                    continue
                try:
                    claimed = await self.off_loop(self.claim_batch_of, min(room, self.claim_batch))
                except PermissionDenied as exc:
                    self._fatal = exc
                    break
                except LeasectlError as exc:
                    await self.off_loop(self._trouble, exc, stop)
                    continue
                if not claimed:
                    if drain and self._running == 0:
                        break
                    await self._wait_for_room(self.poll_interval)
                    continue
                taken += len(claimed)
                for lease in claimed:
                    self._running += 1
                    self._handlers += 1
                    task = self.loop.create_task(self._serve_call(lease), name=f"call-{lease.call.short_id}")
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)
            if self._abandoned:
                await asyncio.wait(self._abandoned, timeout=ABANDONED_WAIT)
            await self._completions.close()
            if self._pending_events:
                await self.off_loop(self.flush_events)
        finally:
            self._executor.shutdown(wait=True)
            self.close()
        if self._fatal is not None:
            raise self._fatal
        return self._done

    async def _wait_for_room(self, timeout: float | None = None) -> None:
        assert self._freed is not None
        self._freed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout if timeout is not None else self.poll_interval):
                await self._freed.wait()

    # ------------------------------------------------------------------ on the pool
    def claim_batch_of(self, n: int) -> list[Heartbeat]:
        """Claim up to n calls in one statement (worker/claim_many.sql), each lease on the heartbeat
        thread's schedule at once: renewed from here on, even while the loop is blocked before the
        call's task has started."""
        if self.partitioned.is_set():
            return []
        if self._pending_events:
            self.flush_events()
        self.check_identity()
        sent = time.monotonic()
        rows = self._main.run(lambda conn: statements.rows(conn, "worker/claim_many", worker_id=self.worker_id,
                                                           tools=self.tools, max_calls=n))
        leases = []
        for row in rows:
            claimed = self._claimed(row, sent)
            if claimed is not None:
                lease = Heartbeat(self._renewals, *claimed)
                lease.start()
                leases.append(lease)
        return leases

    def complete_group(self, group: list[tuple[ClaimedCall, bytes]]) -> dict[Any, dict[str, Any] | None]:
        """Store a group's results in one statement and one commit (worker/complete_many.sql), on
        the completions' own connection: the row of each call it accepted, by id."""
        rows = self._done_lane.run(lambda conn: statements.rows(
            conn, "worker/complete_many", job_ids=[c.id for c, _ in group], worker_id=self.worker_id,
            fencing_tokens=[c.fencing_token for c, _ in group],
            results=[statements.result_param(b) for _, b in group]))
        return {row["id"]: row for row in rows}

    # ------------------------------------------------------------------ one call, on the loop
    async def _serve_call(self, heartbeat: Heartbeat) -> None:
        call = heartbeat.call
        try:
            outcome = await self._process(heartbeat)
            self._done += 1
            log.debug("call %s ended: %s", call.short_id, outcome.status)
        except PermissionDenied as exc:
            self._fatal = exc
        except LeasectlError as exc:
            log.warning("worker %s: %s", self.worker_id, exc)
        except Exception:
            log.exception("worker %s: call %s", self.worker_id, call.short_id)
        finally:
            self._running -= 1
            assert self._freed is not None
            self._freed.set()

    async def _process(self, heartbeat: Heartbeat) -> CallOutcome:
        """The call's attempt as a span of its trace (console.worker.tracing), ended with its outcome."""
        span = self.call_span(heartbeat.call)
        if span.needs_lookup and span.records:
            await self.off_loop(span.start)  # the span's trace is read first: never on the loop
        else:
            span.start()
        try:
            outcome = await self._attempt_async(heartbeat, span)
        except BaseException as exc:
            span.end(error=exc)
            raise
        span.end(outcome)
        return outcome

    async def _attempt_async(self, heartbeat: Heartbeat, span: CallSpan) -> CallOutcome:
        call = heartbeat.call
        ctx = CallContext(self, call, heartbeat, span)
        actx = AsyncCallContext(self, ctx, heartbeat)
        try:
            try:
                result = await self._run_handler_async(call, actx, heartbeat)
            finally:
                self._handler_ended()
        except HandlerAbandoned:
            await self._stop_renewals(heartbeat)
            return await self.off_loop(self._ended_at_deadline, call, "abandoned")
        except Exception as exc:  # noqa: BLE001 - a crashing tool must not crash the worker
            await self._stop_renewals(heartbeat)
            outcome = await self.off_loop(self._raised, call, ctx, heartbeat, exc)
        else:
            # renewed until its group is sent (a group may wait behind others longer than a lease)
            outcome = await self._settle(call, ctx, heartbeat, result)
        if outcome.status == "lease_lost" and heartbeat.past_deadline():
            return await self.off_loop(self._ended_at_deadline, call, "stopped", outcome.detail)
        return outcome

    def _async_handler_for(self, tool: str) -> AsyncHandler:
        found: Any = self._handler_for(tool)  # Worker's lookup; the handlers are coroutines here
        return found

    async def _run_handler_async(self, call: ClaimedCall, ctx: AsyncCallContext, heartbeat: Heartbeat) -> Any:
        """The handler's answer. With a deadline, waited for until then and one heartbeat interval
        more; past that it is cancelled and abandoned (whatever it returns later is journaled)."""
        handler = self._async_handler_for(call.tool)
        with ctx.sync.span.current():  # the attempt's span, current in this task and the handler's
            if call.deadline_at is None:
                return await handler(ctx)
            task = asyncio.ensure_future(handler(ctx))
        while (wait := heartbeat.wait_for_handler()) > 0:
            done, _ = await asyncio.wait({task}, timeout=wait)
            if done:
                return task.result()
        if task.done():
            return task.result()  # it finished at this very moment
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(functools.partial(self._abandoned_ended, call))
        raise HandlerAbandoned(call.short_id)

    def _abandoned_ended(self, call: ClaimedCall, task: asyncio.Future[Any]) -> None:
        self._abandoned.discard(task)
        if task.cancelled():
            self.log_event("abandoned_handler_cancelled", call)
            return
        error = task.exception()
        result = None if error is not None else task.result()
        if self._executor is not None:
            self.loop.run_in_executor(self._executor, self._late, call, result, error)

    async def _stop_renewals(self, heartbeat: Heartbeat) -> None:
        """No renewal of this lease after this returns (one in flight is waited for, off the loop):
        the call's last write must not meet its own renewal on the row."""
        if not self._renewals.remove_if_idle(heartbeat):
            await self.off_loop(heartbeat.stop)

    async def _settle(self, call: ClaimedCall, ctx: CallContext, heartbeat: Heartbeat, result: Any) -> CallOutcome:
        """A handler's answer: the plain result of a call still held goes to the group; anything
        else (a cancel, a next stage, a lease in doubt, a late result) to Worker's own code."""
        plain = (ctx.ended is None and not isinstance(result, NextStage)
                 and not (heartbeat.cancel_requested.is_set() and result is None)
                 and not heartbeat.past_deadline() and not heartbeat.lost.is_set()
                 and heartbeat.seconds_confirmed() >= call.heartbeat_seconds
                 and not self.partitioned.is_set())
        if not plain:
            await self._stop_renewals(heartbeat)
            return await self.off_loop(self._returned, call, ctx, heartbeat, result, False)
        try:
            body = serialise_result(result)
        except (TypeError, ValueError) as exc:
            await self._stop_renewals(heartbeat)
            return await self.off_loop(self._raised, call, ctx, heartbeat,
                                       TypeError(f"the result is not JSON: {exc}"))
        assert self._completions is not None
        row = await self._completions.store(heartbeat, body)
        if row is None:
            # zero rows, or no answer: did an earlier attempt land? (a read: off the loop)
            return await self.off_loop(self._completed, call, body, None, statement="complete_many.sql")
        return self._completed(call, body, row, statement="complete_many.sql")


__all__ = ["AsyncCallContext", "AsyncHandler", "AsyncWorker", "GroupStats"]
