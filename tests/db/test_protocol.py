"""Every shared query: what it does, and what its zero rows mean."""

from __future__ import annotations

import uuid

import pytest

from console.db.connect import run_one
from tests.helpers import (
    FAST,
    approve,
    cancel,
    claim,
    complete,
    confirm_cancel,
    enqueue,
    events,
    expire_lease,
    fail,
    heartbeat,
    job,
    kinds,
    mark_terminal,
    register_tool,
    report_unknown,
    start_side_effect,
    sweep,
)

TOOLS = {"search": ("read_only", FAST), "erp": ("mutating_verifiable", FAST), "pay": ("mutating_unverifiable", FAST)}


# ------------------------------------------------------------------------------ enqueue


def test_enqueue_same_key_returns_first_call(conn):
    first = enqueue(conn, "search", "inv-7:search", {"q": "a"})
    again = enqueue(conn, "search", "inv-7:search", {"q": "DIFFERENT"})
    assert first["created"] is True and again["created"] is False
    assert again["id"] == first["id"]
    assert job(conn, first["id"])["payload"] == {"q": "a"}


def test_enqueue_same_key_after_finish_returns_finished_call(conn):
    first = enqueue(conn, "search", "k-done")
    c = claim(conn, "w1")
    complete(conn, c, "w1")
    again = enqueue(conn, "search", "k-done")
    assert again["id"] == first["id"] and again["state"] == "succeeded" and not again["created"]


def test_plain_insert_works_and_unknown_tool_is_registered_as_unverifiable(conn):
    conn.execute("insert into tool_jobs (idempotency_key, payload, tool) values ('plain', '{}', 'brand_new')")
    row = conn.execute("select state, fencing_token, payload_hash from tool_jobs where idempotency_key='plain'").fetchone()
    assert row["state"] == "queued" and row["fencing_token"] == 0 and len(row["payload_hash"]) == 64
    tool = conn.execute("select side_effect, auto_registered from tools where name='brand_new'").fetchone()
    assert tool == {"side_effect": "mutating_unverifiable", "auto_registered": True}


# ------------------------------------------------------------------------------ claim


def test_claim_zero_rows_when_nothing_queued(conn):
    assert claim(conn, "w1") is None
    enqueue(conn, "search")
    assert claim(conn, "w1", ["erp"]) is None, "tool filter must be honoured"
    assert claim(conn, "w1", ["search"]) is not None


