"""Fleet shutdown (docs/seeds.md §003): drain and abort a subtree, revocation down the delegation chain,
the reconciliation record written from outside before anything is terminated."""

from __future__ import annotations

import threading

import psycopg
import pytest

from console.control.supervisor import advance, tick
from console.db.connect import Conn, run_one
from console.shared.errors import ProtocolViolation
from tests.helpers import (
    as_login,
    claim,
    complete,
    confirm_cancel,
    enqueue,
    give_grant,
    heartbeat,
    job,
    register_agent,
    register_tree,
    request_shutdown,
    revoke_grant,
    start_side_effect,
    try_enqueue,
    wait_until,
)

# planner-1 delegates to retrieval, code and review; code delegates to a sandbox (the grandchild)
TREE = {"planner-1": None, "retrieval-1": "planner-1", "code-1": "planner-1", "review-1": "planner-1",
        "sandbox-1": "code-1"}
SLOW = {"lease_seconds": 60, "heartbeat_seconds": 10, "missed_heartbeats": 2, "jitter_seconds": 10}
TOOLS = {"search": ("read_only", SLOW), "pay": ("mutating_unverifiable", SLOW)}


@pytest.fixture
def fleet(db, conn):
    """The tree TREE of agents registered: the test database."""
    register_tree(conn, TREE)
    return db


def until_terminated(conn: Conn, shutdown_id, timeout: float = 20) -> dict:
    """Tick the control plane until the shutdown is over; the record it wrote."""
    def done():
        tick(conn, supervisor_id="sup-test", sweep=False)
        return run_one(conn, "views/shutdowns", id_low=shutdown_id, id_high=shutdown_id, limit=1)["state"] == "terminated"
    wait_until(done, timeout=timeout, interval=0.1, what="the shutdown to finish")
    return conn.execute("select * from reconciliation_records where shutdown_id = %s", (shutdown_id,)).fetchone()


def shutdown_state(conn: Conn, shutdown_id) -> str:
    return conn.execute("select state from shutdowns where id = %s", (shutdown_id,)).fetchone()["state"]


def resolutions(record: dict) -> dict[str, str]:
    return {str(c["job_id"]): c["resolution"] for c in record["in_flight"]}


# ------------------------------------------------------------------------------ drain


def test_drain_with_a_silent_grandchild(fleet):
    with fleet.connect() as c:
        finishing = enqueue(c, "search", agent_id="retrieval-1")
        silent = enqueue(c, "search", agent_id="sandbox-1")
        w_finish = claim(c, "w-retrieval")
        w_silent = claim(c, "w-sandbox")
        assert (w_finish["id"], w_silent["id"]) == (finishing["id"], silent["id"])
        waiting = enqueue(c, "search", agent_id="review-1")
        credential = give_grant(c, "sandbox-1", "credential", "vault:prod-db", issued_by="code-1")
        lock = give_grant(c, "review-1", "file_lock", "repo:main", issued_by="planner-1", expires_in=0.5)
        assert credential and lock

        s = request_shutdown(c, "planner-1", "drain", window=1.5, reason="deploy")
        assert s is not None and s["state"] == "requested"
        tick(c, supervisor_id="sup-test", sweep=False)
        assert shutdown_state(c, s["id"]) == "draining"
        states = {r["id"]: r["state"] for r in c.execute("select id, state from agents")}
        assert set(states.values()) == {"draining"}, "the whole subtree drains, grandchild included"
        assert job(c, waiting["id"])["state"] == "cancelled", "a queued call never starts"
        assert job(c, silent["id"])["state"] == "running", "running calls get the window"
        # a child learns it through its heartbeat
        assert run_one(c, "agent/heartbeat", agent_id="sandbox-1")["shutting_down"] is True

        # the retrieval worker finishes in the window and the agents confirm; the sandbox says nothing
        assert complete(c, w_finish, "w-retrieval") is not None
        for agent in ("planner-1", "retrieval-1", "code-1", "review-1"):
            assert run_one(c, "agent/confirm_terminated", agent_id=agent) is not None
        record = until_terminated(c, s["id"])

        # the silent worker was fenced out: its heartbeat and its result change nothing now
        assert heartbeat(c, w_silent, "w-sandbox") is None
        assert complete(c, w_silent, "w-sandbox") is None
        assert job(c, silent["id"])["fencing_token"] > w_silent["fencing_token"]
        assert {r["state"] for r in c.execute("select state from agents")} == {"terminated"}

    assert resolutions(record) == {str(finishing["id"]): "completed", str(silent["id"]): "cancel_unconfirmed",
                                   str(waiting["id"]): "never_started"}
    assert [u["agent_id"] for u in record["children_unaccounted"]] == ["sandbox-1"]
    assert record["children_unaccounted"][0]["parent_id"] == "code-1"
    assert {x["agent_id"] for x in record["children_confirmed"]} == {"planner-1", "retrieval-1", "code-1", "review-1"}
    assert [g["grant_id"] for g in record["grants_revoked"]] == [str(credential["id"])]
    assert record["grants_revoked"][0]["revoked_by"] == "control-plane"
    assert record["grants_revoked"][0]["expires_at"] is not None, "a revoked grant keeps its expiry in the record"
    assert [g["grant_id"] for g in record["grants_expired"]] == [str(lock["id"])]
    assert record["written_by"] == "sup-test"


