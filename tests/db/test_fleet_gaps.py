"""The fleet's last gaps (migration 0018, docs/seeds.md §003): orphans noticed, labelled, counted and
proposed for a shutdown within one supervisor pass; an agent's proposal that starts nothing until a
human accepts it; the upgrade path -- drain, reconcile, restart -- moving queued calls to the new
generation, and the record saying which moved and why the others did not."""

from __future__ import annotations

import json
from typing import Any

from console.control.supervisor import tick
from console.db import metrics, reads
from console.db.connect import run, run_one
from console.operator.exporter import families_of
from tests import helpers as h

LOGINS = {"lc_gaps_worker": "leasectl_worker", "lc_gaps_other": "leasectl_worker",
          "lc_gaps_operator": "leasectl_operator", "lc_gaps_supervisor": "leasectl_supervisor"}
SLOW = {"lease_seconds": 60, "heartbeat_seconds": 10, "missed_heartbeats": 2, "jitter_seconds": 10}
TOOLS = {"search": ("read_only", SLOW)}
TREE = {"planner-1": None, "code-1": "planner-1", "sandbox-1": "code-1", "review-1": "planner-1"}


def silence(conn: Any, agent: str, seconds: float = 600) -> None:
    """The agent was last seen `seconds` ago (as the owner, exempt from the seen guard)."""
    conn.execute("update agents set last_seen_at = now() - make_interval(secs => %s) where id = %s", (seconds, agent))


def proposals(conn: Any) -> list[dict]:
    return conn.execute("select * from shutdowns where state = 'proposed' order by requested_at").fetchall()


# ------------------------------------------------------------------------------ orphans


def test_children_of_a_silent_planner_are_orphans_and_one_pass_proposes_an_abort(db: Any, conn: Any) -> None:
    h.register_tree(conn, TREE)
    running = h.enqueue(conn, "search", agent_id="sandbox-1")
    assert h.claim(conn, "w-1")["id"] == running["id"]
    assert reads.orphans(conn) == [], "everyone was seen just now"
    silence(conn, "planner-1")
    silence(conn, "review-1")  # silent too, and it runs nothing and holds nothing: not an orphan
    orphans = {o.agent_id: o for o in reads.orphans(conn)}
    assert set(orphans) == {"code-1", "sandbox-1"}
    assert {(o.ancestor_id, o.why) for o in orphans.values()} == {("planner-1", "silent")}
    fleet = {a.id: a for a in reads.fleet(conn).agents}
    assert fleet["code-1"].orphaned and fleet["sandbox-1"].orphan_of == "planner-1" and not fleet["review-1"].orphaned
    assert len(reads.triage(conn).orphans) == 2, "Triage counts them"
    gauge = next(f for f in families_of(metrics.scrape(conn)) if f.name == "leasectl_orphaned_agents")
    assert [s.value for s in gauge.samples] == [2], "and the exporter's gauge"

    report = tick(conn, supervisor_id="sup-test", sweep=False)
    [proposal] = proposals(conn)
    assert (proposal["root_agent_id"], proposal["mode"], proposal["requested_by"]) == ("code-1", "abort", "sup-test")
    assert "planner-1" in proposal["reason"] and any("proposed shutdown" in n for n in report.notes)
    journal = conn.execute("select kind, actor from fleet_events where shutdown_id = %s", (proposal["id"],)).fetchall()
    assert [(e["kind"], e["actor"]) for e in journal] == [("shutdown_proposed", "sup-test")]

    for _ in range(3):  # a proposal never starts by itself, and is not made twice
        tick(conn, supervisor_id="sup-test", sweep=False)
    assert [p["id"] for p in proposals(conn)] == [proposal["id"]]
    assert h.job(conn, running["id"])["state"] == "running"
    assert conn.execute("select state from agents where id = 'code-1'").fetchone()["state"] == "running"
    assert {o.proposal_id for o in reads.orphans(conn)} == {proposal["id"]}


def test_a_declined_proposal_is_not_made_again_for_the_same_silence(db: Any, conn: Any) -> None:
    h.register_tree(conn, TREE)
    h.enqueue(conn, "search", agent_id="code-1")
    silence(conn, "planner-1")
    silence(conn, "review-1")
    tick(conn, supervisor_id="sup-test", sweep=False)
    [proposal] = proposals(conn)
    from console.db import actions

    declined = actions.decide_shutdown(conn, proposal["id"], accept=False, operator="alice", reason="planner restarts")
    assert declined.state == "declined" and declined.decided_by == "alice"
    tick(conn, supervisor_id="sup-test", sweep=False)
    assert proposals(conn) == [], "a human said no: not proposed again while nothing changed"
    again = actions.decide_shutdown(conn, proposal["id"], accept=True, operator="alice", reason="changed my mind")
    assert again.state == "declined", "a decision is made once"
    run_one(conn, "agent/heartbeat", agent_id="planner-1")  # heard again ...
    assert reads.orphans(conn) == []
    silence(conn, "planner-1", 300)  # ... as of before the decline: the silence the human judged
    tick(conn, supervisor_id="sup-test", sweep=False)
    assert proposals(conn) == [], "last seen before the decline: the same silence"


