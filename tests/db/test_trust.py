"""Who may write what, enforced by the database for any SQL (migration
0005): real login roles attack the schema the way a rogue or buggy client would.

Each login is a member of one leasectl group role, as a deployment would create them. Rows are
set up by the test database's owner (a superuser: row level security does not apply to it).
Every test here fails without 0005 except two, which guard what must keep working under the new
rules: the supervisor login's sweep and a worker login's HOT, trigger-free heartbeats."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from console.db import actions
from console.db.connect import run, run_one, translate_error
from console.operator.doctor import diagnose
from console.shared.errors import BadInput, PermissionDenied, ProtocolViolation, RowLocked
from tests import helpers as h

A, B, SHARED = "lc_trust_a", "lc_trust_b", "lc_trust_shared"
OPERATOR, SUPERVISOR, BYPASS = "lc_trust_op", "lc_trust_sup", "lc_trust_bypass"
LOGINS = {A: "leasectl_worker", B: "leasectl_worker", SHARED: "leasectl_worker",
          OPERATOR: "leasectl_operator", SUPERVISOR: "leasectl_supervisor"}
TOOLS = {"search": ("read_only", h.SLOW_30), "pay": ("mutating_unverifiable", h.SLOW_30), "quick": ("read_only", h.FAST),
         "quick_pay": ("mutating_unverifiable", h.FAST)}


@pytest.fixture(scope="module")
def bypass(pg_server):
    """A supervisor login that row level security does not stop: only the triggers are left."""
    with pg_server.admin() as admin:
        h.ensure_login(admin, BYPASS, "leasectl_supervisor", bypassrls=True)


@pytest.fixture
def admin(conn):
    """The test database's owner, who sets the rows up: a superuser, row level security does not apply."""
    return conn


def raw(conn, job_id):
    return conn.execute("select * from tool_jobs where id = %s", (job_id,)).fetchone()


def sqlstate_of(conn, statement, params=()):
    with pytest.raises(psycopg.Error) as info:
        conn.execute(statement, params)
    return info.value.sqlstate


def unknown_outcome(conn, owner="w1"):
    """A payment that timed out after its request went out: outcome_unknown, owned by `owner`."""
    e = h.enqueue(conn, "pay")
    c = h.claim(conn, owner, ["pay"])
    assert h.start_side_effect(conn, c, owner) is not None
    assert h.report_unknown(conn, c, owner)["state"] == "outcome_unknown"
    return e["id"], c["fencing_token"]


# ----------------------------------------------------------------- item 1: a worker owns its calls


def test_a_worker_cannot_finish_another_workers_live_call(db, logins, admin):
    with h.as_login(db, A) as a, h.as_login(db, B) as b:
        e = h.enqueue(a, "search")
        c = h.claim(a, A)
        assert b.execute("update tool_jobs set state = 'succeeded', result = '{\"forged\": true}', "
                         "lease_until = null where id = %s", (e["id"],)).rowcount == 0
        assert h.complete(b, c, A, {"forged": True}) is None, "not even through the shared SQL, in A's name"
        assert raw(admin, e["id"])["state"] == "running"
        assert h.complete(a, c, A, {"by": "a"})["state"] == "succeeded"
    assert raw(admin, e["id"])["result"] == {"by": "a"}


def test_no_worker_settles_an_unknown_outcome_not_even_its_owner(db, logins, admin):
    with h.as_login(db, A) as a:
        job_id, _ = unknown_outcome(a, A)
    before = raw(admin, job_id)
    with h.as_login(db, A) as a, h.as_login(db, B) as b:
        for conn in (a, b):
            for stmt in ("update tool_jobs set state = 'succeeded' where id = %s",
                         "update tool_jobs set state = 'failed', terminal_reason = 'x' where id = %s",
                         "update tool_jobs set error = '{}' where id = %s",
                         "update tool_jobs set lease_until = now() + interval '1 hour' where id = %s",
                         "update tool_jobs set state = 'running', owner_id = %s, "
                         "fencing_token = fencing_token + 1 where id = %s"):
                params = (A, job_id) if stmt.count("%s") == 2 else (job_id,)
                assert conn.execute(stmt, params).rowcount == 0, stmt
    assert raw(admin, job_id) == before
    assert not [e for e in h.events(admin, job_id) if e["state_from"] == "outcome_unknown"]