def test_claim_grants_token_and_lease_from_tools(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    assert c["id"] == e["id"] and c["fencing_token"] == 1 and c["attempt"] == 1
    lease = (c["lease_until"] - c["db_now"]).total_seconds()
    assert lease == pytest.approx(FAST["lease_seconds"], abs=0.01)
    assert kinds(conn, e["id"]) == ["enqueued", "claimed"]


def test_claim_takes_oldest_queued_first(conn):
    a = enqueue(conn, "search")
    b = enqueue(conn, "search")
    assert claim(conn, "w1")["id"] == a["id"]
    assert claim(conn, "w2")["id"] == b["id"]


def test_claim_never_takes_a_live_lease_and_reclaims_an_expired_one(conn):
    e = enqueue(conn, "search")
    first = claim(conn, "w1")
    assert claim(conn, "w2") is None
    expire_lease(conn, e["id"])
    second = claim(conn, "w2")
    assert second["id"] == e["id"] and second["fencing_token"] == 2 and second["attempt"] == 2
    assert heartbeat(conn, first, "w1") is None
    assert kinds(conn, e["id"])[-1] == "reclaimed"


def test_reclaim_tells_the_new_owner_which_request_may_have_run(conn):
    e = enqueue(conn, "erp")
    c1 = claim(conn, "w1")
    start_side_effect(conn, c1, "w1", "ext-791")
    expire_lease(conn, e["id"])
    c2 = claim(conn, "w2")
    assert c2["side_effect_started_at"] is not None and c2["external_request_id"] == "ext-791"


def test_claim_never_reclaims_unverifiable_side_effect(conn):
    e = enqueue(conn, "pay")
    c1 = claim(conn, "w1")
    start_side_effect(conn, c1, "w1")
    expire_lease(conn, e["id"])
    assert claim(conn, "w2") is None
    swept = sweep(conn)
    assert [(s["id"], s["state_to"]) for s in swept] == [(e["id"], "outcome_unknown")]
    assert claim(conn, "w2") is None


def test_claim_skips_past_deadline_and_exhausted_attempts(conn):
    past = enqueue(conn, "search", deadline_at=conn.execute("select now() - interval '1 s' as t").fetchone()["t"])
    assert claim(conn, "w1") is None
    assert [s["state_to"] for s in sweep(conn)] == ["failed"]
    assert job(conn, past["id"])["terminal_reason"] == "deadline passed while queued"


# ------------------------------------------------------------------------------ heartbeat


def test_heartbeat_extends_only_for_current_owner_and_token(conn):
    enqueue(conn, "search")
    c = claim(conn, "w1")
    hb = heartbeat(conn, c, "w1")
    assert hb["lease_until"] > c["lease_until"] and hb["cancel_requested"] is False
    assert heartbeat(conn, c, "w2") is None, "another worker id"
    assert heartbeat(conn, c, "w1", token=c["fencing_token"] + 1) is None, "another token"
    assert heartbeat(conn, {"id": uuid.uuid4(), "fencing_token": 1}, "w1") is None, "no such call"


def test_heartbeat_is_not_logged(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    before = len(events(conn, e["id"]))
    for _ in range(5):
        assert heartbeat(conn, c, "w1")
    assert len(events(conn, e["id"])) == before


def test_heartbeat_zero_rows_after_lease_expired(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    expire_lease(conn, e["id"])
    assert heartbeat(conn, c, "w1") is None, "an expired lease cannot be revived, even by its owner"


def test_heartbeat_reports_cancel_request(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    cancel(conn, e["id"], "running", c["fencing_token"])
    assert heartbeat(conn, c, "w1")["cancel_requested"] is True


# ------------------------------------------------------------------------------ side effects


def test_start_side_effect_zero_rows_cases(conn):
    e = enqueue(conn, "pay")
    c = claim(conn, "w1")
    assert start_side_effect(conn, c, "w2") is None, "not the owner"
    assert start_side_effect(conn, c, "w1", token=99) is None, "stale token"
    cancel(conn, e["id"], "running", c["fencing_token"])
    assert start_side_effect(conn, c, "w1") is None, "cancel requested: do not send"
    assert job(conn, e["id"])["side_effect_started_at"] is None


def test_start_side_effect_refused_after_deadline(conn):
    deadline = conn.execute("select now() + interval '300 ms' as t").fetchone()["t"]
    e = enqueue(conn, "erp", deadline_at=deadline)
    c = claim(conn, "w1")
    conn.execute("select pg_sleep(0.35)")
    assert start_side_effect(conn, c, "w1") is None
    assert job(conn, e["id"])["side_effect_started_at"] is None


def test_start_side_effect_is_journaled_by_trigger(conn):
    e = enqueue(conn, "pay")
    c = claim(conn, "w1")
    assert start_side_effect(conn, c, "w1", "ext-9")["side_effect_started_at"] is not None
    ev = events(conn, e["id"])[-1]
    assert ev["kind"] == "tool_request_started" and ev["details"]["external_request_id"] == "ext-9"
    assert ev["actor"] == "w1" and ev["fencing_token"] == 1


# ------------------------------------------------------------------------------ complete / fail


def test_complete_zero_rows_for_stale_owner(conn):
    e = enqueue(conn, "search")
    c1 = claim(conn, "w1")
    expire_lease(conn, e["id"])
    c2 = claim(conn, "w2")
    assert complete(conn, c1, "w1", {"from": "w1"}) is None
    assert complete(conn, c2, "w2", {"from": "w2"})["state"] == "succeeded"
    assert job(conn, e["id"])["result"] == {"from": "w2"}
    assert complete(conn, c2, "w2", {"again": True}) is None, "a finished call takes no second result"


def test_fail_retryable_requeues_until_attempts_exhausted(conn):
    register_tool(conn, "flaky", "read_only", max_attempts=2, **FAST)
    e = enqueue(conn, "flaky")
    c = claim(conn, "w1")
    assert fail(conn, c, "w1")["state"] == "queued"
    assert job(conn, e["id"])["owner_id"] is None
    c = claim(conn, "w1")
    row = fail(conn, c, "w1")
    assert row["state"] == "failed" and row["terminal_reason"] == "attempts exhausted"
    assert fail(conn, c, "w1") is None


def test_fail_not_retryable_fails_for_good(conn):
    enqueue(conn, "search")
    c = claim(conn, "w1")
    row = fail(conn, c, "w1", retryable=False)
    assert row["state"] == "failed" and row["terminal_reason"] == "failed: not retryable"


def test_fail_zero_rows_for_stale_token(conn):
    enqueue(conn, "search")
    c = claim(conn, "w1")
    assert fail(conn, c, "w1", token=5) is None


# ------------------------------------------------------------------------------ cancel


def test_cancel_queued_is_cancelled_at_once(conn):
    e = enqueue(conn, "search")
    row = cancel(conn, e["id"], "queued", 0)
    assert row["state"] == "cancelled"
    assert job(conn, e["id"])["finished_at"] is not None


def test_cancel_running_is_only_requested_until_worker_confirms(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    row = cancel(conn, e["id"], "running", c["fencing_token"])
    assert row["state"] == "cancel_requested", "requested is not stopped"
    assert confirm_cancel(conn, c, "w2") is None
    assert confirm_cancel(conn, c, "w1")["state"] == "cancelled"


def test_confirm_cancel_zero_rows_without_request(conn):
    enqueue(conn, "search")
    c = claim(conn, "w1")
    assert confirm_cancel(conn, c, "w1") is None


def test_result_after_cancel_request_is_recorded_as_completed_despite_cancel(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    cancel(conn, e["id"], "running", c["fencing_token"])
    row = complete(conn, c, "w1")
    assert row["state"] == "succeeded" and row["completed_despite_cancel"] is True


def test_expired_cancel_request_is_swept_to_cancelled(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    cancel(conn, e["id"], "running", c["fencing_token"])
    expire_lease(conn, e["id"])
    assert [s["state_to"] for s in sweep(conn)] == ["cancelled"]


# ------------------------------------------------------------------------------ outcome unknown


def test_report_outcome_unknown_needs_a_started_side_effect(conn):
    e = enqueue(conn, "pay")
    c = claim(conn, "w1")
    assert report_unknown(conn, c, "w1") is None, "nothing started: an ordinary failure"
    start_side_effect(conn, c, "w1")
    assert report_unknown(conn, c, "w2") is None
    assert report_unknown(conn, c, "w1")["state"] == "outcome_unknown"
    assert claim(conn, "w2") is None, "nobody retries it on their own"
    assert job(conn, e["id"])["health"] == "outcome_unknown"


def test_approve_retry_by_a_human_requeues_with_one_more_attempt(conn):
    register_tool(conn, "pay1", "mutating_unverifiable", max_attempts=1, **FAST)
    e = enqueue(conn, "pay1")
    c = claim(conn, "w1")
    start_side_effect(conn, c, "w1", "ext-1")
    report_unknown(conn, c, "w1")
    assert approve(conn, e["id"], "outcome_unknown", 1, operator="w1") is None, "own retry"
    assert approve(conn, e["id"], "outcome_unknown", 0, operator="bob") is None, "stale token"
    row = approve(conn, e["id"], "outcome_unknown", 1, operator="bob")
    assert row["state"] == "queued"
    c2 = claim(conn, "w2")
    assert c2 is not None and c2["attempt"] == 2 and c2["fencing_token"] == 2
    assert c2["external_request_id"] == "ext-1", "the next owner sees what may already have run"
    assert c2["side_effect_started_at"] is None
    j = job(conn, e["id"])
    assert j["retry_approved_by"] == "bob"


def test_mark_terminal_outcome_unknown_after_checking_outside(conn):
    e = enqueue(conn, "pay")
    c = claim(conn, "w1")
    start_side_effect(conn, c, "w1")
    report_unknown(conn, c, "w1")
    assert mark_terminal(conn, e["id"], "outcome_unknown", 1, "cancelled") is None, "not allowed"
    row = mark_terminal(conn, e["id"], "outcome_unknown", 1, "succeeded")
    assert row["state"] == "succeeded" and row["fenced"] is False


def test_mark_terminal_refuses_live_lease_unless_forced_and_fences_owner(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    assert mark_terminal(conn, e["id"], "running", 1, "failed") is None
    row = mark_terminal(conn, e["id"], "running", 1, "failed", force=True)
    assert row["state"] == "failed" and row["fenced"] is True and row["fencing_token"] == 2
    assert heartbeat(conn, c, "w1") is None
    assert complete(conn, c, "w1") is None


def test_mark_terminal_expired_lease_needs_no_force(conn):
    e = enqueue(conn, "search")
    claim(conn, "w1")
    expire_lease(conn, e["id"])
    row = mark_terminal(conn, e["id"], "running", 1, "failed")
    assert row["state"] == "failed" and row["fenced"] is False and row["fencing_token"] == 1


# ------------------------------------------------------------------------------ operator journal


@pytest.mark.parametrize("action", ["cancel", "mark", "approve"])
def test_operator_actions_refused_on_stale_token_are_journaled(conn, action):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    expire_lease(conn, e["id"])
    claim(conn, "w2")  # token 2 now; the operator saw token 1
    if action == "cancel":
        assert cancel(conn, e["id"], "running", c["fencing_token"], "carol", "stuck") is None
    elif action == "mark":
        assert mark_terminal(conn, e["id"], "running", c["fencing_token"], "failed",
                             operator="carol", reason="stuck") is None
    else:
        assert approve(conn, e["id"], "running", c["fencing_token"], "carol", "stuck") is None
    last = events(conn, e["id"])[-1]
    assert last["kind"].startswith("operator_") and last["actor"] == "carol"
    assert last["reason"] == "stuck" and last["request_id"] is not None
    assert last["details"]["outcome"] == "refused"
    assert last["details"]["refusal"] == "the call changed since you looked"
    assert last["fencing_token"] == 2 and last["owner_to"] == "w2", "what is true now"


def test_operator_action_uses_callers_request_id(conn):
    e = enqueue(conn, "search")
    rid = uuid.uuid4()
    with conn.transaction():
        conn.execute("select set_config('leasectl.request_id', %s, true)", (str(rid),))
        row = cancel(conn, e["id"], "queued", 0)
    assert row["request_id"] == rid
    journal = [ev for ev in events(conn, e["id"]) if ev["kind"] == "operator_cancel"]
    assert journal[0]["request_id"] == rid
    state_change = [ev for ev in events(conn, e["id"]) if ev["kind"] == "state_changed"][-1]
    assert state_change["actor"] == "alice", "the trigger names the operator as actor"


def test_operator_action_on_unknown_call_returns_nothing_and_journals_nothing(conn):
    ghost = uuid.uuid4()
    assert cancel(conn, ghost, "queued", 0) is None
    assert events(conn, ghost) == []


# ------------------------------------------------------------------------------ events


def test_record_event_zero_rows_for_unknown_call(conn):
    assert run_one(conn, "worker/record_event", job_id=uuid.uuid4(), kind="heartbeat_lost",
                   actor="w1", fencing_token=1, details=None) is None


def test_sweep_requeues_safe_expired_and_fails_exhausted(conn):
    register_tool(conn, "once", "read_only", max_attempts=1, **FAST)
    a = enqueue(conn, "search")
    b = enqueue(conn, "once")
    claim(conn, "w1")
    claim(conn, "w2")
    expire_lease(conn, a["id"])
    expire_lease(conn, b["id"])
    swept = {s["id"]: s for s in sweep(conn)}
    assert swept[a["id"]]["state_to"] == "queued"
    assert swept[b["id"]]["state_to"] == "failed"
    assert swept[b["id"]]["reason"] == "lease expired and attempts exhausted"
    assert sweep(conn) == [], "zero rows: nothing (more) had expired"
    assert job(conn, a["id"])["owner_id"] is None
    sweeps = [ev for ev in events(conn, a["id"]) if ev["state_to"] == "queued" and ev["state_from"]]
    assert sweeps[-1]["actor"] == "sweeper"


def test_health_labels(conn):
    register_tool(conn, "slow", "read_only", lease_seconds=30, heartbeat_seconds=0.2,
                  missed_heartbeats=1, jitter_seconds=0.1, stage_timeout_seconds=0.3)
    e = enqueue(conn, "slow")
    c = claim(conn, "w1")
    assert job(conn, e["id"])["health"] == "healthy"
    conn.execute("select pg_sleep(0.35)")
    assert job(conn, e["id"])["health"] == "heartbeat_late"
    heartbeat(conn, c, "w1")
    assert job(conn, e["id"])["health"] == "over_stage_timeout"
    cancel(conn, e["id"], "running", 1)
    conn.execute("select pg_sleep(0.55)")
    heartbeat(conn, c, "w1")
    assert job(conn, e["id"])["health"] == "cancel_unheard"
    run_one(conn, "worker/record_event", job_id=e["id"], kind="result_rejected", actor="w0",
            fencing_token=0, details=None)
    assert job(conn, e["id"])["health"] == "cancel_unheard", "worse label wins"


def test_zombie_label_on_a_finished_call(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    complete(conn, c, "w1")
    run_one(conn, "worker/record_event", job_id=e["id"], kind="result_rejected", actor="w0",
            fencing_token=0, details=None)
    assert job(conn, e["id"])["health"] == "zombie"


def test_deadline_left_is_from_database_clock(conn):
    deadline = conn.execute("select now() + interval '1 hour' as t").fetchone()["t"]
    e = enqueue(conn, "search", deadline_at=deadline)
    left = job(conn, e["id"])["deadline_left_seconds"]
    assert left == pytest.approx(3600, abs=5)
