"""The reference worker's behaviour, in-process, against a real database."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from console.worker import CallContext, ToolFailed, ToolNoAnswer, Worker
from console.worker.receiver import FencedReceiver
from tests.helpers import FAST, QUICK, cancel, enqueue, events, job, mark_terminal, register_tool, wait_until
from tests.netproxy import DbProxy

TOOLS = {"search": ("read_only", QUICK), "erp": ("mutating_verifiable", QUICK), "pay": ("mutating_unverifiable", QUICK)}


@pytest.fixture
def pool():
    with ThreadPoolExecutor(2) as p:
        yield p


def running_token(conn, job_id):
    wait_until(lambda: job(conn, job_id)["state"] == "running", what="the worker to claim")
    return job(conn, job_id)["fencing_token"]


def test_completes_a_call(db, conn):
    e = enqueue(conn, "search", payload={"q": "x"})
    outcome = Worker(db.dsn, "w1", lambda ctx: {"echo": ctx.payload}).run_once()
    assert outcome.status == "succeeded"
    assert job(conn, e["id"])["result"] == {"echo": {"q": "x"}}


def test_cancel_heard_through_heartbeat_is_confirmed(db, conn, pool):
    e = enqueue(conn, "search")

    def handler(ctx: CallContext):
        ctx.sleep(30)  # cooperative work: wakes when a cancel arrives

    future = pool.submit(Worker(db.dsn, "w1", handler).run_once)
    token = running_token(conn, e["id"])
    t0 = time.monotonic()
    assert cancel(conn, e["id"], "running", token)["state"] == "cancel_requested"
    outcome = future.result(timeout=20)
    # heard at a beat, long before the 30 s sleep ends; the slack is a loaded machine's (2 s left it 1.5)
    assert outcome.status == "cancelled" and time.monotonic() - t0 < 15
    assert job(conn, e["id"])["state"] == "cancelled"


def test_result_after_cancel_is_recorded_despite_cancel(db, conn, pool):
    e = enqueue(conn, "search")

    def handler(ctx: CallContext):
        time.sleep(0.8)  # a tool that cannot be interrupted
        return {"done": True}

    future = pool.submit(Worker(db.dsn, "w1", handler).run_once)
    cancel(conn, e["id"], "running", running_token(conn, e["id"]))
    outcome = future.result(timeout=10)
    assert outcome.status == "succeeded" and outcome.completed_despite_cancel is True
    assert job(conn, e["id"])["completed_despite_cancel"] is True


def test_lost_lease_stops_a_cooperative_handler(db, conn, pool):
    e = enqueue(conn, "search")
    future = pool.submit(Worker(db.dsn, "w1", lambda ctx: ctx.sleep(30)).run_once)
    token = running_token(conn, e["id"])
    mark_terminal(conn, e["id"], "running", token, "failed", force=True, reason="fence it out")
    outcome = future.result(timeout=10)
    assert outcome.status == "lease_lost"
    kinds = [(ev["kind"], ev["actor"]) for ev in events(conn, e["id"])]
    assert ("heartbeat_lost", "w1") in kinds
    assert job(conn, e["id"])["result"] is None


def test_uncooperative_handler_result_is_not_written_after_loss(db, conn, pool):
    e = enqueue(conn, "search")

    def handler(ctx):
        time.sleep(1.0)
        return {"late": True}

    future = pool.submit(Worker(db.dsn, "w1", handler).run_once)
    token = running_token(conn, e["id"])
    mark_terminal(conn, e["id"], "running", token, "failed", force=True)
    outcome = future.result(timeout=10)
    assert outcome.status == "result_rejected"
    rejected = [ev for ev in events(conn, e["id"]) if ev["kind"] == "result_rejected"]
    assert rejected and rejected[0]["details"]["reason"] == "lease_lost"
    assert rejected[0]["details"]["written"] is False
    assert job(conn, e["id"])["result"] is None


def test_second_irreversible_step_is_not_sent_after_loss(db, conn, pool):
    receiver = FencedReceiver(verifiable=True)
    e = enqueue(conn, "erp", payload={"object": "order-1"})

    def handler(ctx: CallContext):
        ctx.start_side_effect()
        receiver.submit(object_id="order-1", idempotency_key=ctx.idempotency_key + ":1",
                        fence=ctx.fencing_token, operation="update", sender=ctx.worker_id)
        time.sleep(0.8)  # meanwhile an operator fences this worker out
        ctx.start_side_effect()  # step two: must raise, and nothing is sent
        receiver.submit(object_id="order-1", idempotency_key=ctx.idempotency_key + ":2",
                        fence=ctx.fencing_token, operation="update", sender=ctx.worker_id)

    future = pool.submit(Worker(db.dsn, "w1", handler).run_once)
    token = running_token(conn, e["id"])
    wait_until(lambda: receiver.effects, what="step one")
    mark_terminal(conn, e["id"], "running", token, "failed", force=True)
    outcome = future.result(timeout=10)
    assert outcome.status == "lease_lost"
    assert len(receiver.effects) == 1


def test_ownership_unknown_refuses_the_step_and_is_logged(db, conn, pool, caplog):
    """The database becomes unreachable for this worker: it cannot confirm its lease before the
    conservative deadline, so it does not send the request, and says why."""
    proxy = DbProxy(db.dsn)
    receiver = FencedReceiver(verifiable=False)
    e = enqueue(conn, "pay")

    def handler(ctx: CallContext):
        ctx.sleep(0.3)
        proxy.cut()
        time.sleep(1.6)  # past the last confirmed lease
        ctx.start_side_effect("ext-42")
        receiver.submit(object_id="x", idempotency_key=ctx.idempotency_key, fence=ctx.fencing_token,
                        operation="capture")

    caplog.set_level(logging.INFO, logger="leasectl.worker")
    worker = Worker(proxy.dsn, "w1", handler)
    try:
        outcome = worker.run_once()
    finally:
        proxy.restore()
    assert worker._pending_events, "kept until the database answers"
    worker.dsn = db.dsn  # (the proxy stays cut for the connection it already dropped)
    proxy.close()
    assert outcome.status == "lease_lost" and "cannot confirm ownership" in outcome.detail
    assert receiver.effects == []
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ownership_unknown")]
    assert lines, caplog.text
    assert "job=" in lines[0] and "token=1" in lines[0] and "last_confirmed_lease=" in lines[0]
    assert "external_request_id=ext-42" in lines[0]
    assert job(conn, e["id"])["side_effect_started_at"] is None
    # once the database answers again, the event reaches the call's history
    worker.flush_events()
    recorded = [ev for ev in events(conn, e["id"]) if ev["kind"] == "ownership_unknown"]
    assert recorded and recorded[0]["details"]["external_request_id"] == "ext-42"
    assert recorded[0]["details"]["last_confirmed_lease"] and recorded[0]["fencing_token"] == 1


def test_no_answer_after_unverifiable_side_effect_waits_for_a_human(db, conn):
    e = enqueue(conn, "pay")

    def handler(ctx: CallContext):
        ctx.start_side_effect("ext-7")
        raise ToolNoAnswer("gateway timeout after the request was sent")

    outcome = Worker(db.dsn, "w1", handler).run_once()
    assert outcome.status == "outcome_unknown"
    j = job(conn, e["id"])
    assert j["state"] == "outcome_unknown" and j["external_request_id"] == "ext-7"
    assert j["error"]["external_request_id"] == "ext-7"
    assert Worker(db.dsn, "w2", lambda ctx: {}).run_once() is None, "nobody picks it up"


def test_no_answer_after_verifiable_side_effect_requeues_and_next_owner_is_told(db, conn):
    e = enqueue(conn, "erp")

    def first(ctx: CallContext):
        ctx.start_side_effect("ext-8")
        raise ToolNoAnswer("timeout")

    assert Worker(db.dsn, "w1", first).run_once().status == "requeued"
    seen = {}

    def second(ctx: CallContext):
        seen["previous"] = ctx.call.previous_request_id
        return {"checked": True}

    assert Worker(db.dsn, "w2", second).run_once().status == "succeeded"
    assert seen["previous"] == "ext-8"
    assert job(conn, e["id"])["attempt"] == 2


def test_tool_failure_and_crash_before_any_side_effect(db, conn):
    register_tool(conn, "once", "read_only", lease_seconds=1.5, heartbeat_seconds=0.2,
                  missed_heartbeats=2, jitter_seconds=0.3, max_attempts=1)
    a = enqueue(conn, "search")
    b = enqueue(conn, "once")

    def handler(ctx):
        if ctx.call.tool == "search":
            raise ToolFailed("bad query", retryable=False)
        raise RuntimeError("segfault-ish")

    w = Worker(db.dsn, "w1", handler)
    assert {w.run_once().status, w.run_once().status} == {"failed"}
    assert job(conn, a["id"])["terminal_reason"] == "failed: not retryable"
    assert job(conn, b["id"])["terminal_reason"] == "attempts exhausted"
    assert "RuntimeError" in job(conn, b["id"])["error"]["message"]


def test_a_lock_wait_met_by_the_worker_is_journaled_with_its_cause(db):
    """docs/seeds.md §004.4: lock waits and heavy statements are told apart (details.cause), so that
    leasectl_db_timeouts_total{cause} counts them apart."""
    from console.shared.config import SessionLimits
    from console.shared.errors import RowLocked

    with db.connect() as conn:
        register_tool(conn, "search", "read_only", **FAST)
        e = enqueue(conn, "search")
    holder = db.connect(autocommit=False)
    limits = SessionLimits(statement_timeout_ms=5_000, lock_timeout_ms=200, idle_in_transaction_ms=10_000)

    def handler(ctx: CallContext) -> dict:
        holder.execute("select 1 from tool_jobs where id = %s for update", (ctx.call.id,))  # someone locks it
        return {"ok": True}

    try:
        with pytest.raises(RowLocked):
            Worker(db.dsn, "w1", handler, limits=limits).run_once()
    finally:
        holder.rollback()
        holder.close()
    with db.connect() as conn:
        journaled = [ev for ev in events(conn, e["id"]) if ev["kind"] == "database_error"]
    assert journaled and journaled[0]["details"]["cause"] == "lock_timeout"
    assert journaled[0]["details"]["statement"] == "worker/complete" and journaled[0]["actor"] == "w1"


def test_a_deadlock_on_the_fused_completion_loses_neither_call(db, caplog):
    """complete_and_claim.sql claims the next call, then waits for the row of the call it
    completes; another session holding that row and then asking for the claimed one closes a
    cycle. PostgreSQL rolls the worker's statement back (it waited first, so its deadlock check
    runs first): the claim is undone with it, the plain completion is sent again once the row is
    free, and the next call is claimed afresh. Nothing is lost, nothing is claimed twice."""
    import threading

    caplog.set_level(logging.WARNING, logger="leasectl.worker")
    with db.connect() as conn:
        # a lease that outlasts the deadlock check (1 s): the held row blocks its renewals meanwhile
        register_tool(conn, "search", "read_only", lease_seconds=10, heartbeat_seconds=1, missed_heartbeats=2,
                      jitter_seconds=1)
        first, second = enqueue(conn, "search"), enqueue(conn, "search")
    holder = db.connect(autocommit=False)
    order: list[str] = []

    def close_the_cycle() -> None:
        time.sleep(0.5)  # the worker has claimed `second` and waits for `first`
        holder.execute("select 1 from tool_jobs where id = %s for update", (second["id"],))
        order.append("holder got the claimed row")
        holder.rollback()

    def handler(ctx: CallContext) -> dict:
        if ctx.call.id == first["id"]:
            holder.execute("select 1 from tool_jobs where id = %s for update", (first["id"],))
            threading.Thread(target=close_the_cycle, daemon=True).start()
        return {"ok": True}

    try:
        worker = Worker(db.dsn, "w1", handler, poll_interval=0.05)
        assert worker.run(threading.Event(), max_calls=2) == 2
    finally:
        holder.close()
    assert order == ["holder got the claimed row"]
    deadlocks = [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()]
    assert deadlocks and "statement=worker/complete_and_claim" in deadlocks[0], caplog.text
    with db.connect() as conn:
        for call in (first, second):
            assert job(conn, call["id"])["state"] == "succeeded"
            kinds = [e["kind"] for e in events(conn, call["id"])]
            assert kinds.count("claimed") == 1, kinds
            assert "reclaimed" not in kinds and "result_rejected" not in kinds, kinds