def test_a_worker_cannot_expire_or_extend_anothers_lease(db, logins, admin):
    with h.as_login(db, A) as a, h.as_login(db, B) as b:
        e = h.enqueue(a, "search")
        c = h.claim(a, A)
        lease = raw(admin, e["id"])["lease_until"]
        for stmt in ("update tool_jobs set lease_until = now() - interval '1s' where id = %s",
                     "update tool_jobs set lease_until = now() + interval '1 day' where id = %s",
                     "update tool_jobs set heartbeat_at = now() where id = %s"):
            assert b.execute(stmt, (e["id"],)).rowcount == 0, stmt
        assert h.heartbeat(b, c, A) is None, "renewing A's lease in A's name"
        assert h.claim(b, B) is None, "the lease is still live: nothing to steal"
        assert raw(admin, e["id"])["lease_until"] == lease
        assert h.heartbeat(a, c, A) is not None


def test_claiming_under_a_foreign_worker_id_is_refused_with_a_readable_message(db, logins, admin):
    with h.as_login(db, B) as b:
        h.enqueue(b, "search")
        ident = run_one(b, "worker/check_identity", worker_id=A)
        assert ident == {"worker_id": A, "login": B, "bound": True, "acceptable": False,
                         "expected": f"{B} or {B}:<name>"}
        assert run_one(b, "worker/check_identity", worker_id=f"{B}:w-9")["acceptable"] is True
        assert run_one(b, "views/db_info")["can_act"] is False, "a worker has no operator functions"
        with pytest.raises(PermissionDenied) as refused:
            h.claim(b, A)
        assert str(refused.value) == (f"worker id {A} is not yours: a leasectl_worker login {B} may own "
                                      f"calls only as {B} or {B}:<name>")
        assert refused.value.__cause__.sqlstate == "LCS08"
        assert sqlstate_of(b, "update tool_jobs set state = 'running', owner_id = 'ceo', "
                              "fencing_token = fencing_token + 1") == "LCS08"
        # a refusal by row level security alone (no trigger in front of it) reads as well
        c = h.claim(b, B)
        with pytest.raises(psycopg.Error) as rls:
            b.execute("update tool_jobs set state = 'failed', owner_id = null where id = %s", (c["id"],))
        assert rls.value.sqlstate == "42501"
        readable = translate_error(rls.value, "test")
        assert isinstance(readable, PermissionDenied)
        assert "a leasectl_worker login owns and writes calls only as <login> or <login>:<name>" in str(readable)
    # the owner of the schema (and any superuser) is not bound: the demo and tests name workers freely
    assert run_one(admin, "worker/check_identity", worker_id="w1")["acceptable"] is True