def test_a_drained_subtree_whose_calls_all_finish_in_time_never_aborts(fleet):
    with fleet.connect() as c:
        e = enqueue(c, "search", agent_id="code-1")
        w = claim(c, "w1")
        s = request_shutdown(c, "code-1", "drain", window=30)
        tick(c, supervisor_id="sup-test", sweep=False)
        assert complete(c, w, "w1") is not None
        for agent in ("code-1", "sandbox-1"):
            run_one(c, "agent/confirm_terminated", agent_id=agent)
        record = until_terminated(c, s["id"], timeout=10)
        phases = [r["details"].get("state_to") for r in c.execute(
            "select details from fleet_events where shutdown_id = %s and kind = 'shutdown_state_changed' "
            "order by id", (s["id"],))]
        untouched = {r["id"]: r["state"] for r in c.execute("select id, state from agents")}
    assert phases == ["draining", "reconciling", "terminated"], "no abort: everything finished in the window"
    assert resolutions(record) == {str(e["id"]): "completed"}
    assert record["children_unaccounted"] == []
    assert untouched["planner-1"] == "running" and untouched["review-1"] == "running", "only the subtree"


# ------------------------------------------------------------------------- revocation


def test_revocation_by_a_sibling_is_refused_by_a_grandparent_allowed(fleet):
    with fleet.connect() as c:
        g = give_grant(c, "sandbox-1", "credential", "vault:prod-db", issued_by="code-1")
        assert revoke_grant(c, g["id"], "review-1") is None, "a sibling of the holder's parent"
        assert revoke_grant(c, g["id"], "sandbox-1") is None, "not the holder itself either"
        # the database refuses it whatever SQL is sent
        with pytest.raises(psycopg.Error) as refused:
            c.execute("update grants set revoked_at = now(), revoked_by = 'review-1' where id = %s", (g["id"],))
        assert refused.value.sqlstate == "LCF04"
        done = revoke_grant(c, g["id"], "planner-1")
        assert done is not None and done["revoked_by"] == "planner-1"
        assert revoke_grant(c, g["id"], "code-1") is None, "already revoked: zero rows"
        journal = c.execute("select kind, actor from fleet_events where grant_id = %s order by id", (g["id"],)).fetchall()
    assert [(j["kind"], j["actor"]) for j in journal] == [("grant_issued", "code-1"), ("grant_revoked", "planner-1")]


