"""Chains and deadlines, held by the database whatever SQL a client sends (migration 0014):
a child inherits its parent's chain and deadline; no lease outlives the deadline; a cancel reaches
the chain; a verifiable request is checked before it is repeated, and never silently "not done"."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from console.db.connect import run, run_one
from tests import helpers as h

WORKER = "lc_chain_worker"
LOGINS = {WORKER: "leasectl_worker", WORKER + "_b": "leasectl_worker"}
TOOLS = {"search": ("read_only", h.FAST), "erp": ("mutating_verifiable", {**h.FAST, "max_attempts": 2})}


@pytest.fixture
def w(db, logins):
    """A session as the worker login WORKER (a member of leasectl_worker), beside the owner's `conn`."""
    with h.as_login(db, WORKER) as session:
        yield session


def now(conn) -> object:
    return conn.execute("select now() as t").fetchone()["t"]


def child(conn, parent: dict, tool: str = "search", **kw) -> dict | None:
    return run_one(conn, "worker/enqueue", tool=tool, idempotency_key=f"k-{uuid.uuid4().hex}",
                   payload=Jsonb({"n": 2}), agent_id=None, session_id=None, deadline_at=kw.pop("deadline_at", None),
                   model=None, provider=None, parent_id=parent["id"], **kw)


def record_check(conn, call: dict, worker: str, found: str, details: dict | None = None) -> dict | None:
    return run_one(conn, "worker/record_check", job_id=call["id"], worker_id=worker,
                   fencing_token=call["fencing_token"], found=found, details=Jsonb(details or {}))


# ----------------------------------------------------------------------------- chains


def test_a_first_call_is_a_chain_of_one_and_its_child_is_the_next_stage(conn):
    first = h.enqueue(conn, "search", deadline_at=now(conn) + timedelta(minutes=5))
    assert h.claim(conn, "w1", ["search"])["id"] == first["id"]
    second = child(conn, first)
    a, b = (conn.execute("select * from tool_jobs where id = %s", (c["id"],)).fetchone() for c in (first, second))
    assert (a["chain_id"], a["stage"], a["parent_id"]) == (first["id"], 0, None)
    assert (b["chain_id"], b["stage"], b["parent_id"]) == (first["id"], 1, first["id"])
    assert b["deadline_at"] == a["deadline_at"], "a child without a deadline of its own gets its parent's"


def test_a_plain_insert_cannot_give_a_child_a_later_deadline_or_another_chain(conn, w):
    deadline = now(conn) + timedelta(minutes=1)
    parent = h.enqueue(conn, "search", deadline_at=deadline)
    assert h.claim(w, WORKER, ["search"])["id"] == parent["id"]
    made = w.execute(
        "insert into tool_jobs (idempotency_key, payload, tool, parent_id, chain_id, stage, deadline_at) "
        "values (%s, '{}', 'search', %s, gen_random_uuid(), 42, now() + interval '1 day') "
        "returning id, chain_id, stage, deadline_at",
        (f"k-{uuid.uuid4().hex}", parent["id"])).fetchone()
    assert (made["chain_id"], made["stage"]) == (parent["id"], 1), "the database sets chain and stage"
    assert made["deadline_at"] == deadline, "the earlier of the one asked for and the parent's"


def test_a_child_of_a_parent_that_is_not_running_or_succeeded_is_refused(conn):
    parent = h.enqueue(conn, "search")
    assert child(conn, parent) is None, "a queued parent makes no call: enqueue.sql answers zero rows"
    with pytest.raises(psycopg.Error) as refused:
        conn.execute("insert into tool_jobs (idempotency_key, payload, tool, parent_id) values (%s, '{}', 'search', %s)",
                     (f"k-{uuid.uuid4().hex}", parent["id"]))
    assert refused.value.sqlstate == "LCS13"