@pytest.mark.parametrize("suffix", ["", ":w-2"])
def test_bound_worker_ids_run_the_whole_protocol(db, logins, admin, suffix):
    me = A + suffix
    with h.as_login(db, A) as w:
        assert run_one(w, "worker/check_identity", worker_id=me)["acceptable"] is True
        # enqueue, claim, heartbeat, start the request, complete
        e1 = h.enqueue(w, "search")
        c1 = h.claim(w, me, ["search"])
        assert c1["id"] == e1["id"] and h.heartbeat(w, c1, me) is not None
        assert h.start_side_effect(w, c1, me, "ext-1") is not None
        assert h.complete(w, c1, me)["state"] == "succeeded"
        # a retryable failure requeues, the next claim takes it, a final failure ends it
        e2 = h.enqueue(w, "search")
        c2 = h.claim(w, me, ["search"])
        assert h.fail(w, c2, me)["state"] == "queued"
        c2 = h.claim(w, me, ["search"])
        assert c2["id"] == e2["id"] and h.fail(w, c2, me, retryable=False)["state"] == "failed"
        # an operator cancels, the worker hears it at its heartbeat and confirms
        e3 = h.enqueue(w, "search")
        c3 = h.claim(w, me, ["search"])
        assert h.cancel(admin, e3["id"], "running", c3["fencing_token"]) is not None
        assert h.heartbeat(w, c3, me)["cancel_requested"] is True
        assert h.confirm_cancel(w, c3, me)["state"] == "cancelled"
        # a payment with no answer after its request went out
        e4 = h.enqueue(w, "pay")
        c4 = h.claim(w, me, ["pay"])
        assert h.start_side_effect(w, c4, me) is not None
        assert h.report_unknown(w, c4, me)["state"] == "outcome_unknown"
        # fenced out by an operator, the worker finds out at its heartbeat and journals it
        e5 = h.enqueue(w, "search")
        c5 = h.claim(w, me, ["search"])
        assert h.mark_terminal(admin, e5["id"], "running", c5["fencing_token"], "failed", force=True) is not None
        assert h.heartbeat(w, c5, me) is None
        assert h.record_event(w, c5, "heartbeat_lost", me, details={"reason": "zero_rows"}) is not None
    for e in (e1, e2, e3, e4, e5):
        mine = [ev for ev in h.events(admin, e["id"]) if ev["db_role"] == A]
        assert mine and all(ev["actor"] in (me, A) for ev in mine), mine
    assert raw(admin, e4["id"])["owner_id"] == me


def test_a_shared_login_runs_two_named_workers_and_doctor_says_what_that_gives_up(db, logins, admin):
    w1, w2 = f"{SHARED}:w-1", f"{SHARED}:w-2"
    with h.as_login(db, SHARED) as s1, h.as_login(db, SHARED) as s2:
        h.enqueue(s1, "search")
        c1 = h.claim(s1, w1, ["search"])
        h.enqueue(s2, "search")
        c2 = h.claim(s2, w2, ["search"])
        assert h.heartbeat(s1, c1, w1) is not None and h.heartbeat(s2, c2, w2) is not None
        # what sharing gives up: the database cannot tell w-1 from w-2
        assert h.heartbeat(s1, c2, w2) is not None
        assert h.complete(s1, c1, w1)["state"] == "succeeded"
        assert h.complete(s2, c2, w2)["state"] == "succeeded"
    shared = [c for c in diagnose(db.dsn) if c.name.startswith("shared worker login")]
    assert len(shared) == 1 and shared[0].status == "warn", shared
    assert shared[0].name == f"shared worker login {SHARED}"
    detail = shared[0].detail
    assert f"login {SHARED} ran 2 workers" in detail and w1 in detail and w2 in detail
    assert "cannot tell those workers apart" in detail and "write the others' calls" in detail
    assert "CREATE ROLE" in shared[0].fix


# ----------------------------------------------------------------- item 2: events and the journal


def test_worker_events_only_from_the_login_that_held_the_call_under_that_token(db, logins, admin):
    with h.as_login(db, A) as a, h.as_login(db, B) as b:
        e = h.enqueue(a, "search")
        c = h.claim(a, A)
        for kind in ("heartbeat_lost", "result_rejected"):
            with pytest.raises(ProtocolViolation, match="never held"):
                h.record_event(b, c, kind, B)
            with pytest.raises(ProtocolViolation, match=f"may record events only as {B} or {B}:<name>"):
                h.record_event(b, c, kind, A)
        assert sqlstate_of(b, "insert into job_events (job_id, kind, actor, fencing_token) "
                              "values (%s, 'heartbeat_lost', %s, %s)", (e["id"], B, c["fencing_token"])) == "LCH03"
        # A loses the call, then says so: it held it under that token, so it may
        assert h.mark_terminal(admin, e["id"], "running", c["fencing_token"], "failed", force=True) is not None
        assert h.heartbeat(a, c, A) is None
        assert h.record_event(a, c, "heartbeat_lost", A) is not None
        assert h.record_event(a, c, "result_rejected", A, details={"reason": "lease_lost"}) is not None
        with pytest.raises(ProtocolViolation, match="never held"):
            h.record_event(a, c, "result_rejected", A, token=c["fencing_token"] + 1)
    zombie = [(ev["kind"], ev["actor"], ev["db_role"]) for ev in h.events(admin, e["id"])
              if ev["kind"] in ("heartbeat_lost", "result_rejected")]
    assert zombie == [("heartbeat_lost", A, A), ("result_rejected", A, A)]