def test_the_parent_may_revoke_and_so_may_the_control_plane(fleet):
    with fleet.connect() as c:
        g1 = give_grant(c, "sandbox-1", "queue_reservation", "queue:builds", issued_by="code-1")
        g2 = give_grant(c, "sandbox-1", "rate_limit_token", "openai:tpm", issued_by="planner-1")
        assert revoke_grant(c, g1["id"], "code-1") is not None
        assert revoke_grant(c, g2["id"], "control-plane") is not None


def test_only_the_control_plane_role_may_revoke_as_the_control_plane(fleet, pg_server):
    from tests.helpers import ensure_login
    with pg_server.admin() as admin:
        ensure_login(admin, "lc_test_fleet_worker", "leasectl_worker")
    with fleet.connect() as c:
        g = give_grant(c, "sandbox-1", issued_by="code-1")
    worker = psycopg.connect(psycopg.conninfo.make_conninfo(fleet.dsn, user="lc_test_fleet_worker"),
                             autocommit=True)
    with worker:
        # not even visible for update: the worker registered no ancestor of the holder (0013)
        assert worker.execute("update grants set revoked_at = now(), revoked_by = 'control-plane' where id = %s",
                              (g["id"],)).rowcount == 0


WORKER_X, WORKER_Y, SUPERVISOR_Z = "lc_test_fleet_x", "lc_test_fleet_y", "lc_test_fleet_sup"


@pytest.fixture
def owned_fleet(fleet, pg_server):
    """planner-1's tree registered by the database owner; team-1 registered by login X, its child
    team-child by login Y (a delegation across logins), each holding a grant."""
    from tests.helpers import ensure_login
    with pg_server.admin() as admin:
        ensure_login(admin, WORKER_X, "leasectl_worker")
        ensure_login(admin, WORKER_Y, "leasectl_worker")
        ensure_login(admin, SUPERVISOR_Z, "leasectl_supervisor")
    with as_login(fleet, WORKER_X) as x:
        assert register_agent(x, "team-1") is not None
    with as_login(fleet, WORKER_Y) as y:
        assert register_agent(y, "team-child", "team-1") is not None
    with fleet.connect() as c:
        grants = {agent: give_grant(c, agent, issued_by="control-plane")["id"] for agent in ("sandbox-1", "team-child")}
    return fleet, grants


def test_an_agent_is_owned_by_the_login_that_registered_it_whatever_it_writes(owned_fleet):
    fleet, _ = owned_fleet
    with as_login(fleet, WORKER_Y) as y:
        row = y.execute("insert into agents (id, kind, owner_role) values ('posing-1', 'worker', %s) "
                        "returning owner_role", (WORKER_X,)).fetchone()
    assert row["owner_role"] == WORKER_Y, "a login cannot register an agent in another login's name"
    with fleet.connect() as c:
        owners = {r["id"]: r["owner_role"] for r in c.execute("select id, owner_role from agents")}
        assert c.execute("insert into agents (id, kind, owner_role) values ('for-x', 'worker', %s) returning owner_role",
                         (WORKER_X,)).fetchone()["owner_role"] == WORKER_X, "the control plane may register for a login"
    assert owners["team-1"] == WORKER_X and owners["team-child"] == WORKER_Y


def test_a_login_revokes_only_below_an_agent_it_registered_whatever_name_it_writes(owned_fleet):
    fleet, grants = owned_fleet
    with as_login(fleet, WORKER_Y) as y:
        assert revoke_grant(y, grants["team-child"], "team-1") is None, "Y registered the holder, not its ancestor"
        assert y.execute("update grants set revoked_at = now(), revoked_by = 'team-1' where id = %s",
                         (grants["team-child"],)).rowcount == 0, "by hand neither: the row is not Y's to touch"
    with as_login(fleet, WORKER_X) as x:
        for name in ("planner-1", "code-1", "control-plane"):
            assert revoke_grant(x, grants["sandbox-1"], name) is None, f"X owns no ancestor of sandbox-1 ({name})"
        assert revoke_grant(x, grants["team-child"], "planner-1") is None, "not an ancestor of team-child"
        done = revoke_grant(x, grants["team-child"], "team-1")
        assert done is not None and done["revoked_by"] == "team-1"
    with fleet.connect() as c:
        journal = c.execute("select actor, db_role from fleet_events where grant_id = %s and kind = 'grant_revoked'",
                            (grants["team-child"],)).fetchone()
        assert c.execute("select revoked_at from grants where id = %s", (grants["sandbox-1"],)).fetchone()["revoked_at"] is None
    assert journal == {"actor": "team-1", "db_role": WORKER_X}


