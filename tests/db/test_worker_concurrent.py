"""The reference worker with several calls in flight in one process: two connections
whatever the concurrency, one heartbeat statement per beat, and every guarantee held per call."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from console.shared.config import SessionLimits
from console.shared.errors import PermissionDenied
from console.worker import CallContext, Worker
from console.worker.receiver import FencedReceiver
from tests.helpers import (
    QUICK,
    as_login,
    cancel,
    enqueue,
    events,
    job,
    mark_terminal,
    register_tool,
    wait_until,
)
from tests.netproxy import DbProxy

LOGIN = "lc_conc_worker"
LOGINS = {LOGIN: "leasectl_worker"}
TOOLS = {"search": ("read_only", QUICK), "pay": ("mutating_unverifiable", QUICK),
         "slow": ("read_only", {"lease_seconds": 4, "heartbeat_seconds": 0.5, "missed_heartbeats": 2,
                                "jitter_seconds": 1})}


class Running:
    """Worker.run in a thread of its own; .done() waits for its answer."""

    def __init__(self, worker: Worker, **kwargs: Any) -> None:
        self.worker = worker
        self.stop = threading.Event()
        self.answer: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, kwargs=kwargs, daemon=True)
        self._thread.start()

    def _run(self, **kwargs: Any) -> None:
        try:
            self.answer = self.worker.run(self.stop, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            self.error = exc

    def done(self, timeout: float = 30) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the worker did not finish"
        if self.error:
            raise self.error
        return self.answer


def states(conn, ids) -> dict[Any, str]:
    return {i: job(conn, i)["state"] for i in ids}


def running_tokens(conn, ids) -> dict[Any, int]:
    wait_until(lambda: all(job(conn, i)["state"] == "running" for i in ids), what="the worker to claim them all")
    return {i: job(conn, i)["fencing_token"] for i in ids}


def three_at_once(db, conn, handler: Callable[[CallContext], Any], tool: str = "search",
                  **options: Any) -> tuple[list[Any], Running, dict[Any, int]]:
    """Three calls of `tool` taken together by one worker `wc` (concurrency 3) running `handler`: their
    ids, the run, and the fencing token each runs under."""
    ids = [enqueue(conn, tool)["id"] for _ in range(3)]
    worker = Worker(db.dsn, "wc", handler, poll_interval=0.05, concurrency=3, **options)
    return ids, Running(worker, max_calls=3), running_tokens(conn, ids)


def worker_connections(conn, name: str) -> int:
    # this test's database only: the server is shared by the parallel test processes, whose workers
    # may bear the same name in their own databases
    return conn.execute("select count(*) as n from pg_stat_activity where application_name like %s "
                        "and datname = current_database()", (f"leasectl-worker:{name}%",)).fetchone()["n"]


def test_many_calls_at_once_on_two_connections_and_one_statement_per_beat(db, conn):
    ids = [enqueue(conn, "search", payload={"i": i})["id"] for i in range(8)]
    seen_connections: list[int] = []

    def handler(ctx: CallContext) -> dict:
        ctx.sleep(1.2)  # several heartbeats each
        return {"i": ctx.payload["i"]}

    worker = Worker(db.dsn, "wc", handler, poll_interval=0.05, concurrency=8)
    t0 = time.monotonic()
    run = Running(worker, max_calls=8)
    running_tokens(conn, ids)
    wait_until(lambda: worker.renewal_stats.statements >= 1, what="a first heartbeat")
    for _ in range(5):
        seen_connections.append(worker_connections(conn, "wc"))
        time.sleep(0.1)
    assert run.done() == 8
    took = time.monotonic() - t0
    assert set(seen_connections) == {2}, "one claim connection and one heartbeat connection, whatever the concurrency"
    assert all(job(conn, i)["state"] == "succeeded" for i in ids)
    assert {job(conn, i)["result"]["i"] for i in ids} == set(range(8))
    assert took < 5, f"8 calls of 1.2 s ran at once, not one after the other ({took:.1f} s)"
    stats = worker.renewal_stats
    assert stats.renewed >= 8 * 3, stats
    assert stats.largest_batch >= 6 and stats.renewed >= 4 * stats.statements, \
        f"the leases of the process are renewed together, not one statement per lease: {stats}"
    assert stats.lost == 0 and stats.smallest_margin is not None and stats.smallest_margin > 0.2, stats


def test_a_lost_lease_stops_that_call_and_no_other(db, conn):
    ids, run, tokens = three_at_once(db, conn, lambda ctx: ctx.sleep(1.5) or {"by": ctx.worker_id})
    victim = ids[1]
    mark_terminal(conn, victim, "running", tokens[victim], "failed", force=True, reason="fence one out")
    assert run.done() == 3
    assert states(conn, ids) == {ids[0]: "succeeded", victim: "failed", ids[2]: "succeeded"}
    assert ("heartbeat_lost", "wc") in [(e["kind"], e["actor"]) for e in events(conn, victim)]
    assert job(conn, victim)["result"] is None
    for other in (ids[0], ids[2]):
        assert not [e for e in events(conn, other) if e["kind"] == "heartbeat_lost"]


def test_a_cancel_is_heard_and_confirmed_by_its_call_only(db, conn):
    # the call cancelled would run 30 s, the others 2 s: heard at a beat, not when the call ends,
    # whatever a loaded machine's delays (with 2 s each, a bound of 1.5 s could fail for them alone)
    taken = threading.Lock()
    long: list[Any] = []

    def handler(ctx: CallContext) -> dict:
        with taken:
            mine = not long
            if mine:
                long.append(ctx.call.id)
        ctx.sleep(30.0 if mine else 2.0)
        return {"done": True}

    ids, run, tokens = three_at_once(db, conn, handler)
    wait_until(lambda: long, what="a call to start")
    victim = long[0]
    assert cancel(conn, victim, "running", tokens[victim])["state"] == "cancel_requested"
    wait_until(lambda: job(conn, victim)["state"] == "cancelled", timeout=20,
               what="the cancel confirmed at a beat, before the call's 30 s end")
    assert run.done() == 3
    assert states(conn, ids) == {i: "cancelled" if i == victim else "succeeded" for i in ids}


def test_an_uncooperative_call_never_writes_its_result_after_its_loss(db, conn):
    ids, run, tokens = three_at_once(db, conn, lambda ctx: time.sleep(1.2) or {"late": ctx.fencing_token})
    mark_terminal(conn, ids[2], "running", tokens[ids[2]], "failed", force=True)
    assert run.done() == 3
    rejected = [e for e in events(conn, ids[2]) if e["kind"] == "result_rejected"]
    details = rejected[0]["details"] if rejected else {}
    assert details.get("reason") == "lease_lost" and details.get("written") is False and "observed_at" in details
    # kept for checking (docs/seeds.md §000): the late result's hash and size, never the result itself
    assert len(details["result_sha256"]) == 64 and details["result_size"] > 0
    assert job(conn, ids[2])["result"] is None
    assert [job(conn, i)["result"] for i in ids[:2]] == [{"late": tokens[i]} for i in ids[:2]]


def test_ownership_unknown_refuses_each_calls_step_when_the_database_is_gone(db, conn):
    proxy = DbProxy(db.dsn)
    receiver = FencedReceiver(verifiable=False)
    ids = [enqueue(conn, "pay")["id"] for _ in range(2)]
    both = threading.Barrier(2)

    def handler(ctx: CallContext) -> None:
        ctx.sleep(0.3)
        if both.wait() == 0:
            proxy.cut()
        time.sleep(1.6)  # past the last confirmed lease
        request = ctx.start_side_effect(f"ext-{ctx.call.short_id}")
        receiver.submit(object_id=str(ctx.call.id), idempotency_key=ctx.idempotency_key, fence=ctx.fencing_token,
                        operation="capture")
        raise AssertionError(f"{request} must not have been sent")

    worker = Worker(proxy.dsn, "wc", handler, poll_interval=0.05, concurrency=2)
    try:
        assert worker.run(threading.Event(), max_calls=2) == 2
    finally:
        proxy.restore()
    assert receiver.effects == [], "nothing irreversible was sent"
    assert sorted(kind for _call, kind, _details in worker._pending_events) == ["ownership_unknown"] * 2
    worker.dsn = db.dsn
    proxy.close()
    worker.flush_events()
    worker.close()
    for i in ids:
        recorded = [e for e in events(conn, i) if e["kind"] == "ownership_unknown"]
        assert recorded and recorded[0]["details"]["external_request_id"] == f"ext-{str(i)[:8]}"
        assert job(conn, i)["side_effect_started_at"] is None


def test_a_locked_row_holds_back_its_own_renewal_only_and_is_journaled(db, conn):
    """One statement renews every lease, so one locked row could stall them all: the worker
    retries a lock wait lease by lease. Step by step: the batch is seen blocked on the lock."""
    limits = SessionLimits(statement_timeout_ms=5_000, lock_timeout_ms=300, idle_in_transaction_ms=10_000)
    ids, run, _tokens = three_at_once(db, conn, lambda ctx: ctx.sleep(3.0) or {"ok": True}, "slow", limits=limits)
    locked = ids[0]
    holder = db.connect(autocommit=False)
    holder.execute("select 1 from tool_jobs where id = %s for update", (locked,))
    try:
        wait_until(lambda: conn.execute(
            "select count(*) as n from pg_stat_activity where application_name = 'leasectl-worker:wc:heartbeat' "
            "and wait_event_type = 'Lock' and datname = current_database()").fetchone()["n"] == 1, timeout=5, what="the batch to wait for the lock")
        wait_until(lambda: [e for e in events(conn, locked) if e["kind"] == "database_error"], timeout=5,
                   what="the lock wait journaled")
        renewed = {i: job(conn, i)["heartbeat_at"] for i in ids[1:]}
        time.sleep(0.8)
        assert all(job(conn, i)["heartbeat_at"] > renewed[i] for i in ids[1:]), \
            "the other leases are renewed while one row stays locked"
    finally:
        holder.rollback()
        holder.close()
    assert run.done() == 3
    assert states(conn, ids) == dict.fromkeys(ids, "succeeded")
    journaled = [e for e in events(conn, locked) if e["kind"] == "database_error"]
    assert journaled[0]["details"]["cause"] == "lock_timeout"
    assert journaled[0]["details"]["statement"] == "worker/heartbeat_many" and journaled[0]["actor"] == "wc"
    for other in ids[1:]:
        assert not [e for e in events(conn, other) if e["kind"] == "database_error"]


def test_the_identity_is_checked_before_the_first_claim(db, conn, logins):
    from psycopg.conninfo import make_conninfo

    enqueue(conn, "search")
    dsn = make_conninfo(db.dsn, user=LOGIN)
    with pytest.raises(PermissionDenied, match=f"may own calls only as {LOGIN} or {LOGIN}:<name>"):
        Worker(dsn, "someone-else", lambda ctx: {"ok": True}, concurrency=4).run(threading.Event(), max_calls=1)
    assert Worker(dsn, f"{LOGIN}:w-1", lambda ctx: {"ok": True}, concurrency=4).run(threading.Event(),
                                                                                   max_calls=1) == 1
    with as_login(db, LOGIN) as mine:
        assert mine.execute("select count(*) as n from tool_jobs where state = 'succeeded'").fetchone()["n"] == 1


def test_max_calls_and_drain_count_every_call_once(db, conn):
    ids = [enqueue(conn, "search")["id"] for _ in range(10)]
    handler: Callable[[CallContext], Any] = lambda ctx: ctx.sleep(0.1) or {"ok": True}  # noqa: E731
    assert Worker(db.dsn, "wc", handler, poll_interval=0.05, concurrency=4).run(threading.Event(), max_calls=7) == 7
    assert sorted(states(conn, ids).values()) == ["queued"] * 3 + ["succeeded"] * 7, "no call claimed past max_calls"
    assert Worker(db.dsn, "wc2", handler, poll_interval=0.05, concurrency=4).run(threading.Event(), drain=True) == 3
    assert set(states(conn, ids).values()) == {"succeeded"}


def test_stop_lets_the_calls_in_flight_finish_and_claims_no_more(db, conn):
    ids = [enqueue(conn, "search")["id"] for _ in range(6)]
    release = threading.Event()

    def handler(ctx: CallContext) -> dict:
        while not release.is_set():
            ctx.sleep(0.05)
        return {"ok": True}

    worker = Worker(db.dsn, "wc", handler, poll_interval=0.05, concurrency=3)
    run = Running(worker)
    wait_until(lambda: sum(s == "running" for s in states(conn, ids).values()) == 3, what="three in flight")
    run.stop.set()
    release.set()
    assert run.done() == 3
    assert sorted(states(conn, ids).values()) == ["queued"] * 3 + ["succeeded"] * 3, \
        "the three in flight finished, and none claimed a successor after the stop"
    # a closed session's backend leaves pg_stat_activity a moment after the client closes it
    wait_until(lambda: worker_connections(conn, "wc") == 0, what="both connections closed")


def test_a_completion_that_meets_a_locked_row_is_journaled_and_retried_not_dropped(db, conn):
    """A long transaction elsewhere holds a call's row when its tool answers: the completion (fused
    with the next claim) meets lock_timeout. It is journaled with its cause, sent again, and lands
    once the row is free; the shared connection and the other call are not disturbed."""
    first = enqueue(conn, "slow", payload={"i": 0})["id"]
    second = enqueue(conn, "slow", payload={"i": 1})["id"]
    locked = threading.Event()

    def handler(ctx: CallContext) -> dict:
        if ctx.payload["i"] == 0:
            assert locked.wait(10)
        return {"i": ctx.payload["i"]}

    limits = SessionLimits(statement_timeout_ms=5_000, lock_timeout_ms=300, idle_in_transaction_ms=30_000)
    worker = Worker(db.dsn, "wc", handler, poll_interval=0.05, concurrency=2, limits=limits)
    run = Running(worker, max_calls=2)
    running_tokens(conn, [first])
    with db.connect() as holder, holder.transaction():
        holder.execute("select id from tool_jobs where id = %s for no key update", (first,))
        locked.set()
        time.sleep(0.8)  # longer than two lock waits, shorter than the worker's patience
    assert run.done() == 2
    assert states(conn, [first, second]) == {first: "succeeded", second: "succeeded"}
    assert job(conn, first)["result"] == {"i": 0}, "the tool's answer was kept"
    errors = [e for e in events(conn, first) if e["kind"] == "database_error"]
    assert errors and {e["details"]["cause"] for e in errors} == {"lock_timeout"}, events(conn, first)


def test_locked_rows_cost_their_own_calls_only_never_the_process(db, conn):
    """Another transaction holds three of six rows longer than a lease. With the default 2 s lock
    wait, renewing the held ones one after the other (2 s each) starved every lease of the process;
    the free ones must keep their leases and finish, whatever happens to the held ones."""
    ids = [enqueue(conn, "slow", payload={"i": i})["id"] for i in range(6)]
    release = threading.Event()

    def handler(ctx: CallContext) -> dict:
        while not release.is_set():
            ctx.sleep(0.2)
        ctx.sleep(1.0)  # a few more beats after the lock is gone
        return {"i": ctx.payload["i"]}

    worker = Worker(db.dsn, "wc", handler, poll_interval=0.05, concurrency=6)
    run = Running(worker, max_calls=6)
    running_tokens(conn, ids)
    held, free = ids[:3], ids[3:]
    with db.connect() as holder, holder.transaction():
        holder.execute("select id from tool_jobs where id = any(%s) for no key update", (held,))
        time.sleep(5.0)  # longer than the lease (4 s)
    release.set()
    run.done(timeout=30)
    for i in free:
        kinds = [e["kind"] for e in events(conn, i)]
        assert "heartbeat_lost" not in kinds, (i, kinds)
        assert job(conn, i)["state"] == "succeeded", (i, job(conn, i)["state"])
    assert any(e["kind"] == "database_error" and e["details"]["cause"] == "lock_timeout"
               for i in held for e in events(conn, i)), "the lock wait is journaled on the held calls"


def test_the_margin_before_a_side_effect_is_checked_again_once_the_write_connection_is_free(db, conn):
    """Step by step: the call checks its margin and then waits for the connection its process
    shares; meanwhile its row is locked, so its lease is not renewed and runs down. Once the
    connection is free the margin is checked again and confirmed anew: the request never leaves
    with less lease than H + J, as the database saw it when it recorded the start."""
    register_tool(conn, "charge", "mutating_unverifiable", lease_seconds=4, heartbeat_seconds=0.5,
                  missed_heartbeats=2, jitter_seconds=1)
    margin = 0.5 + 1
    call = enqueue(conn, "charge")["id"]
    ready, go, seen = threading.Event(), threading.Event(), {}

    def handler(ctx: CallContext) -> dict:
        ready.set()
        go.wait(10)
        ctx.start_side_effect()
        seen["lease_left"] = ctx.lease_left_at_start
        return {"charged": True}

    limits = SessionLimits(statement_timeout_ms=5_000, lock_timeout_ms=300, idle_in_transaction_ms=10_000)
    worker = Worker(db.dsn, "wm", handler, poll_interval=0.05, concurrency=2, limits=limits)
    run = Running(worker, max_calls=1)
    assert ready.wait(10)
    holder = db.connect(autocommit=False)
    holder.execute("select 1 from tool_jobs where id = %s for no key update", (call,))  # no renewal now
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # another call's statement holds the shared connection
        with worker._main.use():
            held.set()
            release.wait(10)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(5)
    try:
        go.set()
        time.sleep(2.8)  # the lease (4 s from the last renewal) now has less than the margin left
        left = conn.execute("select extract(epoch from lease_until - now()) as s from tool_jobs where id = %s",
                            (call,)).fetchone()["s"]
        assert 0 < left < margin, left
    finally:
        holder.rollback()
        holder.close()
        release.set()
    assert run.done() == 1
    started = next(e for e in events(conn, call) if e["kind"] == "tool_request_started")
    left_then = (started["lease_until"] - started["at"]).total_seconds()  # the database's view, journaled
    assert left_then >= margin, f"the request left with {left_then:.2f} s of lease"
    assert seen["lease_left"] == pytest.approx(left_then, abs=0.01), "the worker knows it too"
    assert job(conn, call)["state"] == "succeeded"
