"""The reference worker and the chain's deadline, checks and stages (migration 0014), in-process
against a real database: time_left by the database's clock, a call that outlives its deadline
ended and its late result kept by its hash, a verifiable request checked before it is repeated,
and a next stage enqueued in the same transaction as the result."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest

from console.worker import (
    CallContext,
    CheckRequired,
    DeadlinePassed,
    OutcomeUnknown,
    Worker,
    serialise_result,
)
from tests.helpers import (
    FAST,
    QUICK,
    SLOW,
    claim,
    enqueue,
    events,
    expire_lease,
    job,
    kinds,
    mark_terminal,
    register_tool,
    start_side_effect,
    sweep,
    wait_until,
)

# quick leases and beats for search, so that deadlines of a second or two are many heartbeats long;
# steady: no renewal during a test, a loss goes unseen
TOOLS = {"search": ("read_only", QUICK), "erp": ("mutating_verifiable", FAST), "steady": ("read_only", SLOW)}


def db_now(conn) -> Any:
    return conn.execute("select now() as t").fetchone()["t"]


def rejections(conn, job_id) -> list[dict]:
    return [e["details"] for e in events(conn, job_id) if e["kind"] == "result_rejected"]


def canonical(result: Any) -> bytes:
    """The canonical JSON the worker sends, written out here on purpose: sorted keys, no spaces, UTF-8."""
    return json.dumps(result, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# ----------------------------------------------------------------------------- time_left


def test_time_left_follows_the_database_clock_and_shrinks(db, conn):
    with_deadline = enqueue(conn, "search", deadline_at=db_now(conn) + timedelta(seconds=20))
    seen: dict[str, Any] = {}

    def handler(ctx: CallContext) -> dict:
        seen["first"] = ctx.time_left()
        t0 = time.monotonic()
        seen["db"] = float(conn.execute("select extract(epoch from deadline_at - now()) as s from tool_jobs "
                                        "where id = %s", (ctx.call.id,)).fetchone()["s"])
        seen["after db"] = ctx.time_left()
        ctx.sleep(2.0)  # ten renewals: each answer sets the deadline again
        seen["later"] = ctx.time_left()
        seen["slept"] = time.monotonic() - t0
        return {}

    worker = Worker(db.dsn, "w1", handler)
    assert worker.run_once().status == "succeeded"
    # the lease (1.5 s) says nothing of it: 20 s, as the database counts them. Early by a
    # statement's time, which a loaded machine can make 0.5 s and more: the tolerances below are its,
    # with the sleep long enough that a time_left that did not shrink still fails
    assert seen["after db"] <= seen["db"] + 0.01, seen
    assert abs(seen["first"] - seen["db"]) < 2.0, seen
    assert seen["first"] < 20, "counted from when the claim was sent: early, never late"
    assert abs((seen["first"] - seen["later"]) - seen["slept"]) < 1.0, seen
    assert job(conn, with_deadline["id"])["state"] == "succeeded"

    enqueue(conn, "search")
    left: list[float | None] = []
    assert Worker(db.dsn, "w1", lambda ctx: left.append(ctx.time_left()) or {}).run_once().status == "succeeded"
    assert left == [None], "no deadline, no time left to speak of"


def test_a_cooperative_handler_is_told_when_the_deadline_passes(db, conn):
    call = enqueue(conn, "search", deadline_at=db_now(conn) + timedelta(seconds=1))
    told: list[BaseException] = []

    def handler(ctx: CallContext) -> dict:
        try:
            ctx.sleep(30)
        except DeadlinePassed as exc:
            told.append(exc)
            assert ctx.time_left() == 0.0 and ctx.deadline_passed
            raise
        return {"never": True}

    t0 = time.monotonic()
    outcome = Worker(db.dsn, "w1", handler).run_once()
    assert time.monotonic() - t0 < 2.5
    assert outcome.status == "deadline_passed" and told
    history = events(conn, call["id"])
    ended = [e for e in history if e["kind"] == "deadline_passed"]
    assert ended and ended[0]["details"]["handler"] == "stopped" and ended[0]["actor"] == "w1"
    assert "heartbeat_lost" not in kinds(conn, call["id"]), "the lease ended with the deadline: not a lost renewal"
    assert job(conn, call["id"])["result"] is None
    expire_lease(conn, call["id"])
    swept = {r["id"]: r for r in sweep(conn)}
    assert swept[call["id"]]["state_to"] == "failed"


def test_a_handler_that_blocks_past_the_deadline_is_abandoned_and_its_late_result_kept(db, conn):
    call = enqueue(conn, "search", deadline_at=db_now(conn) + timedelta(seconds=1))
    late = {"late": True, "rows": ["é", 1]}

    def handler(ctx: CallContext) -> dict:
        time.sleep(3.0)  # a tool that never looks at its context
        return late

    t0 = time.monotonic()
    worker = Worker(db.dsn, "w1", handler)
    outcome = worker.run_once()
    took = time.monotonic() - t0
    assert outcome.status == "deadline_passed" and took < 2.5, (outcome, took)
    ended = [e for e in events(conn, call["id"]) if e["kind"] == "deadline_passed"]
    assert ended and ended[0]["details"]["handler"] == "abandoned"

    details = wait_until(lambda: rejections(conn, call["id"]), what="the late result's rejection")[0]
    body = canonical(late)
    assert serialise_result(late) == body
    assert details["reason"] == "deadline_passed" and details["written"] is False
    assert details["result_sha256"] == hashlib.sha256(body).hexdigest()
    assert details["result_size"] == len(body)
    final = job(conn, call["id"])
    assert final["result"] is None and final["state"] == "running", "never reported done; the sweep ends it"
    expire_lease(conn, call["id"])
    assert {r["id"]: r["state_to"] for r in sweep(conn)}[call["id"]] == "failed"


def test_a_request_is_not_started_with_less_time_left_than_it_needs(db, conn):
    """Less than H + J before the deadline, where the lease ends: what is short is time, not the
    ownership -- DeadlinePassed says so, nothing is sent, no ownership_unknown is journaled."""
    register_tool(conn, "pay", "mutating_unverifiable", **QUICK)  # a request needs 0.2 + 0.3 s
    call = enqueue(conn, "pay", deadline_at=db_now(conn) + timedelta(seconds=3))
    refused: list[DeadlinePassed] = []

    def handler(ctx: CallContext) -> dict:
        while (ctx.time_left() or 0) > 0.35:
            ctx.sleep(0.05)
        try:
            ctx.start_side_effect("psp-1")
        except DeadlinePassed as exc:
            refused.append(exc)
            raise
        return {"sent": True}

    outcome = Worker(db.dsn, "w1", handler).run_once()
    assert refused and "too little to start psp-1" in str(refused[0]) and not refused[0].retryable
    final = job(conn, call["id"])
    assert final["side_effect_started_at"] is None and final["result"] is None
    assert "ownership_unknown" not in kinds(conn, call["id"])
    assert outcome.status in ("failed", "deadline_passed"), outcome


def test_a_result_complete_sql_refuses_is_kept_by_its_hash(db, conn):
    """complete.sql's zero rows: the lease was lost and the heartbeat had not seen it yet."""
    call = enqueue(conn, "steady")
    result = {"answer": 42, "note": "written too late"}

    def handler(ctx: CallContext) -> dict:
        mark_terminal(conn, ctx.call.id, "running", ctx.fencing_token, "failed", force=True, reason="fence it out")
        return result

    outcome = Worker(db.dsn, "w1", handler).run_once()
    assert outcome.status == "result_rejected"
    [details] = rejections(conn, call["id"])
    assert details["reason"] == "zero_rows"
    assert details["result_sha256"] == hashlib.sha256(canonical(result)).hexdigest()
    assert details["result_size"] == len(canonical(result))