def test_an_operator_login_cannot_approve_or_journal_by_hand(db, logins, admin):
    job_id, token = unknown_outcome(admin)
    with h.as_login(db, OPERATOR) as op:
        assert sqlstate_of(op, "update tool_jobs set state = 'queued', retry_approved_by = 'mallory', "
                               "retry_approved_at = now() where id = %s", (job_id,)) == "42501"
        for kind, actor in (("operator_approve_retry", "someone-else"), ("heartbeat_lost", "w1")):
            assert sqlstate_of(op, "insert into job_events (job_id, kind, actor, fencing_token) "
                                   "values (%s, %s, %s, %s)", (job_id, kind, actor, token)) == "42501", kind
    assert raw(admin, job_id)["state"] == "outcome_unknown"
    assert not [e for e in h.events(admin, job_id) if e["kind"] in ("operator_approve_retry", "heartbeat_lost")]


def test_operator_actions_through_the_query_files_apply_refuse_and_journal_the_login(db, logins, admin):
    u, u_token = unknown_outcome(admin)
    v, v_token = unknown_outcome(admin)
    r = h.enqueue(admin, "search")
    r_token = h.claim(admin, "w1", ["search"])["fencing_token"]
    with h.as_login(db, OPERATOR) as op:
        assert run_one(op, "views/db_info")["can_act"] is True
        assert h.approve(op, u, "outcome_unknown", u_token + 7, operator="ana") is None, "stale: refused"
        approved = h.approve(op, u, "outcome_unknown", u_token, operator="ana")
        assert set(approved) == {"job_id", "state", "fencing_token", "retry_approved_at", "request_id"}
        assert approved["state"] == "queued"
        settled = h.mark_terminal(op, v, "outcome_unknown", v_token, "failed", operator="ana", reason="bank: no")
        assert set(settled) == {"job_id", "state", "fencing_token", "owner_id", "fenced", "finished_at",
                                "request_id"}
        assert settled["state"] == "failed" and settled["fenced"] is False
        with op.transaction():  # a bulk action names its batch once; each call's row carries it
            run(op, "meta/request_id", request_id="00000000-0000-4000-8000-000000000001")
            op.execute("select set_config('leasectl.batch_id', '00000000-0000-4000-8000-00000000000b', true)")
            cancelled = h.cancel(op, r["id"], "running", r_token, operator="ana")
        assert set(cancelled) == {"job_id", "state", "fencing_token", "owner_id", "lease_until",
                                  "cancel_requested_at", "request_id"}
        assert cancelled["state"] == "cancel_requested"
        assert str(cancelled["request_id"]) == "00000000-0000-4000-8000-000000000001"
    journal = [e for job_id in (u, v, r["id"]) for e in h.events(admin, job_id) if e["kind"].startswith("operator_")]
    assert [(e["kind"], e["details"]["outcome"]) for e in journal] == [
        ("operator_approve_retry", "refused"), ("operator_approve_retry", "applied"),
        ("operator_mark_terminal", "applied"), ("operator_cancel", "applied")]
    assert all(e["db_role"] == OPERATOR and e["actor"] == "ana" for e in journal)
    assert journal[0]["details"]["refusal"] == "the call changed since you looked"
    assert journal[3]["details"]["batch_id"] == "00000000-0000-4000-8000-00000000000b"
    changes = [e for job_id in (u, v, r["id"]) for e in h.events(admin, job_id)
               if e["kind"] == "state_changed" and e["db_role"] == OPERATOR]
    assert [(e["state_from"], e["state_to"], e["actor"]) for e in changes] == [
        ("outcome_unknown", "queued", "ana"), ("outcome_unknown", "failed", "ana"),
        ("running", "cancel_requested", "ana")]


