"""Chains as the console reads them (queries/views/chain.sql and chains.sql): a chain made by the
protocol itself (complete_and_enqueue.sql) read back as one story -- every stage in order, who held
it, when it started and ended, the slowest stage, where the deadline ran out -- and the Chains
screen's list, newest first, lone calls left out unless asked for."""

from __future__ import annotations

import itertools
import time
import uuid
from datetime import timedelta

from psycopg.types.json import Jsonb

from console.db import chains
from console.db.connect import run_one
from console.operator.present.chains import where_the_time_went
from tests.helpers import SLOW, claim, enqueue, report_unknown, start_side_effect, sweep

TOOLS = {"export": ("read_only", SLOW), "pay": ("mutating_unverifiable", SLOW)}


def db_now(conn):
    return conn.execute("select now() as t").fetchone()["t"]


def complete_and_enqueue(conn, call: dict, worker: str, next_key: str, next_tool: str = "export") -> uuid.UUID:
    row = run_one(conn, "worker/complete_and_enqueue", job_id=call["id"], worker_id=worker,
                  fencing_token=call["fencing_token"], result=Jsonb({"ok": True}), next_tool=next_tool,
                  next_idempotency_key=next_key, next_payload=Jsonb({"key": next_key}))
    assert row is not None and row["next_id"] is not None, row
    return row["next_id"]


def three_stages(conn, *, deadline_in: float = 600, key: str = "rep:1") -> list[uuid.UUID]:
    """Stage 1 and 2 done (stage 1 the slower), stage 3 running; each next stage enqueued only as
    the one before it completed."""
    first = enqueue(conn, "export", f"{key}:stage:1", deadline_at=db_now(conn) + timedelta(seconds=deadline_in))
    ids = [first["id"]]
    for n, worker in enumerate(("w-a", "w-b", "w-c"), start=1):
        call = claim(conn, worker, ["export"])
        assert call is not None and call["id"] == ids[-1]
        if n == 3:
            break
        time.sleep(0.4 if n == 1 else 0.05)
        ids.append(complete_and_enqueue(conn, call, worker, f"{key}:stage:{n + 1}"))
    return ids


def test_one_chain_is_read_in_stage_order_with_its_owners_times_and_slowest_stage(conn):
    ids = three_stages(conn)
    chain = chains.chain_of(conn, ids[1])
    assert chain is not None and chain.chain_id == ids[0] and chain.calls == 3
    stages = chain.stages
    assert [s.id for s in stages] == ids and [s.stage for s in stages] == [0, 1, 2]
    assert [s.owners for s in stages] == [["w-a"], ["w-b"], ["w-c"]]
    assert [s.state for s in stages] == ["succeeded", "succeeded", "running"]
    assert [s.this_call for s in stages] == [False, True, False]
    for before, after in itertools.pairwise(stages):
        assert before.finished_at is not None and after.created_at >= before.finished_at, "enqueued once it was done"
        assert after.started_at is not None and after.started_at >= after.created_at
    now = chain.db_now
    assert chain.outcome == "running" and chain.current is not None and chain.current.id == ids[2]
    slowest = chain.slowest(now)
    assert slowest is not None and slowest.id == ids[0], [s.ran(now) for s in stages]
    assert chain.stem == "rep:1:stage" and chain.stage_count == 3 and not chain.lone
    assert chain.deadline_at == stages[0].deadline_at == stages[2].deadline_at, "the children carry its deadline"
    left_at_start = [(chain.deadline_at - s.started_at).total_seconds() for s in stages]
    assert left_at_start == sorted(left_at_start, reverse=True) and 590 < left_at_start[0] <= 600
    assert chains.chain_of(conn, uuid.uuid4()) is None, "no such call"


def test_the_list_is_newest_first_and_leaves_lone_calls_out_unless_asked(conn):
    older = three_stages(conn, key="rep:old")
    lone = enqueue(conn, "pay", "alone:1")  # nobody claims it: the claims below are of "export"
    newer = three_stages(conn, key="rep:new")
    listed, _now = chains.chains(conn)
    assert [c.chain_id for c in listed] == [newer[0], older[0]]
    assert [len(c.stages) for c in listed] == [3, 3] and listed[0].stem == "rep:new:stage"
    everything, _now = chains.chains(conn, include_lone=True)
    assert [c.chain_id for c in everything] == [newer[0], lone["id"], older[0]]
    assert everything[1].lone and everything[1].outcome == "running"
    assert chains.chains(conn, limit=1)[0][0].chain_id == newer[0]


def test_the_story_says_the_deadline_ran_out_while_the_second_stage_ran(conn):
    first = enqueue(conn, "export", "night:1:stage:1", deadline_at=db_now(conn) + timedelta(seconds=1.5))
    call = claim(conn, "w-a", ["export"])
    second_id = complete_and_enqueue(conn, call, "w-a", "night:1:stage:2")
    second = claim(conn, "w-b", ["export"])
    assert second is not None and second["id"] == second_id
    assert second["lease_until"] <= db_now(conn) + timedelta(seconds=1.5), "no lease outlives the deadline"
    time.sleep(1.7)
    swept = {r["id"]: r for r in sweep(conn)}
    assert swept[second_id]["state_to"] == "failed", swept
    chain = chains.chain_of(conn, first["id"])
    assert chain is not None and chain.outcome == "failed" and chain.over
    now = chain.db_now
    stage, how = chain.deadline_passed_in(now) or (None, None)
    assert stage is not None and stage.id == second_id and how == "running"
    left = chain.deadline_left(now)
    assert left is not None and left < 0, "it ended after its deadline"
    words = where_the_time_went(chain, now).plain
    assert "the deadline passed while stage 1 ran" in words, words
    assert "stage 1 failed: lease expired after the deadline" in words, words


def test_a_chain_whose_call_waits_for_a_human_needs_one_and_stops_ticking(conn):
    first = enqueue(conn, "export", "pay:9:stage:1")
    call = claim(conn, "w-a", ["export"])
    payment_id = complete_and_enqueue(conn, call, "w-a", "pay:9:stage:2", next_tool="pay")
    payment = claim(conn, "w-p", ["pay"])
    assert payment is not None and payment["id"] == payment_id
    start_side_effect(conn, payment, "w-p")
    report_unknown(conn, payment, "w-p")
    chain = chains.chain_of(conn, first["id"])
    assert chain is not None and chain.outcome == "needs_human" and not chain.over
    assert chain.current is not None and chain.current.id == payment_id
    waiting = chain.stages[1]
    assert waiting.left_running_at is not None, "when it stopped running, from the history"
    later = chain.db_now + timedelta(minutes=5)
    assert waiting.ran(later) == waiting.ran(chain.db_now), "a parked call does not run on"