def test_chain_membership_never_changes(conn):
    first = h.enqueue(conn, "search")
    for column, value in (("chain_id", uuid.uuid4()), ("stage", 3), ("parent_id", uuid.uuid4())):
        with pytest.raises(psycopg.Error) as refused:
            conn.execute(f"update tool_jobs set {column} = %s where id = %s", (value, first["id"]))
        assert refused.value.sqlstate == "LCS05", column


# ----------------------------------------------------------------------------- a cancel reaches the chain


def test_no_stage_is_enqueued_after_a_cancel_of_the_chain(conn):
    first = h.enqueue(conn, "search")
    c = h.claim(conn, "w1", ["search"])
    assert h.cancel(conn, first["id"], "running", c["fencing_token"]) is not None
    assert child(conn, first) is None, "enqueue.sql: zero rows"
    with pytest.raises(psycopg.Error) as refused:
        conn.execute("insert into tool_jobs (idempotency_key, payload, tool, parent_id) values (%s, '{}', 'search', %s)",
                     (f"k-{uuid.uuid4().hex}", first["id"]))
    assert refused.value.sqlstate == "LCS13"
    # complete_and_enqueue: the stage's own result stands (completed despite the cancel), no next stage
    done = run_one(conn, "worker/complete_and_enqueue", job_id=c["id"], worker_id="w1",
                   fencing_token=c["fencing_token"], result=Jsonb({"ok": 1}), next_tool="search",
                   next_idempotency_key=f"k-{uuid.uuid4().hex}", next_payload=Jsonb({}))
    assert done is not None and done["completed_despite_cancel"] and done["next_id"] is None


def test_a_cancel_stops_the_retries_of_every_call_of_the_chain(conn):
    first = h.enqueue(conn, "search")
    c1 = h.claim(conn, "w1", ["search"])
    second = child(conn, first)
    c2 = h.claim(conn, "w2", ["search"])
    assert c2["id"] == second["id"]
    assert h.cancel(conn, first["id"], "running", c1["fencing_token"]) is not None
    failed = h.fail(conn, c2, "w2", retryable=True)
    assert failed["state"] == "failed" and "cancel request" in failed["terminal_reason"]
    with pytest.raises(psycopg.Error) as refused:  # a requeue by hand
        conn.execute("update tool_jobs set state = 'queued', owner_id = null, lease_until = null where id = %s",
                     (first["id"],))
    assert refused.value.sqlstate in ("LCS13", "LCS01")


def test_a_queued_stage_of_a_cancelled_chain_is_never_claimed_and_the_sweep_cancels_it(conn):
    first = h.enqueue(conn, "search")
    c1 = h.claim(conn, "w1", ["search"])
    second = child(conn, first)
    assert h.cancel(conn, first["id"], "running", c1["fencing_token"]) is not None
    assert h.claim(conn, "w2", ["search"]) is None
    swept = {r["id"]: r for r in h.sweep(conn)}
    assert swept[second["id"]]["state_to"] == "cancelled"