def test_a_failed_action_journals_its_cause(db, logins, admin):
    e = h.enqueue(admin, "search")
    token = h.claim(admin, "w1", ["search"])["fencing_token"]
    holder = db.connect(autocommit=False)
    holder.execute("update tool_jobs set heartbeat_at = now() where id = %s", (e["id"],))
    try:
        with h.as_login(db, OPERATOR) as op:
            op.execute("set lock_timeout = '200ms'")
            with pytest.raises(RowLocked):
                actions.cancel(op, e["id"], seen_state="running", seen_token=token, operator="carol",
                               reason="stuck")
    finally:
        holder.rollback()
        holder.close()
    with h.as_login(db, OPERATOR) as op:
        row = run_one(op, "operator/journal_failure", job_id=e["id"], action="approve_retry", operator="dan",
                      reason="r", error="statement timeout", seen_state="running", seen_token=token,
                      request_id="00000000-0000-4000-8000-000000000002", cause="statement_timeout")
        assert row is not None and set(row) == {"id", "at"}
        with pytest.raises(BadInput):
            run_one(op, "operator/journal_failure", job_id=e["id"], action="cancel", operator="dan",
                    reason="r", error="x", seen_state="running", seen_token=token,
                    request_id="00000000-0000-4000-8000-000000000003", cause="bad_luck")
    failed = [ev for ev in h.events(admin, e["id"]) if ev["kind"] == "operator_action_failed"]
    assert [(ev["actor"], ev["details"]["action"], ev["details"]["cause"], ev["db_role"]) for ev in failed] == [
        ("carol", "cancel", "lock_timeout", OPERATOR), ("dan", "approve_retry", "statement_timeout", OPERATOR)]


def test_every_event_records_the_database_role_that_caused_it(db, logins, admin):
    with h.as_login(db, A) as a:
        # any session may set leasectl.actor; a worker's is not believed (it would blame an operator)
        a.execute("select set_config('leasectl.actor', 'alice-the-operator', false)")
        e = h.enqueue(a, "search")
        c = h.claim(a, A)
        assert h.start_side_effect(a, c, A) is not None
        assert h.complete(a, c, A) is not None
        # db_role and at are the database's: a login may not even name them (column privileges, 0013)
        assert sqlstate_of(a, "insert into job_events (job_id, kind, actor, fencing_token, db_role, at) "
                              "values (%s, 'note', %s, %s, 'postgres', '2001-01-01')",
                           (e["id"], A, c["fencing_token"])) == "42501"
        a.execute("insert into job_events (job_id, kind, actor, fencing_token) values (%s, 'note', %s, %s)",
                  (e["id"], A, c["fencing_token"]))
        assert run_one(a, "agent/register", agent_id="lc-trust-agent", parent_id=None, kind="planner")
        # nobody but the database writes the fleet's journal (0013)
        assert sqlstate_of(a, "insert into fleet_events (kind, actor, agent_id) "
                              "values ('note', 'x', 'lc-trust-agent')") == "42501"
    e2 = h.enqueue(admin, "search")
    me = admin.execute("select session_user::text as me").fetchone()["me"]
    worker_events = h.events(admin, e["id"])
    assert [ev["kind"] for ev in worker_events] == ["enqueued", "claimed", "tool_request_started",
                                                    "state_changed", "note"]
    assert all(ev["db_role"] == A for ev in worker_events)
    assert all(ev["actor"] != "alice-the-operator" for ev in worker_events)
    assert [ev["actor"] for ev in worker_events[1:]] == [A] * 4
    assert worker_events[-1]["at"] > worker_events[-2]["at"]
    assert [ev["db_role"] for ev in h.events(admin, e2["id"])] == [me]
    fleet = admin.execute("select kind, db_role from fleet_events where agent_id = 'lc-trust-agent' "
                          "order by id").fetchall()
    assert fleet == [{"kind": "agent_registered", "db_role": A}]


