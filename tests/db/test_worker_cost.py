"""Migration 0009: cheaper triggers with every rule kept, and NOTIFY only for notable changes.

* the guard's fast paths (a claim, an owner's completion) accept exactly what its rules accept:
  every way a claim- or completion-shaped update can break a rule is still refused, with the
  same SQLSTATE;
* the guard fires by column list, plus a small WHEN for finished and queued calls: an update of
  a finished call is refused whatever columns it sets, a lease-only update of a running call
  still fires nothing (HOT, no history);
* history is written as before;
* NOTIFY: heard for what a human must see at once, silent for the plain traffic of claims,
  completions and enqueues (the console's poll shows those).
"""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from console.db.connect import Conn, run
from tests import helpers as h

W = "lc_cost_worker"
LOGINS = {W: "leasectl_worker"}
TOOLS = {"search": ("read_only", h.SLOW_30), "pay": ("mutating_unverifiable", h.SLOW_30), "quick": ("read_only", h.FAST)}


def sqlstate_of(conn: Conn, statement: str, params: tuple = ()) -> str | None:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(statement, params)
    return info.value.sqlstate


CLAIM_SHAPE = ("update tool_jobs set state = 'running', owner_id = %s, lease_until = now() + interval '1 minute', "
               "fencing_token = fencing_token + {bump}, attempt = attempt + 1{extra} where id = %s")
COMPLETE_SHAPE = ("update tool_jobs set state = 'succeeded', result = '{{}}', lease_until = null{extra} "
                  "where id = %s")


# ------------------------------------------------------------------ the fast paths refuse what the rules refuse


@pytest.mark.parametrize(("bump", "extra", "owner", "sqlstate"), [
    (1, ", payload = '{\"forged\": 1}'", "w1", "LCS05"),
    (1, ", idempotency_key = 'other'", "w1", "LCS05"),
    (1, ", tool = 'pay'", "w1", "LCS05"),
    (1, ", created_at = now() - interval '1 day'", "w1", "LCS05"),
    (0, "", "w1", "LCS02"),          # a grant without a new token
    (1, "", None, "LCS01"),          # running without an owner
])
def test_a_claim_shaped_update_that_breaks_a_rule_is_refused(conn, bump, extra, owner, sqlstate):
    e = h.enqueue(conn, "search")
    statement = CLAIM_SHAPE.format(bump=bump, extra=extra)
    assert sqlstate_of(conn, statement, (owner, e["id"])) == sqlstate
    assert h.job(conn, e["id"])["state"] == "queued"


@pytest.mark.parametrize(("extra", "sqlstate"), [
    (", owner_id = 'someone-else'", "LCS01"),    # ownership is granted by a claim only
    (", payload = '{\"forged\": 1}'", "LCS05"),
    (", idempotency_key = 'other'", "LCS05"),
    (", fencing_token = fencing_token - 1", "LCS02"),
])
def test_a_completion_shaped_update_that_breaks_a_rule_is_refused(conn, extra, sqlstate):
    e = h.enqueue(conn, "search")
    h.claim(conn, "w1")
    assert sqlstate_of(conn, COMPLETE_SHAPE.format(extra=extra), (e["id"],)) == sqlstate
    assert h.job(conn, e["id"])["state"] == "running"


def test_a_worker_login_still_cannot_claim_under_a_foreign_id(db, logins, conn):
    e = h.enqueue(conn, "search")
    with h.as_login(db, W) as w:
        assert sqlstate_of(w, CLAIM_SHAPE.format(bump=1, extra=""), ("someone-else", e["id"])) == "LCS08"
        assert h.claim(w, f"{W}:w-1")["id"] == e["id"], "its own id takes the fast path"