def test_a_subtree_under_a_shutdown_is_not_orphaned(db: Any, conn: Any) -> None:
    h.register_tree(conn, TREE)
    h.enqueue(conn, "search", agent_id="code-1")
    assert h.request_shutdown(conn, "code-1", "drain") is not None
    silence(conn, "planner-1")
    assert {o.agent_id for o in reads.orphans(conn)} == {"review-1"}, "code-1's shutdown is stopping it already"


# ------------------------------------------------------------------------------ proposals


def test_an_agent_proposes_and_only_an_operator_starts_it(db: Any, conn: Any, logins: Any) -> None:
    with h.as_login(db, "lc_gaps_worker") as worker:
        h.register_tree(worker, {"planner-1": None, "code-1": "planner-1"})
        made = run_one(worker, "agent/propose_shutdown", agent_id="code-1", mode="drain",
                       reason="my tool schema changed")
        assert made is not None and made["state"] == "proposed" and made["requested_by"] == "code-1"
        assert run_one(worker, "agent/propose_shutdown", agent_id="planner-1", mode="abort", reason="x") is None, \
            "a proposal over the same subtree is already there"
        assert h.refusal(worker, "update shutdowns set state = 'requested' where id = %s",
                         (made["id"],))[0] == "42501"
    with h.as_login(db, "lc_gaps_other") as other:
        assert h.refusal(other, "select * from leasectl_propose_shutdown('code-1', 'abort', 'not mine')")[0] == "LCF09"
    with h.as_login(db, "lc_gaps_supervisor") as supervisor:
        for _ in range(3):
            tick(supervisor, supervisor_id="sup-test", sweep=False)
        assert h.refusal(supervisor, "update shutdowns set state = 'requested' where id = %s",
                         (made["id"],))[0] == "LCF02", "out of proposed only by a named decision"
    assert conn.execute("select state from shutdowns where id = %s", (made["id"],)).fetchone()["state"] == "proposed"
    assert conn.execute("select state from agents where id = 'code-1'").fetchone()["state"] == "running"

    invoke = h.cli_invoker(db.dsn, "bob")
    listed = invoke("shutdowns", "--json")
    assert listed.exit_code == 0, listed.output
    first = json.loads(listed.output)[0]
    assert (first["state"], first["requested_by"], first["reason"]) == ("proposed", "code-1", "my tool schema changed")
    accepted = invoke("shutdowns", "accept", str(made["id"])[:8], "--reason", "ok, roll it", "--yes")
    assert accepted.exit_code == 0, accepted.output
    assert conn.execute("select state, decided_by from shutdowns where id = %s",
                        (made["id"],)).fetchone() == {"state": "requested", "decided_by": "bob"}
    twice = invoke("shutdowns", "accept", str(made["id"])[:8], "--reason", "again", "--yes")
    assert twice.exit_code == 3 and "no longer proposed" in twice.output, twice.output
    tick(conn, supervisor_id="sup-test", sweep=False)
    assert conn.execute("select state from agents where id = 'code-1'").fetchone()["state"] != "running"
    actions = invoke("audit", "actions", "--json")
    assert actions.exit_code == 0 and '"accept"' in actions.output, actions.output


def test_accept_of_nothing_and_of_a_bad_prefix_are_clear(db: Any, conn: Any) -> None:
    invoke = h.cli_invoker(db.dsn, "bob")
    missing = invoke("shutdowns", "accept", "0000", "--reason", "x", "--yes")
    assert missing.exit_code == 2 and "no shutdown" in missing.output
    bad = invoke("shutdowns", "accept", "not-an-id", "--reason", "x", "--yes")
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "not a shutdown id" in bad.output, bad.output


# ------------------------------------------------------------------------------ the upgrade path


def test_generations_are_the_databases_and_never_change(db: Any, conn: Any, logins: Any) -> None:
    with h.as_login(db, "lc_gaps_worker") as worker:
        h.register_tree(worker, {"planner-1": None})
        row = run_one(worker, "agent/register", agent_id="planner-2", parent_id=None, kind="planner",
                      replaces="planner-1")
        assert row is not None and row["generation"] == 2 and row["replaces"] == "planner-1"
        worker.execute("insert into agents (id, kind, generation) values ('planner-x', 'planner', 9)")
        assert worker.execute("select generation from agents where id = 'planner-x'").fetchone()["generation"] == 1
        assert h.refusal(worker, "update agents set last_seen_at = now(), generation = 5 "
                                 "where id = 'planner-2'")[0] in ("LCF09", "42501")
    with h.as_login(db, "lc_gaps_other") as other:
        assert h.refusal(other, "insert into agents (id, kind, replaces) values ('planner-3', 'planner', 'planner-2')"
                         )[0] == "LCF09", "its queued calls would move to another login's agent"
    assert h.refusal(conn, "update agents set generation = 5 where id = 'planner-2'")[0] == "LCF09"