def test_two_workers_racing_complete_and_enqueue_make_one_next_stage(db, conn):
    first = h.enqueue(conn, "search")
    c = h.claim(conn, "w1", ["search"])
    h.expire_lease(conn, c["id"])
    reclaimed = h.claim(conn, "w2", ["search"])
    assert reclaimed["id"] == first["id"]
    key = f"next-{uuid.uuid4().hex}"
    answers: dict[str, dict | None] = {}
    barrier = threading.Barrier(2)

    def finish(worker: str, token: int) -> None:
        with db.connect() as mine:
            barrier.wait()
            answers[worker] = run_one(mine, "worker/complete_and_enqueue", job_id=first["id"], worker_id=worker,
                                      fencing_token=token, result=Jsonb({"by": worker}), next_tool="search",
                                      next_idempotency_key=key, next_payload=Jsonb({}))

    threads = [threading.Thread(target=finish, args=("w1", c["fencing_token"])),
               threading.Thread(target=finish, args=("w2", reclaimed["fencing_token"]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert answers["w1"] is None, "the stale owner's result is rejected and nothing is enqueued"
    assert answers["w2"] is not None and answers["w2"]["next_id"] is not None
    stages = conn.execute("select id, stage from tool_jobs where chain_id = %s order by stage", (first["id"],)).fetchall()
    assert [s["stage"] for s in stages] == [0, 1]


# ----------------------------------------------------------------------------- deadlines


def test_no_lease_outlives_the_deadline_even_a_hand_written_one(conn, w):
    h.register_tool(conn, "slow", "read_only", lease_seconds=60, heartbeat_seconds=10, missed_heartbeats=2,
                  jitter_seconds=5)
    h.enqueue(conn, "slow", deadline_at=now(conn) + timedelta(seconds=20))
    c = h.claim(w, WORKER, ["slow"])
    assert c["lease_until"] == c["deadline_at"], "a 60 s lease is cut at the deadline, 20 s away"
    beat = h.heartbeat(w, c, WORKER)
    assert beat["lease_until"] == c["deadline_at"]
    with pytest.raises(psycopg.Error) as refused:
        w.execute("update tool_jobs set lease_until = deadline_at + interval '1 hour' where id = %s", (c["id"],))
    assert refused.value.sqlstate == "23514"


def test_a_call_with_too_little_time_left_is_not_started_and_the_sweep_says_why(conn):
    assert h.register_tool(conn, "search", "read_only", **h.FAST, min_time_left_seconds=60)["min_time_left_seconds"] == 60
    late = h.enqueue(conn, "search", deadline_at=now(conn) + timedelta(seconds=30))
    assert h.claim(conn, "w1", ["search"]) is None
    swept = {r["id"]: r for r in h.sweep(conn)}
    assert swept[late["id"]]["state_to"] == "failed"
    assert "not enough time left" in swept[late["id"]]["reason"]


def test_a_running_call_past_its_deadline_reads_past_deadline(conn):
    h.enqueue(conn, "search", deadline_at=now(conn) + timedelta(seconds=1))
    c = h.claim(conn, "w1", ["search"])
    time.sleep(1.2)
    health = conn.execute(
        "select leasectl_job_health(state, lease_until, heartbeat_at, cancel_requested_at, claimed_at, now(), now(),"
        " now(), false, now(), deadline_at) as h from tool_jobs where id = %s", (c["id"],)).fetchone()["h"]
    assert health == "past_deadline"


# ----------------------------------------------------------------------------- verifiable side effects


def _verifiable_call_whose_request_went_out(conn) -> tuple[dict, dict]:
    """erp call: attempt 1 started a request and lost its answer; attempt 2 holds it now."""
    h.enqueue(conn, "erp")
    first = h.claim(conn, "w1", ["erp"])
    assert h.start_side_effect(conn, first, "w1", "req-1") is not None
    h.expire_lease(conn, first["id"])
    second = h.claim(conn, "w2", ["erp"])
    assert second["id"] == first["id"] and second["external_request_id"] == "req-1"
    return first, second


def test_a_repeat_of_a_verifiable_request_waits_for_a_check(conn):
    _, second = _verifiable_call_whose_request_went_out(conn)
    assert h.start_side_effect(conn, second, "w2", "req-2") is None, "zero rows: ask the service first"
    with pytest.raises(psycopg.Error) as refused:  # the same start written by hand
        conn.execute("update tool_jobs set side_effect_started_at = now(), external_request_id = 'req-2' "
                     "where id = %s", (second["id"],))
    assert refused.value.sqlstate == "LCS14"
    checked = record_check(conn, second, "w2", "not_done", {"erp": "no such order"})
    assert checked["check_found"] == "not_done"
    assert h.start_side_effect(conn, second, "w2", "req-2") is not None
    assert h.start_side_effect(conn, second, "w2", "req-3") is None, "a second start needs a second check"
    checks = [e for e in h.events(conn, second["id"]) if e["kind"] == "side_effect_checked"]
    assert [(e["details"]["found"], e["details"]["external_request_id"], e["actor"]) for e in checks] == [
        ("not_done", "req-1", "w2")]


def test_a_check_that_cannot_tell_sends_the_call_to_a_human(conn):
    _, second = _verifiable_call_whose_request_went_out(conn)
    assert record_check(conn, second, "w2", "unknown")["state"] == "outcome_unknown"


def test_a_check_is_recorded_only_by_the_owner_under_its_token(conn, w):
    first, second = _verifiable_call_whose_request_went_out(conn)
    assert record_check(conn, first, "w1", "not_done") is None, "the old owner: zero rows"
    with pytest.raises(psycopg.Error) as refused:
        conn.execute("update tool_jobs set check_found = 'not_done', check_token = fencing_token - 1, "
                     "checked_at = now() where id = %s", (second["id"],))
    assert refused.value.sqlstate == "LCS14"
    with pytest.raises(psycopg.Error) as forged:
        w.execute("insert into job_events (job_id, kind, actor, fencing_token, details) "
                  "values (%s, 'side_effect_checked', %s, %s, '{\"found\": \"not_done\"}')",
                  (second["id"], WORKER, second["fencing_token"]))
    assert forged.value.sqlstate == "LCH02", "the database alone journals a check"


def test_a_verifiable_call_out_of_attempts_after_its_request_went_out_is_unknown_not_failed(conn):
    _, second = _verifiable_call_whose_request_went_out(conn)  # max_attempts = 2: this is the last
    ended = h.fail(conn, second, "w2", retryable=True)
    assert ended["state"] == "outcome_unknown"
    after = h.job(conn, second["id"])
    assert after["finished_at"] is None and after["error"]["unchecked_request"] == "req-1"


def test_a_verifiable_call_whose_request_went_out_is_unknown_when_cancelled_or_swept(conn):
    h.enqueue(conn, "erp", deadline_at=now(conn) + timedelta(seconds=2))
    c = h.claim(conn, "w1", ["erp"])
    h.start_side_effect(conn, c, "w1", "req-9")
    h.cancel(conn, c["id"], "running", c["fencing_token"])
    h.expire_lease(conn, c["id"])
    swept = {r["id"]: r for r in h.sweep(conn)}
    assert swept[c["id"]]["state_to"] == "outcome_unknown", "a cancel pending does not make it 'not done'"


def test_an_operators_mark_terminal_is_a_human_decision_and_stands(conn):
    _, second = _verifiable_call_whose_request_went_out(conn)
    h.expire_lease(conn, second["id"])
    marked = h.mark_terminal(conn, second["id"], "running", second["fencing_token"], "failed")
    assert marked is not None and h.job(conn, second["id"])["state"] == "failed"


def test_a_check_after_an_approved_retry_is_asked_again(conn):
    _, second = _verifiable_call_whose_request_went_out(conn)
    assert record_check(conn, second, "w2", "unknown")["state"] == "outcome_unknown"
    h.approve(conn, second["id"], "outcome_unknown", second["fencing_token"], operator="alice")
    third = h.claim(conn, "w3", ["erp"])
    assert third["id"] == second["id"]
    assert h.start_side_effect(conn, third, "w3", "req-4") is None, "the old check was under another token"
    record_check(conn, third, "w3", "not_done")
    assert h.start_side_effect(conn, third, "w3", "req-4") is not None
    assert h.complete(conn, third, "w3") is not None
    assert run(conn, "supervisor/sweep") == []


# ----------------------------------------------------------------------------- leasectl cancel --chain


def test_cancel_chain_asks_every_unfinished_call_of_the_chain_like_a_bulk_action(db, conn):
    from tests.helpers import cli_invoker

    first = h.enqueue(conn, "search")
    c1 = h.claim(conn, "w1", ["search"])
    done = run_one(conn, "worker/complete_and_enqueue", job_id=c1["id"], worker_id="w1",
                   fencing_token=c1["fencing_token"], result=Jsonb({"ok": 1}), next_tool="search",
                   next_idempotency_key=f"k-{uuid.uuid4().hex}", next_payload=Jsonb({}))
    second = h.claim(conn, "w2", ["search"])
    assert second["id"] == done["next_id"]
    third = child(conn, second)
    invoke = cli_invoker(db.dsn, "alice")
    refused = invoke("cancel", str(third["id"]), "--chain", "--reason", "user left", input="no\n")
    assert refused.exit_code == 2, refused.output
    assert h.job(conn, third["id"])["state"] == "queued", "not confirmed: nothing changed"
    result = invoke("cancel", str(third["id"])[:8], "--chain", "--reason", "user left", "--yes")
    assert result.exit_code == 3, result.output  # the finished first stage is skipped, and says so
    states = {r["id"]: r["state"] for r in conn.execute("select id, state from tool_jobs where chain_id = %s",
                                                         (first["id"],))}
    assert states == {first["id"]: "succeeded", second["id"]: "cancel_requested", third["id"]: "cancelled"}
    assert child(conn, second) is None, "and no later stage starts"
    both = invoke("cancel", str(third["id"]), "--chain", "--where", "state:queued", "--reason", "x", "--yes")
    assert both.exit_code == 2 and "--chain" in both.output


# ----------------------------------------------------------------------------- the fourth walk


def test_a_call_is_never_born_with_a_check(conn):
    made = conn.execute("insert into tool_jobs (idempotency_key, payload, tool, check_found, check_token, checked_at) "
                        "values (%s, '{}', 'erp', 'not_done', 2, 'infinity') returning check_found, check_token, "
                        "checked_at", (f"k-{uuid.uuid4().hex}",)).fetchone()
    assert (made["check_found"], made["check_token"], made["checked_at"]) == (None, None, None)


def test_a_check_is_spent_by_the_start_it_allowed_even_in_one_transaction(db, conn):
    _, second = _verifiable_call_whose_request_went_out(conn)
    with db.connect() as tx, tx.transaction():
        assert record_check(tx, second, "w2", "not_done") is not None
        assert h.start_side_effect(tx, second, "w2", "req-2") is not None
        assert h.start_side_effect(tx, second, "w2", "req-3") is None, "the second request needs a second check"
    ended = h.fail(conn, second, "w2", retryable=False)
    assert ended["state"] == "outcome_unknown", "req-2 went out unchecked: not 'failed'"


def test_a_start_is_dated_now_whatever_the_client_writes(conn, w):
    h.enqueue(conn, "search")
    c = h.claim(w, WORKER, ["search"])
    started = w.execute("update tool_jobs set side_effect_started_at = now() - interval '1 hour', "
                        "external_request_id = 'r-1' where id = %s returning side_effect_started_at, now() as t",
                        (c["id"],)).fetchone()
    assert started["side_effect_started_at"] == started["t"], "a backdated start would count an older check"


def test_a_next_stage_key_taken_by_another_call_is_not_handed_over(conn):
    first = h.enqueue(conn, "search")
    c = h.claim(conn, "w1", ["search"])
    assert c["id"] == first["id"]
    h.enqueue(conn, "search", key="report:9:stage:2")  # taken first, by a call of no chain
    done = run_one(conn, "worker/complete_and_enqueue", job_id=c["id"], worker_id="w1",
                   fencing_token=c["fencing_token"], result=Jsonb({"ok": 1}), next_tool="search",
                   next_idempotency_key="report:9:stage:2", next_payload=Jsonb({}))
    assert done is not None and done["next_id"] is None


def test_a_queued_verifiable_call_cancelled_with_an_unchecked_request_waits_for_a_human_and_verify_holds(db, conn):
    from tests.helpers import cli_invoker

    h.enqueue(conn, "erp")
    c = h.claim(conn, "w1", ["erp"])
    h.start_side_effect(conn, c, "w1", "req-q")
    assert h.fail(conn, c, "w1", retryable=True)["state"] == "queued", "attempts left: back in the queue"
    h.cancel(conn, c["id"], "queued", c["fencing_token"])
    assert h.job(conn, c["id"])["state"] == "outcome_unknown"
    assert cli_invoker(db.dsn, "alice")("audit", "verify").exit_code == 0


def test_a_worker_makes_the_next_stage_of_its_own_call_only(db, conn, w):
    """Before: another login enqueued a payment under the guessable key of a worker's next stage,
    and the owner's complete_and_enqueue.sql handed it back as that stage."""
    parent = h.enqueue(conn, "search")
    with h.as_login(db, WORKER + "_b") as other:
        assert h.claim(w, WORKER, ["search"])["id"] == parent["id"]
        squat = run_one(other, "worker/enqueue", tool="search", idempotency_key="next:1", payload=Jsonb({}),
                        agent_id=None, session_id=None, deadline_at=None, model=None, provider=None,
                        parent_id=parent["id"])
        assert squat is None, "zero rows: not its call"
        with pytest.raises(psycopg.Error) as refused:
            other.execute("insert into tool_jobs (idempotency_key, payload, tool, parent_id) "
                          "values ('next:1', '{}', 'search', %s)", (parent["id"],))
        assert refused.value.sqlstate == "LCS13"


def test_a_start_with_no_request_id_still_needs_a_check_before_the_next(conn):
    h.enqueue(conn, "erp")
    c = h.claim(conn, "w1", ["erp"])
    assert h.start_side_effect(conn, c, "w1", None) is not None  # a start that names no request
    assert h.start_side_effect(conn, c, "w1", "req-2") is None, "a second start needs a check all the same"


def test_a_check_written_without_record_check_is_journaled_all_the_same(conn, w):
    """Before: naming check_found alone (checked_at stamped by the guard) left no side_effect_checked row."""
    h.enqueue(conn, "erp")
    c = h.claim(w, WORKER, ["erp"])
    w.execute("update tool_jobs set check_found = 'not_done', check_token = fencing_token where id = %s",
              (c["id"],))
    checks = [e for e in h.events(conn, c["id"]) if e["kind"] == "side_effect_checked"]
    assert len(checks) == 1 and checks[0]["details"]["found"] == "not_done" and checks[0]["actor"] == WORKER


def test_a_check_changed_twice_in_one_transaction_is_journaled_twice(conn, w):
    h.enqueue(conn, "erp")
    c = h.claim(w, WORKER, ["erp"])
    with w.transaction():
        for found in ("done", "not_done"):
            w.execute("update tool_jobs set check_found = %s, check_token = fencing_token where id = %s",
                      (found, c["id"]))
    found = [e["details"]["found"] for e in h.events(conn, c["id"]) if e["kind"] == "side_effect_checked"]
    assert found == ["done", "not_done"]


def test_an_unverifiable_request_goes_out_once_per_human_decision(conn):
    """Before: the owner started its payment again in a new transaction, under the same token."""
    h.register_tool(conn, "pay", "mutating_unverifiable", **h.FAST)
    h.enqueue(conn, "pay")
    c = h.claim(conn, "w1", ["pay"])
    assert h.start_side_effect(conn, c, "w1", "psp-1") is not None
    assert h.start_side_effect(conn, c, "w1", "psp-2") is None, "zero rows: a second payment needs a human"
    with pytest.raises(psycopg.Error) as refused:
        conn.execute("update tool_jobs set side_effect_started_at = clock_timestamp(), external_request_id = 'psp-3' "
                     "where id = %s", (c["id"],))
    assert refused.value.sqlstate == "LCS07"