def test_the_control_plane_role_revokes_any_grant(owned_fleet):
    fleet, grants = owned_fleet
    with fleet.connect() as c:
        another = give_grant(c, "sandbox-1", issued_by="control-plane")["id"]
    with as_login(fleet, SUPERVISOR_Z) as z:
        assert revoke_grant(z, grants["sandbox-1"], "control-plane") is not None
        assert revoke_grant(z, grants["team-child"], "team-1") is not None, "in an ancestor's name too"
        assert revoke_grant(z, another, "review-1") is None, "but only in the name of an ancestor or its own"


# ------------------------------------------------------------------ refusing new work


def test_a_draining_agent_gets_no_new_call_and_its_queued_calls_are_not_claimed(fleet):
    with fleet.connect() as c:
        queued = enqueue(c, "search", agent_id="review-1")
        # the agent is draining (set here by hand, before any supervisor step cancels the queued call)
        c.execute("update agents set state = 'draining' where id = 'review-1'")
        assert try_enqueue(c, "search", "review-1") is None, "enqueue refuses: zero rows"
        assert claim(c, "w1") is None, "claim skips a call of an agent that is not running"
        assert try_enqueue(c, "search", "retrieval-1") is not None, "a running sibling still works"
        assert try_enqueue(c, "search", "unregistered-agent") is not None, "agents outside the fleet are not fenced"
        assert job(c, queued["id"])["state"] == "queued"


def test_a_draining_parent_spawns_no_child_and_a_shutdown_is_requested_once(fleet):
    with fleet.connect() as c:
        s = request_shutdown(c, "code-1", "drain")
        assert s is not None
        assert request_shutdown(c, "planner-1", "abort") is None, "overlaps the shutdown of code-1 (ancestor)"
        assert request_shutdown(c, "sandbox-1", "abort") is None, "overlaps (descendant)"
        assert request_shutdown(c, "review-1", "drain") is not None, "a disjoint subtree is fine"
        tick(c, supervisor_id="sup-test", sweep=False)
        assert register_agent(c, "sandbox-2", "code-1") is None, "a draining subtree spawns no new children"
        refusals = c.execute("select details from fleet_events where kind = 'shutdown_refused' order by id").fetchall()
    assert [r["details"]["refusal"] for r in refusals] == ["a shutdown of code-1 is already under way"] * 2


def test_a_shutdown_requested_from_inside_the_subtree_is_refused(fleet):
    with fleet.connect() as c:
        with pytest.raises(ProtocolViolation) as refused:
            request_shutdown(c, "planner-1", "abort", operator="sandbox-1")
        assert refused.value.__cause__.sqlstate == "LCF01"
        assert "inside the subtree" in str(refused.value)
        assert request_shutdown(c, "code-1", "abort", operator="planner-1") is not None, "an ancestor may"


def test_terminated_without_a_record_is_refused(fleet):
    with fleet.connect() as c:
        s = request_shutdown(c, "review-1", "drain")
        c.execute("update shutdowns set state = 'draining' where id = %s", (s["id"],))
        c.execute("update shutdowns set state = 'reconciling' where id = %s", (s["id"],))
        with pytest.raises(psycopg.Error) as refused:
            c.execute("update shutdowns set state = 'terminated' where id = %s", (s["id"],))
        assert refused.value.sqlstate == "LCF03"
        with pytest.raises(psycopg.Error) as illegal:
            c.execute("update shutdowns set state = 'requested' where id = %s", (s["id"],))
        assert illegal.value.sqlstate == "LCF02"