# ----------------------------------------------------------------------------- checks before repeats


def reclaimed_after_its_request_went_out(conn) -> dict:
    """An erp call whose first owner sent req-1 and lost its lease: the next claim takes it up."""
    made = enqueue(conn, "erp", payload={"order": "A-7"})
    first = claim(conn, "w0", ["erp"])
    assert first["id"] == made["id"] and start_side_effect(conn, first, "w0", "req-1") is not None
    expire_lease(conn, first["id"])
    return made


def test_a_reclaimed_verifiable_call_starts_again_only_after_a_check(db, conn):
    call = reclaimed_after_its_request_went_out(conn)
    seen: dict[str, Any] = {}

    def handler(ctx: CallContext) -> dict:
        seen["needs_check"] = ctx.needs_check
        with pytest.raises(ValueError):
            ctx.record_check("maybe")  # done, not_done or unknown: nothing else is recorded
        try:
            ctx.start_side_effect("req-2")
        except CheckRequired as exc:
            seen["refused"] = exc
        ctx.record_check("not_done", {"erp": "no such request"})
        seen["after_check"] = ctx.needs_check
        ctx.start_side_effect("req-2")
        with pytest.raises(CheckRequired):
            ctx.start_side_effect("req-3")  # a second request needs a second check
        return {"sent": "req-2"}

    outcome = Worker(db.dsn, "w1", handler).run_once()
    assert outcome.status == "succeeded", outcome
    refused = seen["refused"]
    assert refused.external_request_id == "req-1"
    assert "carries request req-1" in str(refused) and "record_check" in str(refused)
    assert seen["needs_check"] is True and seen["after_check"] is False
    history = events(conn, call["id"])
    checks = [e for e in history if e["kind"] == "side_effect_checked"]
    assert [(e["actor"], e["details"]["found"], e["details"]["external_request_id"], e["details"]["details"])
            for e in checks] == [("w1", "not_done", "req-1", {"erp": "no such request"})]
    final = job(conn, call["id"])
    assert (final["state"], final["external_request_id"]) == ("succeeded", "req-2")


