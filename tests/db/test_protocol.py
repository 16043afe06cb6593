"""Every shared query: what it does, and what its zero rows mean."""

from __future__ import annotations

import uuid

import pytest

from console.db.connect import run_one
from tests import helpers as h

TOOLS = {"search": ("read_only", h.FAST), "erp": ("mutating_verifiable", h.FAST), "pay": ("mutating_unverifiable", h.FAST)}


# ------------------------------------------------------------------------------ enqueue


def test_enqueue_same_key_returns_first_call(conn):
    first = h.enqueue(conn, "search", "inv-7:search", {"q": "a"})
    again = h.enqueue(conn, "search", "inv-7:search", {"q": "DIFFERENT"})
    assert first["created"] is True and again["created"] is False
    assert again["id"] == first["id"]
    assert h.job(conn, first["id"])["payload"] == {"q": "a"}


def test_enqueue_same_key_after_finish_returns_finished_call(conn):
    first = h.enqueue(conn, "search", "k-done")
    c = h.claim(conn, "w1")
    h.complete(conn, c, "w1")
    again = h.enqueue(conn, "search", "k-done")
    assert again["id"] == first["id"] and again["state"] == "succeeded" and not again["created"]


def test_plain_insert_works_and_an_unknown_tool_is_refused(conn):
    conn.execute("insert into tool_jobs (idempotency_key, payload, tool) values ('plain', '{}', 'search')")
    row = conn.execute("select state, fencing_token, payload_hash from tool_jobs where idempotency_key='plain'").fetchone()
    assert row["state"] == "queued" and row["fencing_token"] == 0 and len(row["payload_hash"]) == 64
    # migration 0016: calls only for registered tools (tests/db/test_fair_share.py: unless allowed)
    assert h.refusal(conn, "insert into tool_jobs (idempotency_key, payload, tool) values ('new', '{}', 'brand_new')"
                     ) == ("23503", "tool_jobs_tool_fkey")
    assert conn.execute("select count(*) as n from tools where name = 'brand_new'").fetchone()["n"] == 0


# ------------------------------------------------------------------------------ claim


def test_claim_zero_rows_when_nothing_queued(conn):
    assert h.claim(conn, "w1") is None
    h.enqueue(conn, "search")
    assert h.claim(conn, "w1", ["erp"]) is None, "tool filter must be honoured"
    assert h.claim(conn, "w1", ["search"]) is not None