def test_records_are_append_only(fleet):
    with fleet.connect() as c:
        s = request_shutdown(c, "review-1", "drain", window=0.2)
        run_one(c, "agent/confirm_terminated", agent_id="review-1")
        until_terminated(c, s["id"])
        for sql in ("update reconciliation_records set written_by = 'me'", "delete from reconciliation_records",
                    "truncate reconciliation_records", "delete from fleet_events"):
            with pytest.raises(psycopg.Error) as refused:
                c.execute(sql)
            assert refused.value.sqlstate == "LCF06", sql


# ------------------------------------------------------------------------------ abort


def test_abort_with_a_cancel_never_confirmed(fleet):
    with fleet.connect() as c:
        heard = enqueue(c, "search", agent_id="retrieval-1")
        deaf = enqueue(c, "search", agent_id="sandbox-1")
        w_heard, w_deaf = claim(c, "w-heard"), claim(c, "w-deaf")
        s = request_shutdown(c, "planner-1", "abort", window=1.5)
        tick(c, supervisor_id="sup-test", sweep=False)
        assert shutdown_state(c, s["id"]) == "aborting"
        assert job(c, deaf["id"])["state"] == "cancel_requested", "asked, not stopped"
        # both workers still own their calls and hear the cancel through the heartbeat
        beat = heartbeat(c, w_deaf, "w-deaf")
        assert beat is not None and beat["cancel_requested"] is True
        assert confirm_cancel(c, w_heard, "w-heard") is not None
        for agent in TREE:
            if agent != "sandbox-1":
                run_one(c, "agent/confirm_terminated", agent_id=agent)
        record = until_terminated(c, s["id"])
        fenced = job(c, deaf["id"])
        assert heartbeat(c, w_deaf, "w-deaf") is None, "fenced: the deaf worker's heartbeat changes nothing"
    assert resolutions(record) == {str(heard["id"]): "cancelled", str(deaf["id"]): "cancel_unconfirmed"}
    assert fenced["state"] == "cancelled" and fenced["fencing_token"] == w_deaf["fencing_token"] + 1
    assert "cancel unconfirmed" in fenced["terminal_reason"]


def test_abort_of_an_unverifiable_side_effect_goes_to_a_human(fleet):
    with fleet.connect() as c:
        e = enqueue(c, "pay", agent_id="code-1")
        w = claim(c, "w-pay")
        assert start_side_effect(c, w, "w-pay", request_id="bank-42") is not None
        s = request_shutdown(c, "code-1", "abort", window=0.5)
        for agent in ("code-1", "sandbox-1"):
            tick(c, supervisor_id="sup-test", sweep=False)
            run_one(c, "agent/confirm_terminated", agent_id=agent)
        record = until_terminated(c, s["id"])
        paid = job(c, e["id"])
        approvals = [str(r["id"]) for r in c.execute("select id from tool_jobs where state = 'outcome_unknown'")]
    assert resolutions(record) == {str(e["id"]): "outcome_unknown"}
    assert paid["state"] == "outcome_unknown" and paid["external_request_id"] == "bank-42"
    assert approvals == [str(e["id"])], "waits in the approvals queue: nobody retries it"


# -------------------------------------------------------------------- two supervisors


def test_two_supervisors_step_by_step_one_waits_for_the_other(fleet):
    with fleet.connect() as c:
        s = request_shutdown(c, "review-1", "drain", window=0.3)
        run_one(c, "agent/confirm_terminated", agent_id="review-1")
        first = fleet.connect(autocommit=False)
        held = run_one(first, "supervisor/shutdown_lock", shutdown_id=s["id"])
        assert held is not None and held["state"] == "requested"
        report = advance(c, s["id"], supervisor_id="second")
        assert report.notes == [] and shutdown_state(c, s["id"]) == "requested", "the second skips a held shutdown"
        first.rollback()
        first.close()
        record = until_terminated(c, s["id"])
    assert record["written_by"] == "sup-test"