def test_a_check_that_finds_it_done_completes_without_a_second_request(db, conn):
    call = reclaimed_after_its_request_went_out(conn)

    def handler(ctx: CallContext) -> dict:
        ctx.record_check("done", {"confirmation": "erp-9"})
        with pytest.raises(CheckRequired):
            ctx.start_side_effect()  # done is done: nothing is sent again
        return {"confirmation": "erp-9", "verified": True}

    assert Worker(db.dsn, "w1", handler).run_once().status == "succeeded"
    final = job(conn, call["id"])
    assert final["result"] == {"confirmation": "erp-9", "verified": True} and final["external_request_id"] == "req-1"


def test_a_check_that_cannot_tell_ends_the_call_outcome_unknown(db, conn):
    call = reclaimed_after_its_request_went_out(conn)
    raised: list[BaseException] = []

    def handler(ctx: CallContext) -> dict:
        try:
            ctx.record_check("unknown", {"erp": "status endpoint down"})
        except OutcomeUnknown as exc:
            raised.append(exc)
            raise
        return {"never": True}

    outcome = Worker(db.dsn, "w1", handler).run_once()
    assert outcome.status == "outcome_unknown" and raised
    final = job(conn, call["id"])
    assert final["state"] == "outcome_unknown" and final["result"] is None
    history = kinds(conn, call["id"])
    assert "side_effect_checked" in history and "heartbeat_lost" not in history
    assert Worker(db.dsn, "w2", lambda ctx: {}).run_once() is None, "nobody picks it up: a human decides"


def test_a_handler_that_never_checks_leaves_the_call_to_a_human(db, conn):
    call = reclaimed_after_its_request_went_out(conn)

    def handler(ctx: CallContext) -> dict:
        ctx.start_side_effect("req-2")  # raises CheckRequired, which the handler does not catch
        return {"sent": True}

    outcome = Worker(db.dsn, "w1", handler).run_once()
    assert outcome.status == "outcome_unknown", outcome
    final = job(conn, call["id"])
    assert final["state"] == "outcome_unknown" and final["external_request_id"] == "req-1"


# ----------------------------------------------------------------------------- stages


def children(conn, parent_id) -> list[dict]:
    return list(conn.execute("select id, chain_id, stage, parent_id, deadline_at, payload, idempotency_key "
                             "from tool_jobs where parent_id = %s", (parent_id,)))