def test_claim_grants_token_and_lease_from_tools(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    assert c["id"] == e["id"] and c["fencing_token"] == 1 and c["attempt"] == 1
    lease = (c["lease_until"] - c["db_now"]).total_seconds()
    assert lease == pytest.approx(h.FAST["lease_seconds"], abs=0.01)
    assert h.kinds(conn, e["id"]) == ["enqueued", "claimed"]


def test_claim_takes_oldest_queued_first(conn):
    a = h.enqueue(conn, "search")
    b = h.enqueue(conn, "search")
    assert h.claim(conn, "w1")["id"] == a["id"]
    assert h.claim(conn, "w2")["id"] == b["id"]


def test_claim_never_takes_a_live_lease_and_reclaims_an_expired_one(conn):
    e = h.enqueue(conn, "search")
    first = h.claim(conn, "w1")
    assert h.claim(conn, "w2") is None
    h.expire_lease(conn, e["id"])
    second = h.claim(conn, "w2")
    assert second["id"] == e["id"] and second["fencing_token"] == 2 and second["attempt"] == 2
    assert h.heartbeat(conn, first, "w1") is None
    assert h.kinds(conn, e["id"])[-1] == "reclaimed"


def test_reclaim_tells_the_new_owner_which_request_may_have_run(conn):
    e = h.enqueue(conn, "erp")
    c1 = h.claim(conn, "w1")
    h.start_side_effect(conn, c1, "w1", "ext-791")
    h.expire_lease(conn, e["id"])
    c2 = h.claim(conn, "w2")
    assert c2["side_effect_started_at"] is not None and c2["external_request_id"] == "ext-791"


def test_claim_never_reclaims_unverifiable_side_effect(conn):
    e = h.enqueue(conn, "pay")
    c1 = h.claim(conn, "w1")
    h.start_side_effect(conn, c1, "w1")
    h.expire_lease(conn, e["id"])
    assert h.claim(conn, "w2") is None
    swept = h.sweep(conn)
    assert [(s["id"], s["state_to"]) for s in swept] == [(e["id"], "outcome_unknown")]
    assert h.claim(conn, "w2") is None


def test_claim_skips_past_deadline_and_exhausted_attempts(conn):
    past = h.enqueue(conn, "search", deadline_at=conn.execute("select now() - interval '1 s' as t").fetchone()["t"])
    assert h.claim(conn, "w1") is None
    assert [s["state_to"] for s in h.sweep(conn)] == ["failed"]
    assert h.job(conn, past["id"])["terminal_reason"] == "deadline passed while queued"


# ------------------------------------------------------------------------------ heartbeat


def test_heartbeat_extends_only_for_current_owner_and_token(conn):
    h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    hb = h.heartbeat(conn, c, "w1")
    assert hb["lease_until"] > c["lease_until"] and hb["cancel_requested"] is False
    assert h.heartbeat(conn, c, "w2") is None, "another worker id"
    assert h.heartbeat(conn, c, "w1", token=c["fencing_token"] + 1) is None, "another token"
    assert h.heartbeat(conn, {"id": uuid.uuid4(), "fencing_token": 1}, "w1") is None, "no such call"


def test_heartbeat_is_not_logged(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    before = len(h.events(conn, e["id"]))
    for _ in range(5):
        assert h.heartbeat(conn, c, "w1")
    assert len(h.events(conn, e["id"])) == before


def test_heartbeat_zero_rows_after_lease_expired(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    h.expire_lease(conn, e["id"])
    assert h.heartbeat(conn, c, "w1") is None, "an expired lease cannot be revived, even by its owner"


def test_heartbeat_reports_cancel_request(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    h.cancel(conn, e["id"], "running", c["fencing_token"])
    assert h.heartbeat(conn, c, "w1")["cancel_requested"] is True


# ------------------------------------------------------------------------------ side effects


def test_start_side_effect_zero_rows_cases(conn):
    e = h.enqueue(conn, "pay")
    c = h.claim(conn, "w1")
    assert h.start_side_effect(conn, c, "w2") is None, "not the owner"
    assert h.start_side_effect(conn, c, "w1", token=99) is None, "stale token"
    h.cancel(conn, e["id"], "running", c["fencing_token"])
    assert h.start_side_effect(conn, c, "w1") is None, "cancel requested: do not send"
    assert h.job(conn, e["id"])["side_effect_started_at"] is None


def test_start_side_effect_refused_after_deadline(conn):
    deadline = conn.execute("select now() + interval '300 ms' as t").fetchone()["t"]
    e = h.enqueue(conn, "erp", deadline_at=deadline)
    c = h.claim(conn, "w1")
    conn.execute("select pg_sleep(0.35)")
    assert h.start_side_effect(conn, c, "w1") is None
    assert h.job(conn, e["id"])["side_effect_started_at"] is None


def test_start_side_effect_is_journaled_by_trigger(conn):
    e = h.enqueue(conn, "pay")
    c = h.claim(conn, "w1")
    assert h.start_side_effect(conn, c, "w1", "ext-9")["side_effect_started_at"] is not None
    ev = h.events(conn, e["id"])[-1]
    assert ev["kind"] == "tool_request_started" and ev["details"]["external_request_id"] == "ext-9"
    assert ev["actor"] == "w1" and ev["fencing_token"] == 1


# ------------------------------------------------------------------------------ complete / fail


def test_complete_zero_rows_for_stale_owner(conn):
    e = h.enqueue(conn, "search")
    c1 = h.claim(conn, "w1")
    h.expire_lease(conn, e["id"])
    c2 = h.claim(conn, "w2")
    assert h.complete(conn, c1, "w1", {"from": "w1"}) is None
    assert h.complete(conn, c2, "w2", {"from": "w2"})["state"] == "succeeded"
    assert h.job(conn, e["id"])["result"] == {"from": "w2"}
    assert h.complete(conn, c2, "w2", {"again": True}) is None, "a finished call takes no second result"


def test_fail_retryable_requeues_until_attempts_exhausted(conn):
    h.register_tool(conn, "flaky", "read_only", max_attempts=2, **h.FAST)
    e = h.enqueue(conn, "flaky")
    c = h.claim(conn, "w1")
    assert h.fail(conn, c, "w1")["state"] == "queued"
    assert h.job(conn, e["id"])["owner_id"] is None
    c = h.claim(conn, "w1")
    row = h.fail(conn, c, "w1")
    assert row["state"] == "failed" and row["terminal_reason"] == "attempts exhausted"
    assert h.fail(conn, c, "w1") is None


def test_fail_not_retryable_fails_for_good(conn):
    h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    row = h.fail(conn, c, "w1", retryable=False)
    assert row["state"] == "failed" and row["terminal_reason"] == "failed: not retryable"


def test_fail_zero_rows_for_stale_token(conn):
    h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    assert h.fail(conn, c, "w1", token=5) is None


# ------------------------------------------------------------------------------ cancel


def test_cancel_queued_is_cancelled_at_once(conn):
    e = h.enqueue(conn, "search")
    row = h.cancel(conn, e["id"], "queued", 0)
    assert row["state"] == "cancelled"
    assert h.job(conn, e["id"])["finished_at"] is not None


def test_cancel_running_is_only_requested_until_worker_confirms(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    row = h.cancel(conn, e["id"], "running", c["fencing_token"])
    assert row["state"] == "cancel_requested", "requested is not stopped"
    assert h.confirm_cancel(conn, c, "w2") is None
    assert h.confirm_cancel(conn, c, "w1")["state"] == "cancelled"


def test_confirm_cancel_zero_rows_without_request(conn):
    h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    assert h.confirm_cancel(conn, c, "w1") is None


def test_result_after_cancel_request_is_recorded_as_completed_despite_cancel(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    h.cancel(conn, e["id"], "running", c["fencing_token"])
    row = h.complete(conn, c, "w1")
    assert row["state"] == "succeeded" and row["completed_despite_cancel"] is True


def test_expired_cancel_request_is_swept_to_cancelled(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    h.cancel(conn, e["id"], "running", c["fencing_token"])
    h.expire_lease(conn, e["id"])
    assert [s["state_to"] for s in h.sweep(conn)] == ["cancelled"]


# ------------------------------------------------------------------------------ outcome unknown


def test_report_outcome_unknown_needs_a_started_side_effect(conn):
    e = h.enqueue(conn, "pay")
    c = h.claim(conn, "w1")
    assert h.report_unknown(conn, c, "w1") is None, "nothing started: an ordinary failure"
    h.start_side_effect(conn, c, "w1")
    assert h.report_unknown(conn, c, "w2") is None
    assert h.report_unknown(conn, c, "w1")["state"] == "outcome_unknown"
    assert h.claim(conn, "w2") is None, "nobody retries it on their own"
    assert h.job(conn, e["id"])["health"] == "outcome_unknown"


def test_approve_retry_by_a_human_requeues_with_one_more_attempt(conn):
    h.register_tool(conn, "pay1", "mutating_unverifiable", max_attempts=1, **h.FAST)
    e = h.enqueue(conn, "pay1")
    c = h.claim(conn, "w1")
    h.start_side_effect(conn, c, "w1", "ext-1")
    h.report_unknown(conn, c, "w1")
    assert h.approve(conn, e["id"], "outcome_unknown", 1, operator="w1") is None, "own retry"
    assert h.approve(conn, e["id"], "outcome_unknown", 0, operator="bob") is None, "stale token"
    row = h.approve(conn, e["id"], "outcome_unknown", 1, operator="bob")
    assert row["state"] == "queued"
    c2 = h.claim(conn, "w2")
    assert c2 is not None and c2["attempt"] == 2 and c2["fencing_token"] == 2
    assert c2["external_request_id"] == "ext-1", "the next owner sees what may already have run"
    assert c2["side_effect_started_at"] is None
    j = h.job(conn, e["id"])
    assert j["retry_approved_by"] == "bob"


def test_mark_terminal_outcome_unknown_after_checking_outside(conn):
    e = h.enqueue(conn, "pay")
    c = h.claim(conn, "w1")
    h.start_side_effect(conn, c, "w1")
    h.report_unknown(conn, c, "w1")
    assert h.mark_terminal(conn, e["id"], "outcome_unknown", 1, "cancelled") is None, "not allowed"
    row = h.mark_terminal(conn, e["id"], "outcome_unknown", 1, "succeeded")
    assert row["state"] == "succeeded" and row["fenced"] is False


def test_mark_terminal_refuses_live_lease_unless_forced_and_fences_owner(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    assert h.mark_terminal(conn, e["id"], "running", 1, "failed") is None
    row = h.mark_terminal(conn, e["id"], "running", 1, "failed", force=True)
    assert row["state"] == "failed" and row["fenced"] is True and row["fencing_token"] == 2
    assert h.heartbeat(conn, c, "w1") is None
    assert h.complete(conn, c, "w1") is None


def test_mark_terminal_expired_lease_needs_no_force(conn):
    e = h.enqueue(conn, "search")
    h.claim(conn, "w1")
    h.expire_lease(conn, e["id"])
    row = h.mark_terminal(conn, e["id"], "running", 1, "failed")
    assert row["state"] == "failed" and row["fenced"] is False and row["fencing_token"] == 1


# ------------------------------------------------------------------------------ operator journal


@pytest.mark.parametrize("action", ["cancel", "mark", "approve"])
def test_operator_actions_refused_on_stale_token_are_journaled(conn, action):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    h.expire_lease(conn, e["id"])
    h.claim(conn, "w2")  # token 2 now; the operator saw token 1
    if action == "cancel":
        assert h.cancel(conn, e["id"], "running", c["fencing_token"], "carol", "stuck") is None
    elif action == "mark":
        assert h.mark_terminal(conn, e["id"], "running", c["fencing_token"], "failed",
                             operator="carol", reason="stuck") is None
    else:
        assert h.approve(conn, e["id"], "running", c["fencing_token"], "carol", "stuck") is None
    last = h.events(conn, e["id"])[-1]
    assert last["kind"].startswith("operator_") and last["actor"] == "carol"
    assert last["reason"] == "stuck" and last["request_id"] is not None
    assert last["details"]["outcome"] == "refused"
    assert last["details"]["refusal"] == "the call changed since you looked"
    assert last["fencing_token"] == 2 and last["owner_to"] == "w2", "what is true now"


def test_operator_action_uses_callers_request_id(conn):
    e = h.enqueue(conn, "search")
    rid = uuid.uuid4()
    with conn.transaction():
        conn.execute("select set_config('leasectl.request_id', %s, true)", (str(rid),))
        row = h.cancel(conn, e["id"], "queued", 0)
    assert row["request_id"] == rid
    journal = [ev for ev in h.events(conn, e["id"]) if ev["kind"] == "operator_cancel"]
    assert journal[0]["request_id"] == rid
    state_change = [ev for ev in h.events(conn, e["id"]) if ev["kind"] == "state_changed"][-1]
    assert state_change["actor"] == "alice", "the trigger names the operator as actor"


def test_operator_action_on_unknown_call_returns_nothing_and_journals_nothing(conn):
    ghost = uuid.uuid4()
    assert h.cancel(conn, ghost, "queued", 0) is None
    assert h.events(conn, ghost) == []


# ------------------------------------------------------------------------------ events


def test_record_event_zero_rows_for_unknown_call(conn):
    assert run_one(conn, "worker/record_event", job_id=uuid.uuid4(), kind="heartbeat_lost",
                   actor="w1", fencing_token=1, details=None) is None


def test_sweep_requeues_safe_expired_and_fails_exhausted(conn):
    h.register_tool(conn, "once", "read_only", max_attempts=1, **h.FAST)
    a = h.enqueue(conn, "search")
    b = h.enqueue(conn, "once")
    h.claim(conn, "w1")
    h.claim(conn, "w2")
    h.expire_lease(conn, a["id"])
    h.expire_lease(conn, b["id"])
    swept = {s["id"]: s for s in h.sweep(conn)}
    assert swept[a["id"]]["state_to"] == "queued"
    assert swept[b["id"]]["state_to"] == "failed"
    assert swept[b["id"]]["reason"] == "lease expired and attempts exhausted"
    assert h.sweep(conn) == [], "zero rows: nothing (more) had expired"
    assert h.job(conn, a["id"])["owner_id"] is None
    sweeps = [ev for ev in h.events(conn, a["id"]) if ev["state_to"] == "queued" and ev["state_from"]]
    assert sweeps[-1]["actor"] == "sweeper"


def test_health_labels(conn):
    h.register_tool(conn, "slow", "read_only", lease_seconds=30, heartbeat_seconds=0.2,
                  missed_heartbeats=1, jitter_seconds=0.1, stage_timeout_seconds=0.3)
    e = h.enqueue(conn, "slow")
    c = h.claim(conn, "w1")
    assert h.job(conn, e["id"])["health"] == "healthy"
    conn.execute("select pg_sleep(0.35)")
    assert h.job(conn, e["id"])["health"] == "heartbeat_late"
    h.heartbeat(conn, c, "w1")
    assert h.job(conn, e["id"])["health"] == "over_stage_timeout"
    h.cancel(conn, e["id"], "running", 1)
    conn.execute("select pg_sleep(0.55)")
    h.heartbeat(conn, c, "w1")
    assert h.job(conn, e["id"])["health"] == "cancel_unheard"
    run_one(conn, "worker/record_event", job_id=e["id"], kind="result_rejected", actor="w0",
            fencing_token=0, details=None)
    assert h.job(conn, e["id"])["health"] == "cancel_unheard", "worse label wins"


def test_zombie_label_on_a_finished_call(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    h.complete(conn, c, "w1")
    run_one(conn, "worker/record_event", job_id=e["id"], kind="result_rejected", actor="w0",
            fencing_token=0, details=None)
    assert h.job(conn, e["id"])["health"] == "zombie"


def test_deadline_left_is_from_database_clock(conn):
    deadline = conn.execute("select now() + interval '1 hour' as t").fetchone()["t"]
    e = h.enqueue(conn, "search", deadline_at=deadline)
    left = h.job(conn, e["id"])["deadline_left_seconds"]
    assert left == pytest.approx(3600, abs=5)