# ----------------------------------------------------------------- no automatic retry, no tampering


def test_an_unverifiable_call_whose_request_went_out_is_never_requeued(db, logins, admin):
    with h.as_login(db, A) as a:
        e = h.enqueue(a, "pay")
        c = h.claim(a, A, ["pay"])
        assert h.start_side_effect(a, c, A) is not None
        row = h.fail(a, c, A, retryable=True)
        assert row["state"] == "outcome_unknown", "a human decides, the next claim does not pay twice"
    assert raw(admin, e["id"])["owner_id"] == A
    assert [r["id"] for r in run(admin, "views/approvals")] == [e["id"]]
    # whatever SQL is sent, by anyone
    e2 = h.enqueue(admin, "pay")
    c2 = h.claim(admin, "w1", ["pay"])
    h.start_side_effect(admin, c2, "w1")
    assert sqlstate_of(admin, "update tool_jobs set state = 'queued', owner_id = null, lease_until = null "
                              "where id = %s", (e2["id"],)) == "LCS07"
    # a verifiable or read-only call still goes back to the queue
    h.enqueue(admin, "search")
    c3 = h.claim(admin, "w1", ["search"])
    h.start_side_effect(admin, c3, "w1")
    assert h.fail(admin, c3, "w1")["state"] == "queued"


def test_a_queued_call_is_changed_only_by_taking_it(db, logins, admin):
    with h.as_login(db, A) as a:
        e = h.enqueue(a, "search")
        for stmt in ("update tool_jobs set attempt = 999 where id = %s",
                     "update tool_jobs set side_effect_started_at = now() where id = %s",
                     "update tool_jobs set result = '{\"forged\": 1}' where id = %s"):
            assert sqlstate_of(a, stmt, (e["id"],)) == "LCS10", stmt
        assert h.claim(a, A)["id"] == e["id"]


def test_outcome_unknown_is_left_only_through_the_operator_statements(db, logins, bypass, admin):
    job_id, token = unknown_outcome(admin)
    with h.as_login(db, SUPERVISOR) as sup:
        assert sup.execute("update tool_jobs set state = 'failed' where id = %s", (job_id,)).rowcount == 0
        # nor may the control plane hand out ownership
        queued = h.enqueue(admin, "search")
        assert sqlstate_of(sup, "update tool_jobs set state = 'running', owner_id = %s, "
                                "fencing_token = fencing_token + 1, lease_until = now() + interval '1 hour' "
                                "where id = %s", (SUPERVISOR, queued["id"])) in ("42501", "LCS11")
    with h.as_login(db, BYPASS) as rogue:  # past row level security, the trigger still refuses
        assert sqlstate_of(rogue, "update tool_jobs set state = 'failed' where id = %s", (job_id,)) == "LCS09"
        assert sqlstate_of(rogue, "update tool_jobs set state = 'succeeded' where id = %s", (job_id,)) == "LCS09"
    with h.as_login(db, OPERATOR) as op:
        assert h.approve(op, job_id, "outcome_unknown", token, operator="ana")["state"] == "queued"


def test_the_supervisor_login_still_sweeps_every_kind_of_expired_lease(db, logins, admin):
    redo = h.enqueue(admin, "quick")
    h.claim(admin, "w1", ["quick"])
    paid = h.enqueue(admin, "quick_pay")
    paid_c = h.claim(admin, "w2", ["quick_pay"])
    h.start_side_effect(admin, paid_c, "w2")
    asked = h.enqueue(admin, "quick")
    asked_c = h.claim(admin, "w3", ["quick"])
    h.cancel(admin, asked["id"], "running", asked_c["fencing_token"])
    for e in (redo, paid, asked):
        h.expire_lease(admin, e["id"])
    with h.as_login(db, SUPERVISOR) as sup:
        swept = {r["id"]: r["state_to"] for r in h.sweep(sup)}
    assert swept == {redo["id"]: "queued", paid["id"]: "outcome_unknown", asked["id"]: "cancelled"}
    assert h.job(admin, redo["id"])["owner_id"] is None