def test_next_stage_is_enqueued_with_the_result_in_one_transaction(db, conn):
    deadline = db_now(conn) + timedelta(minutes=5)
    first = enqueue(conn, "search", payload={"q": "x"}, deadline_at=deadline)
    key = f"stage-2-{uuid.uuid4().hex}"

    def handler(ctx: CallContext) -> Any:
        return ctx.next_stage("steady", key, {"pages": [1, 2]}, result={"found": 2})

    outcome = Worker(db.dsn, "w1", handler).run_once()
    assert outcome.status == "succeeded" and outcome.next_stage_id is not None
    [child] = children(conn, first["id"])
    assert child["id"] == outcome.next_stage_id and child["idempotency_key"] == key
    assert (child["chain_id"], child["stage"], child["payload"]) == (first["id"], 1, {"pages": [1, 2]})
    assert child["deadline_at"] == deadline, "the chain's deadline travels with it"
    assert job(conn, first["id"])["result"] == {"found": 2}

    # the next stage is an ordinary call: its own worker takes it, and can make the one after it
    seen: dict[str, Any] = {}

    def stage_two(ctx: CallContext) -> Any:
        seen.update(chain=ctx.call.chain_id, stage=ctx.call.stage)
        return {"pages": ctx.payload["pages"]}

    assert Worker(db.dsn, "w2", stage_two, tools=["steady"]).run_once().status == "succeeded"
    assert seen == {"chain": first["id"], "stage": 1}


def test_no_next_stage_when_the_result_is_rejected(db, conn):
    # complete_and_enqueue.sql answers zero rows: the heartbeat had not seen the loss
    lost_unseen = enqueue(conn, "steady")

    def fenced(ctx: CallContext) -> Any:
        mark_terminal(conn, ctx.call.id, "running", ctx.fencing_token, "failed", force=True, reason="fence it out")
        return ctx.next_stage("steady", f"next-{uuid.uuid4().hex}", {}, result={"stage": 0})

    outcome = Worker(db.dsn, "w1", fenced).run_once()
    assert outcome.status == "result_rejected" and outcome.next_stage_id is None
    assert children(conn, lost_unseen["id"]) == []
    [details] = rejections(conn, lost_unseen["id"])
    assert details["reason"] == "zero_rows" and details["next_stage"]["tool"] == "steady"
    assert details["result_sha256"] == hashlib.sha256(canonical({"stage": 0})).hexdigest()

    # the loss known before the write: nothing is sent at all
    lost_seen = enqueue(conn, "search")

    def fenced_then_waits(ctx: CallContext) -> Any:
        mark_terminal(conn, ctx.call.id, "running", ctx.fencing_token, "failed", force=True, reason="fence it out")
        wait_until(lambda: ctx.lease_lost, what="the heartbeat to find the lease lost")
        return ctx.next_stage("search", f"next-{uuid.uuid4().hex}", {}, result={"stage": 0})

    outcome = Worker(db.dsn, "w1", fenced_then_waits).run_once()
    assert outcome.status == "result_rejected"
    assert children(conn, lost_seen["id"]) == []
    [details] = rejections(conn, lost_seen["id"])
    assert (details["reason"], details["written"]) == ("lease_lost", False) and details["result_size"] == 11


def test_a_late_next_stage_is_never_enqueued(db, conn):
    call = enqueue(conn, "search", deadline_at=db_now(conn) + timedelta(seconds=1))

    def handler(ctx: CallContext) -> Any:
        time.sleep(2.0)
        return ctx.next_stage("search", f"next-{uuid.uuid4().hex}", {}, result={"late": 1})

    assert Worker(db.dsn, "w1", handler).run_once().status == "deadline_passed"
    details = wait_until(lambda: rejections(conn, call["id"]), what="the late result's rejection")[0]
    assert details["reason"] == "deadline_passed" and details["next_stage"]["tool"] == "search"
    assert children(conn, call["id"]) == []


def test_a_chain_runs_stage_after_stage_in_the_run_loop(db, conn):
    first = enqueue(conn, "search", payload={"stage": 0, "last": 2})

    def handler(ctx: CallContext) -> Any:
        stage = ctx.payload["stage"]
        if stage < ctx.payload["last"]:
            return ctx.next_stage("search", f"{ctx.idempotency_key}:{stage + 1}", {**ctx.payload, "stage": stage + 1},
                                  result={"stage": stage})
        return {"stage": stage, "done": True}

    worker = Worker(db.dsn, "w1", handler, poll_interval=0.05, concurrency=2)
    assert worker.run(threading.Event(), max_calls=3, drain=True) == 3
    chain = list(conn.execute("select stage, state, result from tool_jobs where chain_id = %s order by stage",
                              (first["id"],)))
    assert [(c["stage"], c["state"]) for c in chain] == [(0, "succeeded"), (1, "succeeded"), (2, "succeeded")]