def test_the_record_is_written_once_whoever_comes_second(fleet):
    with fleet.connect() as c:
        s = request_shutdown(c, "review-1", "drain", window=0.2)
        run_one(c, "agent/confirm_terminated", agent_id="review-1")
        until_terminated(c, s["id"])
        again = run_one(c, "supervisor/write_reconciliation", shutdown_id=s["id"], written_by="late")
        count = c.execute("select count(*) as n from reconciliation_records").fetchone()["n"]
    assert again is None and count == 1


def test_many_supervisors_at_once_write_one_record(fleet):
    with fleet.connect() as c:
        calls = [enqueue(c, "search", agent_id=a) for a in ("retrieval-1", "code-1", "sandbox-1", "review-1")]
        owned = [claim(c, f"w{i}") for i in range(2)]
        s = request_shutdown(c, "planner-1", "abort", window=0.5)
        for agent in TREE:
            run_one(c, "agent/confirm_terminated", agent_id=agent)  # refused until the subtree shuts down
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def supervise(name: str) -> None:
        try:
            with fleet.connect() as conn:
                barrier.wait()
                for _ in range(400):
                    tick(conn, supervisor_id=name, sweep=True)
                    for agent in TREE:
                        run_one(conn, "agent/confirm_terminated", agent_id=agent)
                    if shutdown_state(conn, s["id"]) == "terminated":
                        return
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=supervise, args=(f"sup-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    with fleet.connect() as c:
        records = c.execute("select * from reconciliation_records").fetchall()
        moves = [r["details"]["state_to"] for r in c.execute(
            "select details from fleet_events where kind = 'shutdown_state_changed' order by id")]
        states = {r["state"] for r in c.execute("select state from tool_jobs where id = any(%s)",
                                                ([x["id"] for x in calls],))}
    assert len(records) == 1
    assert moves == ["aborting", "reconciling", "terminated"], "each move made once"
    assert len(records[0]["in_flight"]) == 4 and states <= {"cancelled"}
    assert {r["resolution"] for r in records[0]["in_flight"]} == {"never_started", "cancel_unconfirmed"}
    assert len(owned) == 2


# ------------------------------------------------------------------- killed mid-shutdown


def test_a_supervisor_killed_mid_shutdown_leaves_nothing_half_done_and_the_next_one_finishes(fleet):
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    with fleet.connect() as c:
        e = enqueue(c, "search", agent_id="sandbox-1")
        w = claim(c, "w-sandbox")
        g = give_grant(c, "sandbox-1", "credential", "vault:prod-db", issued_by="code-1")
        s = request_shutdown(c, "code-1", "abort", window=1.5)
        # someone holds the grant's row: the reconcile step (revoke, record, terminate) blocks on it
        blocker = fleet.connect(autocommit=False)
        blocker.execute("select id from grants where id = %s for update", (g["id"],))
        proc = subprocess.Popen([sys.executable, "-m", "console", "supervise", "--interval", "0.2",
                                 "--id", "doomed", "--dsn", fleet.dsn], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: shutdown_state(c, s["id"]) == "aborting", timeout=30, what="the abort to start")
            assert run_one(c, "agent/confirm_terminated", agent_id="code-1") is not None
            wait_until(lambda: c.execute(
                "select count(*) as n from pg_stat_activity where application_name = 'leasectl-supervisor' "
                "and wait_event_type = 'Lock' and datname = current_database()").fetchone()["n"] > 0, timeout=30,
                what="the supervisor to block in its reconcile step")
            phase = shutdown_state(c, s["id"])
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        blocker.rollback()
        blocker.close()
        # what the dead supervisor had committed stays; its reconcile step left nothing behind
        assert phase == "reconciling"
        assert shutdown_state(c, s["id"]) == "reconciling"
        assert c.execute("select count(*) as n from reconciliation_records").fetchone()["n"] == 0
        wait_until(lambda: c.execute("select count(*) as n from pg_stat_activity where application_name = "
                                     "'leasectl-supervisor' and datname = current_database()").fetchone()["n"] == 0,
                   timeout=15, what="the killed supervisor's session to go")
        assert c.execute("select revoked_at from grants where id = %s", (g["id"],)).fetchone()["revoked_at"] is None
        record = until_terminated(c, s["id"])
        assert heartbeat(c, w, "w-sandbox") is None
    assert record["written_by"] == "sup-test"
    assert resolutions(record) == {str(e["id"]): "cancel_unconfirmed"}
    assert [x["grant_id"] for x in record["grants_revoked"]] == [str(g["id"])]
    assert [x["agent_id"] for x in record["children_unaccounted"]] == ["sandbox-1"]
    assert [x["agent_id"] for x in record["children_confirmed"]] == ["code-1"]


# ------------------------------------------------------------------ the second attacker's walk (0013)


def test_an_agent_id_taken_by_another_login_is_not_handed_to_whoever_registers_it_next(owned_fleet):
    """A worker registered planner-2 before the control plane did; register.sql used to return the
    worker's row to the control plane, which then built its tree (and grants) under it."""
    fleet, _ = owned_fleet
    with as_login(fleet, WORKER_X) as x:
        assert register_agent(x, "planner-2") is not None, "first come"
        assert register_agent(x, "planner-2") is not None, "registering again from the same login: idempotent"
    with as_login(fleet, WORKER_Y) as y:
        assert register_agent(y, "planner-2") is None, "taken by another login: zero rows"
    with fleet.connect() as c:
        assert register_agent(c, "planner-2") is None, "the control plane is told too, not handed the squat"


def test_a_claim_from_a_snapshot_older_than_the_drain_takes_nothing(owned_fleet):
    """REPEATABLE READ: the worker's snapshot still shows the agent running; the share lock on the
    agent's row makes the claim fail to serialize instead of running a draining agent's call."""
    fleet, _ = owned_fleet
    with fleet.connect() as c:
        call = enqueue(c, "search", agent_id="team-child")
    with as_login(fleet, WORKER_X) as x, fleet.connect() as c:
        x.execute("begin isolation level repeatable read")
        assert x.execute("select state from agents where id = 'team-child'").fetchone()["state"] == "running"
        c.execute("update agents set state = 'draining' where id = 'team-child'")
        with pytest.raises(psycopg.Error) as refused:
            x.execute("update tool_jobs set state = 'running', owner_id = %s, fencing_token = fencing_token + 1, "
                      "attempt = attempt + 1, lease_until = now() + interval '1 minute' where id = %s",
                      (WORKER_X, call["id"]))
        assert refused.value.sqlstate in ("40001", "LCF07", "LCS12")
        x.execute("rollback")
        assert job(c, call["id"])["state"] == "queued"


def test_the_record_counts_only_confirmations_made_during_the_shutdown(fleet):
    with fleet.connect() as c:
        # a confirmation from before the shutdown (0013 refuses one from a login; the owner may write
        # anything, so the record itself does not believe it)
        c.execute("update agents set terminated_confirmed_at = now() - interval '1 hour' where id = 'sandbox-1'")
        s = request_shutdown(c, "code-1", window=0.5)
        for agent in ("code-1",):
            run_one(c, "agent/confirm_terminated", agent_id=agent)
        record = until_terminated(c, s["id"], timeout=20)
    confirmed = {x["agent_id"] for x in record["children_confirmed"]}
    unaccounted = {x["agent_id"] for x in record["children_unaccounted"]}
    assert "sandbox-1" in unaccounted and "sandbox-1" not in confirmed