def test_drain_with_a_replacement_moves_the_queued_calls_to_the_new_generation(db: Any, conn: Any,
                                                                               logins: Any) -> None:
    h.register_tree(conn, {"planner-1": None, "retrieval-1": "planner-1", "code-1": "planner-1"})
    assert run_one(conn, "agent/register", agent_id="planner-2", parent_id=None, kind="planner",
                   replaces="planner-1") is not None
    assert h.register_agent(conn, "retrieval-2", "planner-2", kind="retrieval") is not None
    plan = h.enqueue(conn, "search", agent_id="planner-1")
    look = h.enqueue(conn, "search", agent_id="retrieval-1")
    build = h.enqueue(conn, "search", agent_id="code-1")  # planner-2 has no code agent of its own login
    with h.as_login(db, "lc_gaps_other") as other:  # another login's code agent under planner-2 takes nothing
        assert h.register_agent(other, "code-9", "planner-2", kind="code") is not None
    refused = run_one(conn, "operator/request_shutdown", root_agent_id="planner-1", mode="drain", requested_by="alice",
                      reason="roll", window_seconds=60, replacement_agent_id="retrieval-2")
    assert refused is None, "retrieval-2 was not registered to replace planner-1"
    made = run_one(conn, "operator/request_shutdown", root_agent_id="planner-1", mode="drain", requested_by="alice",
                   reason="roll to planner-2", window_seconds=60, replacement_agent_id="planner-2")
    assert made is not None
    tick(conn, supervisor_id="sup-test", sweep=False)
    for agent in ("planner-1", "retrieval-1", "code-1"):  # each says it stopped
        assert run_one(conn, "agent/confirm_terminated", agent_id=agent) is not None
    assert tick(conn, supervisor_id="sup-test", sweep=False).records
    assert h.job(conn, plan["id"])["agent_id"] == "planner-2" and h.job(conn, plan["id"])["state"] == "queued"
    assert h.job(conn, look["id"])["agent_id"] == "retrieval-2" and h.job(conn, look["id"])["state"] == "queued"
    assert h.job(conn, build["id"])["state"] == "cancelled"
    record = reads.reconciliations(conn)[0]
    assert {str(m.job_id): m.to_agent_id for m in record.calls_moved} == {str(plan["id"]): "planner-2",
                                                                          str(look["id"]): "retrieval-2"}
    by_job = {str(c.job_id): c for c in record.in_flight}
    assert by_job[str(plan["id"])].resolution == "moved"
    assert "no running agent of its kind" in (by_job[str(build["id"])].model_extra or {})["not_moved"]
    assert "calls_moved" in record.contract()
    assert conn.execute("select state from agents where id = 'planner-2'").fetchone()["state"] == "running"
    journal = run(conn, "views/fleet")
    assert {a["id"]: a["generation"] for a in journal}["planner-2"] == 2


def test_the_demo_rolls_planner_1_to_planner_2_and_its_record_says_which_calls_moved(db: Any) -> None:
    """The demo at tempo 0.1: the orchestrator drains planner-1 naming planner-2; every call the old
    tree had queued either moved to the new generation or is listed with why it did not."""
    with h.demo_fleet(db, seed=3, tempo=0.1), db.connect() as conn:
        def record() -> Any:
            return conn.execute("select r.* from reconciliation_records r join shutdowns s on s.id = r.shutdown_id "
                                "where s.root_agent_id = 'planner-1' and s.replacement_agent_id = 'planner-2'"
                                ).fetchone()

        written = h.wait_until(record, timeout=90, interval=0.5, what="the rollout's reconciliation record")
        generations = {r["id"]: (r["generation"], r["replaces"]) for r in run(conn, "views/fleet")}
        moved_events = conn.execute("select count(*) as n from fleet_events where kind = 'call_moved'").fetchone()
    assert generations["planner-2"] == (2, "planner-1") and generations["retrieval-2"] == (2, "retrieval-1")
    assert written["calls_moved"], "the backlog the orchestrator queued on the old tree moved"
    assert len(written["calls_moved"]) == moved_events["n"]
    assert all(m["to_agent_id"].endswith("-2") for m in written["calls_moved"])
    never = [c for c in written["in_flight"] if c["resolution"] == "never_started"]
    assert all("not_moved" in c for c in never), "a queued call that stayed says why it did not move"