# ----------------------------------------------------------------- enqueue and the kind rename


def test_enqueue_as_a_worker_returns_the_first_call_for_a_repeated_key(db, logins, admin):
    with h.as_login(db, A) as a, h.as_login(db, B) as b:
        first = h.enqueue(a, "search", key="k-repeat")
        assert h.claim(a, A)["id"] == first["id"]  # now A's live call, which B's UPDATE policy does not admit
        again = h.enqueue(b, "search", key="k-repeat")
        assert again["id"] == first["id"] and again["created"] is False and again["state"] == "running"
        # the same key from two workers at once: the second waits for the first and returns its call
        answers: list[dict] = []
        with b.transaction():
            mine = h.enqueue(b, "search", key="k-race")
            waiter = threading.Thread(target=lambda: answers.append(h.enqueue(a, "search", key="k-race")))
            waiter.start()
            time.sleep(0.3)
            assert waiter.is_alive(), "the second enqueue waits for the first to commit"
        waiter.join(timeout=10)
        assert answers and answers[0]["id"] == mine["id"] and answers[0]["created"] is False
    # the function runs as the owner; the history still names the login that asked
    assert h.events(admin, first["id"])[0]["db_role"] == A
    assert h.events(admin, mine["id"])[0]["db_role"] == B


def test_the_start_of_a_request_is_tool_request_started_and_old_history_still_reads(db, logins, admin):
    e = h.enqueue(admin, "pay")
    c = h.claim(admin, "w1", ["pay"])
    h.start_side_effect(admin, c, "w1", "ext-9")
    ev = h.events(admin, e["id"])[-1]
    assert ev["kind"] == "tool_request_started" and ev["details"]["external_request_id"] == "ext-9"
    h.report_unknown(admin, c, "w1")
    # a call journaled before 0005, under the old name (exact mode writes it as it was)
    old = h.enqueue(admin, "pay")
    old_c = h.claim(admin, "w2", ["pay"])
    run(admin, "demo/exact_mode", on=True)
    try:
        admin.execute("update tool_jobs set side_effect_started_at = '2026-01-01T00:00:00Z', "
                      "external_request_id = 'ext-old', state = 'outcome_unknown', lease_until = null "
                      "where id = %s", (old["id"],))
        admin.execute("insert into job_events (job_id, at, kind, actor, fencing_token, details) values "
                      "(%s, '2026-01-01T00:00:00Z', 'side_effect_started', 'w2', %s, "
                      "'{\"external_request_id\": \"ext-old\"}')", (old["id"], old_c["fencing_token"]))
    finally:
        run(admin, "demo/exact_mode", on=False)
    found = {r["id"]: r["side_effect_started_at"] for r in run(admin, "views/approvals")}
    assert found[e["id"]] == ev["at"]
    assert found[old["id"]].isoformat().startswith("2026-01-01T00:00:00")
    # the trigger's old name is the database's alone; the new one a worker may report only for a
    # call it held (a read-only request marks no side effect), never for someone else's
    with h.as_login(db, A) as a:
        assert sqlstate_of(a, "insert into job_events (job_id, kind, actor, fencing_token) "
                              "values (%s, 'side_effect_started', %s, 1)", (e["id"], A)) == "LCH02"
        with pytest.raises(ProtocolViolation, match="never held"):
            h.record_event(a, c, "tool_request_started", A, details={"external_request_id": "forged"})
        h.enqueue(a, "search")
        mine = h.claim(a, A, ["search"])
        assert h.record_event(a, mine, "tool_request_started", A, details={"external_request_id": "r-1"})
        assert sqlstate_of(a, "insert into job_events (job_id, kind, actor, fencing_token, state_to) "
                              "values (%s, 'note', %s, %s, 'succeeded')",
                           (mine["id"], A, mine["fencing_token"])) == "42501", "a report changes nothing"