def test_the_fast_paths_do_what_the_rules_did(conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    done = h.complete(conn, c, "w1", {"ok": 1})
    assert done["state"] == "succeeded" and done["finished_at"] is not None, "finished_at stamped"
    assert done["completed_despite_cancel"] is False
    # a completion after a cancel request is not a fast path: recorded as completed despite it
    e2 = h.enqueue(conn, "search")
    c2 = h.claim(conn, "w1")
    h.cancel(conn, e2["id"], "running", c2["fencing_token"])
    assert h.complete(conn, c2, "w1")["completed_despite_cancel"] is True
    # the history of a claim and a completion, as before 0009
    story = [(ev["kind"], ev["actor"], ev["fencing_token"], ev["state_from"], ev["state_to"], ev["owner_to"])
             for ev in h.events(conn, e["id"])]
    assert story[1:] == [("claimed", "w1", 1, "queued", "running", "w1"),
                         ("state_changed", "w1", 1, "running", "succeeded", "w1")]
    details = [ev["details"] for ev in h.events(conn, e["id"])]
    assert details[1] == {"attempt": 1, "previous_token": 0} and details[2]["attempt"] == 1 and details[2]["previous_lease_until"]


# ------------------------------------------------------------------ which updates fire the guard


def test_a_finished_call_is_refused_whatever_the_update_sets(conn):
    e = h.enqueue(conn, "search")
    h.complete(conn, h.claim(conn, "w1"), "w1")
    for sets in ("lease_until = now() + interval '1 hour'", "heartbeat_at = now()", "result = '{}'",
                 "finished_at = null", "state = 'failed'"):
        assert sqlstate_of(conn, f"update tool_jobs set {sets} where id = %s", (e["id"],)) == "LCS03", sets
    # setting what is already there changes nothing (an upsert's touch): accepted since 0001, no history
    before = len(h.events(conn, e["id"]))
    conn.execute("update tool_jobs set state = 'succeeded' where id = %s", (e["id"],))
    assert len(h.events(conn, e["id"])) == before


def test_a_queued_call_is_not_rewritten_in_place_by_a_worker_whatever_it_sets(db, logins, conn):
    e = h.enqueue(conn, "search")
    with h.as_login(db, W) as w:
        for sets in ("heartbeat_at = now()", "lease_until = now() + interval '1 hour'", "attempt = 99"):
            assert sqlstate_of(w, f"update tool_jobs set {sets} where id = %s", (e["id"],)) == "LCS10", sets


def test_the_payload_of_a_running_call_never_changes(db, logins, conn):
    """LCS05 names the payload; before 0009 the guard's WHEN clause never fired for it alone. A
    worker login has no column privilege on payload at all; the guard stops a role that has."""
    e = h.enqueue(conn, "search")
    with h.as_login(db, W) as w:
        h.claim(w, W)
        assert sqlstate_of(w, "update tool_jobs set payload = '{\"forged\": 1}' where id = %s", (e["id"],)) == "42501"
    assert sqlstate_of(conn, "update tool_jobs set payload = '{\"forged\": 1}' where id = %s", (e["id"],)) == "LCS05"


def test_a_heartbeat_still_fires_nothing(db, conn):
    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    before = len(h.events(conn, e["id"]))
    for _ in range(5):
        assert h.heartbeat(conn, c, "w1") is not None
        assert run(conn, "worker/heartbeat_many", job_ids=[c["id"]], worker_id="w1",
                   fencing_tokens=[c["fencing_token"]])
    assert len(h.events(conn, e["id"])) == before


# ------------------------------------------------------------------ what NOTIFY is for


@pytest.fixture
def listener(db):
    with db.connect() as c:
        run(c, "meta/listen")
        yield c


def heard(listener: Conn, wanted: int = 0, job_id: object = None) -> list[dict]:
    """Every notification committed so far (they arrive at commit; give them a moment): first
    `wanted` of them (of `job_id`'s, if given), for 30 s at most, since a loaded machine's server
    can send them later than the moment (0.3 s); then the moment, for any beyond."""
    got: list[dict] = []
    deadline = time.monotonic() + 30
    while len([n for n in got if job_id is None or n.get("id") == str(job_id)]) < wanted \
            and (left := deadline - time.monotonic()) > 0:
        got += [json.loads(n.payload) for n in listener.notifies(timeout=min(left, 1.0), stop_after=1)]
    return got + [json.loads(n.payload) for n in listener.notifies(timeout=0.3)]


def test_plain_traffic_is_not_announced(conn, listener):
    e = h.enqueue(conn, "search")                       # enqueue
    c = h.claim(conn, "w1")                             # plain claim
    h.heartbeat(conn, c, "w1")                          # heartbeat
    h.complete(conn, c, "w1")                           # plain completion
    e2 = h.enqueue(conn, "pay")
    c2 = h.claim(conn, "w1")
    h.start_side_effect(conn, c2, "w1")                 # the start of a request
    e3 = h.enqueue(conn, "search")
    c3 = h.claim(conn, "w1")
    assert h.fail(conn, c3, "w1", retryable=True)["state"] == "queued"   # a worker's requeue
    row = h.record_event(conn, {"id": e["id"], "fencing_token": 1}, "tool_request_started", "w1")
    assert row["notified"] is False
    assert heard(listener) == [], "claims, completions, enqueues and requeues wait for the poll"
    assert {e2["id"], e3["id"]}  # (used)


def test_notable_changes_are_announced(conn, listener):
    def announced(job_id, wanted: int) -> list[dict]:
        return [n for n in heard(listener, wanted, job_id) if n.get("id") == str(job_id)]

    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    assert h.cancel(conn, e["id"], "running", c["fencing_token"], operator="zoe")
    got = announced(e["id"], 2)
    assert {"state": "cancel_requested"}.items() <= next(n for n in got if "state" in n).items()
    assert any(n.get("kind") == "operator_cancel" for n in got), "the operator's journal row too"
    assert h.confirm_cancel(conn, c, "w1")
    assert [n["state"] for n in announced(e["id"], 1)] == ["cancelled"], "the answer to a cancel"

    e = h.enqueue(conn, "pay")
    c = h.claim(conn, "w1")
    h.start_side_effect(conn, c, "w1")
    assert h.report_unknown(conn, c, "w1")
    assert [n["state"] for n in announced(e["id"], 1)] == ["outcome_unknown"]
    assert h.approve(conn, e["id"], "outcome_unknown", c["fencing_token"], operator="bob")
    assert {n.get("state") or n.get("kind") for n in announced(e["id"], 2)} == {"queued", "operator_approve_retry"}
    h.complete(conn, h.claim(conn, "w1"), "w1")           # the approved retry runs (the oldest queued call)

    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    assert h.fail(conn, c, "w1", retryable=False)["state"] == "failed"
    assert [n["state"] for n in announced(e["id"], 1)] == ["failed"]

    e = h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    assert h.cancel(conn, e["id"], "queued", 0, operator="zoe") is None, "refused: it changed since"
    assert [n["kind"] for n in announced(e["id"], 1)] == ["operator_cancel"], "a refused action is heard too"
    assert h.mark_terminal(conn, e["id"], "running", c["fencing_token"], "failed", force=True)
    got = announced(e["id"], 2)
    assert {n.get("state") or n.get("kind") for n in got} == {"failed", "operator_mark_terminal"}
    for kind in ("heartbeat_lost", "result_rejected", "receiver_rejected", "ownership_unknown"):
        assert h.record_event(conn, c, kind, "w1")["notified"] is True
    assert [n["kind"] for n in announced(e["id"], 4)] == ["heartbeat_lost", "result_rejected", "receiver_rejected",
                                                       "ownership_unknown"], "stale writes refused, trouble met"

    e = h.enqueue(conn, "quick")
    c = h.claim(conn, "w1")
    h.expire_lease(conn, e["id"])
    assert [s["state_to"] for s in h.sweep(conn)] == ["queued"]
    assert [n["state"] for n in announced(e["id"], 1)] == ["queued"], "the control plane's sweep"
    again = h.claim(conn, "w2")
    assert again["id"] == e["id"]
    assert announced(e["id"], 0) == [], "a claim after a sweep is a plain claim"


def test_the_fused_statement_claims_its_next_call_before_it_writes_the_result(conn):
    """complete_and_claim.sql scans the queue before its completion and triggers run: a snapshot
    that aged meanwhile would lock calls other workers just claimed (FOR UPDATE follows the row
    to its new version, skips it, and keeps the lock until commit), and their completions would
    wait for this commit. The history shows the order: the next call's claim comes first."""
    from psycopg.types.json import Jsonb

    from console.db.connect import run_one

    first = h.enqueue(conn, "search")
    second = h.enqueue(conn, "search")
    held = h.claim(conn, "w1")
    assert held["id"] == first["id"]
    answer = run_one(conn, "worker/complete_and_claim", job_id=held["id"], worker_id="w1",
                     fencing_token=held["fencing_token"], result=Jsonb({"ok": 1}), tools=None)
    assert answer["completed"] is True and answer["id"] == second["id"]
    succeeded = [e for e in h.events(conn, first["id"]) if e["state_to"] == "succeeded"]
    claimed = [e for e in h.events(conn, second["id"]) if e["kind"] == "claimed"]
    assert len(succeeded) == 1 and len(claimed) == 1
    assert claimed[0]["id"] < succeeded[0]["id"], "the claim ran after the completion's write"
    assert claimed[0]["at"] == succeeded[0]["at"], "one transaction: one instant for both"
