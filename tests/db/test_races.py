"""Races between workers and operators.

Two styles, as PostgreSQL's own isolation specs do it:
* step by step: session A holds the row lock in an open transaction, session B is *seen*
  blocked on it in pg_stat_activity, then A commits and we read what B got (EvalPlanQual
  re-checks B's guard against the new row);
* real threads released together by a barrier, many times over, checking invariants.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from console.db.connect import Conn
from tests.helpers import (
    SLOW_30,
    Step,
    approve,
    cancel,
    claim,
    complete,
    enqueue,
    events,
    heartbeat,
    job,
    mark_terminal,
    report_unknown,
    start_side_effect,
    wait_until,
)

TOOLS = {"search": ("read_only", SLOW_30), "pay": ("mutating_unverifiable", SLOW_30)}


@pytest.fixture
def obs(conn):
    """The observer's session: it sets each race up and sees the other sessions blocked."""
    return conn


def holding(db) -> Conn:
    """A connection whose statements stay in an open transaction until commit() (the end of its
    `with` block commits and closes it)."""
    return db.connect(autocommit=False)


# ------------------------------------------------------------------ step by step


def test_step_complete_holds_lock_then_cancel_is_refused_with_the_truth(db, obs):
    e = enqueue(obs, "search")
    c = claim(obs, "w1")
    with holding(db) as worker:
        assert complete(worker, c, "w1") is not None  # not committed yet
        op = Step(db, lambda conn: cancel(conn, e["id"], "running", c["fencing_token"])).start_and_wait_blocked(obs)
    assert op.finish() is None, "the guard re-checked the committed row and refused"
    j = job(obs, e["id"])
    assert j["state"] == "succeeded" and j["completed_despite_cancel"] is False
    journal = [ev for ev in events(obs, e["id"]) if ev["kind"] == "operator_cancel"][-1]
    assert journal["details"]["outcome"] == "refused"
    assert journal["state_from"] == "succeeded", "the journal records the state that won"


def test_step_cancel_holds_lock_then_result_is_completed_despite_cancel(db, obs):
    e = enqueue(obs, "search")
    c = claim(obs, "w1")
    with holding(db) as operator:
        assert cancel(operator, e["id"], "running", c["fencing_token"])["state"] == "cancel_requested"
        w = Step(db, lambda conn: complete(conn, c, "w1")).start_and_wait_blocked(obs)
    row = w.finish()
    assert row["state"] == "succeeded" and row["completed_despite_cancel"] is True


def test_step_cancel_holds_lock_then_heartbeat_hears_it(db, obs):
    e = enqueue(obs, "search")
    c = claim(obs, "w1")
    with holding(db) as operator:
        cancel(operator, e["id"], "running", c["fencing_token"])
        hb = Step(db, lambda conn: heartbeat(conn, c, "w1")).start_and_wait_blocked(obs)
    assert hb.finish()["cancel_requested"] is True


def _outcome_unknown(conn: Conn) -> dict:
    e = enqueue(conn, "pay", agent_id="agent-1")
    c = claim(conn, "w1")
    start_side_effect(conn, c, "w1")
    report_unknown(conn, c, "w1")
    return e


def test_step_approve_holds_lock_claim_skips_then_takes_it(db, obs):
    e = _outcome_unknown(obs)
    with holding(db) as approver:
        assert approve(approver, e["id"], "outcome_unknown", 1, operator="bob")["state"] == "queued"
        assert claim(obs, "w2") is None, "uncommitted approval: nothing to claim, and claim does not wait"
    c2 = claim(obs, "w2")
    assert c2["id"] == e["id"] and c2["fencing_token"] == 2


def test_step_two_approvers_one_wins(db, obs):
    e = _outcome_unknown(obs)
    with holding(db) as first:
        assert approve(first, e["id"], "outcome_unknown", 1, operator="bob") is not None
        second = Step(db, lambda conn: approve(conn, e["id"], "outcome_unknown", 1, operator="carol"))
        second.start_and_wait_blocked(obs)
    assert second.finish() is None
    outcomes = [(ev["actor"], ev["details"]["outcome"]) for ev in events(obs, e["id"])
                if ev["kind"] == "operator_approve_retry"]
    assert sorted(outcomes) == [("bob", "applied"), ("carol", "refused")]


def test_step_claimed_after_approval_then_mark_terminal_with_old_token_is_refused(db, obs):
    e = _outcome_unknown(obs)
    approve(obs, e["id"], "outcome_unknown", 1, operator="bob")
    with holding(db) as claimer:
        assert claim(claimer, "w2")["fencing_token"] == 2
        op = Step(db, lambda conn: mark_terminal(conn, e["id"], "queued", 1, "failed")).start_and_wait_blocked(obs)
    assert op.finish() is None
    assert job(obs, e["id"])["state"] == "running"


# ------------------------------------------------------------------ real threads


def test_threads_cancel_vs_complete_invariants(db, obs):
    rounds = 40
    with db.connect() as wconn, db.connect() as oconn, ThreadPoolExecutor(2) as pool:
        for _ in range(rounds):
            e = enqueue(obs, "search")
            c = claim(obs, "w1")
            barrier = threading.Barrier(2)

            def do_complete(c=c, barrier=barrier):
                barrier.wait()
                return complete(wconn, c, "w1")

            def do_cancel(e=e, c=c, barrier=barrier):
                barrier.wait()
                return cancel(oconn, e["id"], "running", c["fencing_token"])

            done, cancelled = pool.submit(do_complete), pool.submit(do_cancel)
            done_row, cancel_row = done.result(), cancelled.result()
            j = job(obs, e["id"])
            assert done_row is not None, "the owner's result always lands: cancel is only a request"
            assert j["state"] == "succeeded"
            assert j["completed_despite_cancel"] is (cancel_row is not None)


def test_threads_approve_vs_claim_exactly_one_owner(db, obs):
    for _ in range(15):
        e = _outcome_unknown(obs)
        stop = threading.Event()
        got: list[tuple[str, dict]] = []
        lock = threading.Lock()

        def claimer(name, stop=stop, lock=lock, got=got):
            with db.connect() as conn:
                while not stop.is_set():
                    row = claim(conn, name, ["pay"])
                    if row:
                        with lock:
                            got.append((name, row))

        threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        approve(obs, e["id"], "outcome_unknown", 1, operator="bob")
        wait_until(lambda got=got: got, timeout=10, what="a claim after the approval")
        stop.set()
        for t in threads:
            t.join()
        assert len(got) == 1, "exactly one worker owns the approved retry"
        owner, row = got[0]
        assert row["id"] == e["id"] and row["fencing_token"] == 2
        assert job(obs, e["id"])["owner_id"] == owner
