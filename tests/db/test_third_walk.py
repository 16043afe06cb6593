"""What the third attacker walk got through, as the users it hurt would see it (migration 0015):
the refusals themselves are replayed in tests/db/test_shadows.py."""

from __future__ import annotations

import contextlib
import time

import psycopg

from console.control.supervisor import tick
from console.db.connect import run_one
from tests.helpers import (
    SLOW,
    as_login,
    claim,
    enqueue,
    heartbeat,
    register_tool,
    register_tree,
    request_shutdown,
    wait_until,
)

W1, W2 = "lc_walk_w1", "lc_walk_w2"
LOGINS = {W1: "leasectl_worker", W2: "leasectl_worker", "lc_walk_op": "leasectl_operator"}
TOOLS = {"search": ("read_only", SLOW)}


def test_enqueueing_an_existing_key_locks_nothing(db, conn, logins):
    """Before: leasectl_enqueue's upsert locked the existing row, and a transaction held open kept
    its owner's heartbeats waiting until the lease ran out."""
    call = enqueue(conn, "search", key="victim-key")
    with as_login(db, W1) as owner:
        held = claim(owner, W1, ["search"])
        assert held["id"] == call["id"]
        with as_login(db, W2) as attacker:
            attacker.execute("begin")
            again = run_one(attacker, "worker/enqueue", tool="search", idempotency_key="victim-key", payload=None,
                            agent_id=None, session_id=None, deadline_at=None, model=None, provider=None)
            assert again["id"] == call["id"] and not again["created"]
            owner.execute("set lock_timeout = '300ms'")
            assert heartbeat(owner, held, W1) is not None, "the owner renews while the other transaction is open"
            attacker.execute("rollback")


def test_an_existing_key_registers_no_tool(conn):
    enqueue(conn, "search", key="k-known")
    run_one(conn, "worker/enqueue", tool="made_up_tool", idempotency_key="k-known", payload=None, agent_id=None,
            session_id=None, deadline_at=None, model=None, provider=None)
    assert conn.execute("select count(*) as n from tools where name = 'made_up_tool'").fetchone()["n"] == 0


def test_an_agent_named_like_an_operator_cannot_block_that_operators_drain(db, conn, logins):
    register_tree(conn, {"planner-1": None, "team-1": "planner-1"})
    with as_login(db, W1) as w:
        w.execute("insert into agents (id, parent_id, kind) values ('alice', 'team-1', 'worker')")
    with as_login(db, "lc_walk_op") as op:
        made = request_shutdown(op, "planner-1", operator="alice")
    assert made is not None and made["requested_by"] == "alice"


def test_the_control_plane_ends_a_worker_session_that_sits_on_the_fleets_rows(db, conn, logins):
    """Before: a worker login that share-locked an agent's row in a transaction left open (its
    timeouts set to 0) stalled that subtree's drain for as long as it liked."""
    register_tree(conn, {"planner-1": None})
    w = as_login(db, W1)
    try:
        w.execute("set idle_in_transaction_session_timeout = 0")
        w.execute("begin")
        w.execute("select leasectl_agent_state('planner-1', true)")  # share-locks the agent's row
        pid = w.info.backend_pid
        time.sleep(5.3)  # the least the control plane allows a transaction (never less than 5 s)
        report = tick(conn, supervisor_id="test", sweep=False, lock_hold_limit=0.2)
        assert any(str(pid) in note for note in report.notes), report.notes
        wait_until(lambda: conn.execute("select count(*) as n from pg_stat_activity where pid = %s",
                                        (pid,)).fetchone()["n"] == 0, what="the session to end")
    finally:
        with contextlib.suppress(psycopg.Error):
            w.close()
    ended = conn.execute("select details from fleet_events where kind = 'session_ended' order by id desc limit 1"
                         ).fetchone()["details"]
    assert ended["pid"] == pid and ended["login"] == W1 and ended["ended"] is True
    assert conn.execute("update agents set state = 'draining' where id = 'planner-1' returning id").fetchone()


def test_a_worker_transaction_of_one_statement_is_never_ended(db, conn, logins):
    register_tree(conn, {"planner-1": None})
    with as_login(db, W1) as w:
        w.execute("select leasectl_agent_state('planner-1', true)")  # autocommit: over at once
        time.sleep(0.3)
        report = tick(conn, supervisor_id="test", sweep=False, lock_hold_limit=0.2)
        assert not any("ended session" in note for note in report.notes)
        assert w.execute("select 1 as one").fetchone()["one"] == 1


def test_a_heartbeat_committed_after_the_control_plane_began_does_not_break_its_step(db, conn, logins):
    """Before: a CHECK read now() against heartbeat_at, and a worker heartbeating in a tight loop made
    every step of the control plane's transaction fail: the abort never reached its call."""
    register_tool(conn, "fast", "read_only", lease_seconds=30, heartbeat_seconds=5, missed_heartbeats=2,
                  jitter_seconds=5)
    enqueue(conn, "fast")
    with as_login(db, W1) as w, db.connect() as plane:
        c = claim(w, W1, ["fast"])
        with plane.transaction():
            plane.execute("select now()")
            time.sleep(0.2)
            assert heartbeat(w, c, W1) is not None  # committed after the control plane's transaction began
            asked = plane.execute("update tool_jobs set state = 'cancel_requested', cancel_requested_at = now(), "
                                  "cancel_requested_by = 'control-plane' where id = %s returning state",
                                  (c["id"],)).fetchone()
        assert asked["state"] == "cancel_requested"


def test_an_honest_check_that_cannot_tell_is_journaled_and_verify_holds(db, conn):
    from psycopg.types.json import Jsonb

    from tests.helpers import cli_invoker, expire_lease, start_side_effect

    register_tool(conn, "erp", "mutating_verifiable", lease_seconds=1, heartbeat_seconds=0.25, missed_heartbeats=2,
                  jitter_seconds=0.25)
    enqueue(conn, "erp")
    first = claim(conn, "w1", ["erp"])
    start_side_effect(conn, first, "w1", "req-1")
    expire_lease(conn, first["id"])
    second = claim(conn, "w2", ["erp"])
    checked = run_one(conn, "worker/record_check", job_id=second["id"], worker_id="w2",
                      fencing_token=second["fencing_token"], found="unknown", details=Jsonb({}))
    assert checked["state"] == "outcome_unknown"
    kinds = [e["kind"] for e in conn.execute("select kind from job_events where job_id = %s order by id",
                                             (second["id"],))]
    assert kinds[-2:] in (["state_changed", "side_effect_checked"], ["side_effect_checked", "state_changed"])
    result = cli_invoker(db.dsn, "alice")("audit", "verify", "--json")
    assert result.exit_code == 0, result.output