def test_a_worker_logins_heartbeats_stay_hot_and_trigger_free(db, logins, admin):
    with h.as_login(db, A) as a:
        e = h.enqueue(a, "search")
        c = h.claim(a, A)
        # each backend flushes its own counters, when it goes idle: make the worker's due now
        a.execute("select pg_stat_force_next_flush()")
        before = h.tool_jobs_updates(admin)
        count = len(h.events(admin, e["id"]))
        for _ in range(50):
            assert h.heartbeat(a, c, A) is not None
        a.execute("select pg_stat_force_next_flush()")
    updates, hot = h.tool_jobs_updates(admin, since=before)
    assert updates >= 50 and hot / updates >= 0.9, (updates, hot)
    assert len(h.events(admin, e["id"])) == count, "a heartbeat journals nothing"


def test_the_reference_worker_says_at_once_when_its_id_is_not_its_logins(db, logins, admin):
    """A worker started with a foreign worker_id stops before its first claim with the expected
    form, instead of retrying a refused claim for ever."""
    from psycopg.conninfo import make_conninfo

    from console.worker import Worker

    h.enqueue(admin, "search")
    worker = Worker(make_conninfo(db.dsn, user=A), "someone-else", lambda ctx: {"ok": True})
    with pytest.raises(PermissionDenied, match=f"may own calls only as {A} or {A}:<name>"):
        worker.run(threading.Event(), max_calls=1)
    done = Worker(make_conninfo(db.dsn, user=A), f"{A}:w-1", lambda ctx: {"ok": True}).run(threading.Event(),
                                                                                           max_calls=1)
    assert done == 1


def test_a_worker_cannot_erase_the_mark_of_an_unverifiable_side_effect(db, logins, admin):
    """The mark (side_effect_started_at) is what sends a lost answer to a human (LCS07), and the
    external request id is what the human checks: the owner may set them, never clear or change
    them on its own, or a plain retryable failure would run the payment again unapproved."""
    with h.as_login(db, A) as a:
        h.enqueue(a, "pay")
        c = h.claim(a, A, ["pay"])
        assert h.start_side_effect(a, c, A, request_id="pay-req-1") is not None
        for stmt in ("update tool_jobs set side_effect_started_at = null where id = %s",
                     "update tool_jobs set external_request_id = 'pay-req-2' where id = %s",
                     "update tool_jobs set external_request_id = null where id = %s"):
            state = sqlstate_of(a, stmt, (c["id"],))
            row = raw(admin, c["id"])
            assert row["side_effect_started_at"] is not None and row["external_request_id"] == "pay-req-1", \
                (stmt, state)
        time.sleep(0.01)  # a later transaction: a later now()
        # an unverifiable request goes out once per human decision (migration 0014): no second start
        assert h.start_side_effect(a, c, A, request_id="pay-req-2") is None
        assert raw(admin, c["id"])["external_request_id"] == "pay-req-1"
        assert [e["details"].get("external_request_id") for e in h.events(admin, c["id"])
                if e["kind"] == "tool_request_started"] == ["pay-req-1"]
        assert sqlstate_of(a, "update tool_jobs set side_effect_started_at = side_effect_started_at - "
                              "interval '1 hour' where id = %s", (c["id"],)) == "LCS07", "not back in time"
        failed = h.fail(a, c, A)
        assert failed is None or failed["state"] == "outcome_unknown", failed
        assert raw(admin, c["id"])["state"] == "outcome_unknown", "never back in the queue without a human"
    h.approve(admin, c["id"], "outcome_unknown", c["fencing_token"], operator="ana")
    approved = raw(admin, c["id"])
    assert approved["state"] == "queued" and approved["side_effect_started_at"] is None
    assert approved["external_request_id"] == "pay-req-1", "the next owner sees which request may have run"
