"""The fleet screens through the real console (Pilot) on a real database: drain and abort a
subtree with the same dialog rules as the call actions, and read what the shutdown left."""

from __future__ import annotations

import pytest

from console.control.supervisor import tick
from console.db.connect import run_one
from tests.helpers import claim, enqueue, give_grant, register_tool, register_tree, request_shutdown, wait_until
from tests.tui.conftest import SIZE, dialog_ready, make_app, notifications, screen_text, settle
from tests.tui.test_flows import type_text

TREE = {"planner-1": None, "retrieval-1": "planner-1", "code-1": "planner-1", "sandbox-1": "code-1",
        "review-1": "planner-1"}


@pytest.fixture
def fleet(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", lease_seconds=60, heartbeat_seconds=5, missed_heartbeats=2,
                      jitter_seconds=5)
        register_tree(conn, TREE)
        give_grant(conn, "sandbox-1", "credential", "vault:prod-db", issued_by="code-1")
        yield db, conn


async def select_agent(pilot, agent: str) -> None:
    await pilot.press("4")
    await settle(pilot, lambda: "planner-1" in screen_text(pilot.app))
    for _ in range(10):
        if f"agent      {agent}" in screen_text(pilot.app):
            return
        await pilot.press("down")
        await settle(pilot)
    raise AssertionError(f"could not select {agent}:\n{screen_text(pilot.app)}")


async def test_the_selected_agent_shows_the_grants_it_holds(fleet):
    db, _conn = fleet
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await select_agent(pilot, "sandbox-1")
        text = screen_text(app)
        assert "credential vault:prod-db" in text and "from code-1" in text and "expires in" in text


async def test_drain_from_the_console_is_requested_and_journaled(fleet):
    db, conn = fleet
    enqueue(conn, "search", agent_id="sandbox-1")
    claim(conn, "w-1")
    app = make_app(db.dsn, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await select_agent(pilot, "code-1")
        await pilot.press("d")
        await dialog_ready(pilot, "What will change")
        text = screen_text(app)
        assert "Drain the subtree of code-1" in text and "2 agents" in text
        assert "The window lets 1 running call finish" in text and "1 live grant" in text
        assert "queries/operator/request_shutdown.sql" in text and "code-1 is still running" in text
        await type_text(pilot, "moving to the new cluster")
        await pilot.press("enter")  # on to the window
        await type_text(pilot, "90")  # the default is selected on focus: typing replaces it
        await pilot.press("enter")
        await settle(pilot, lambda: "REQUESTED" in screen_text(app))
        assert "fleet journal" in screen_text(app)
        await pilot.press("escape")
        await settle(pilot, lambda: "draining" in screen_text(app) or "requested ·" in screen_text(app))
    shutdown = conn.execute("select * from shutdowns").fetchone()
    assert (shutdown["root_agent_id"], shutdown["mode"], shutdown["requested_by"]) == ("code-1", "drain", "dana")
    assert float(shutdown["window_seconds"]) == 90 and shutdown["reason"] == "moving to the new cluster"
    event = conn.execute("select * from fleet_events where kind = 'shutdown_requested'").fetchone()
    assert event["actor"] == "dana" and event["request_id"] is not None


async def test_abort_refused_says_why_and_the_refusal_is_journaled(fleet):
    db, conn = fleet
    app = make_app(db.dsn, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await select_agent(pilot, "code-1")
        await pilot.press("x")
        await dialog_ready(pilot, "What will change")
        assert "cancel requested" in screen_text(app) and "NOT stopped" in screen_text(app)
        # meanwhile someone else drains the parent
        assert request_shutdown(conn, "planner-1", "drain", operator="erin") is not None
        await type_text(pilot, "runaway sandbox")
        await pilot.press("enter", "enter")
        await settle(pilot, lambda: "REFUSED" in screen_text(app))
        assert "a shutdown of planner-1 is already under way" in screen_text(app)
    refusal = conn.execute("select * from fleet_events where kind = 'shutdown_refused'").fetchone()
    assert refusal["actor"] == "dana" and refusal["reason"] == "runaway sandbox" and refusal["request_id"]
    assert conn.execute("select count(*) as n from shutdowns").fetchone()["n"] == 1


async def test_escape_and_empty_reason_change_nothing_and_read_only_refuses(fleet):
    db, conn = fleet
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await select_agent(pilot, "code-1")
        await pilot.press("d")
        await dialog_ready(pilot, "What will change")
        await pilot.press("enter", "enter")
        await settle(pilot, lambda: "A reason is required" in screen_text(app))
        await pilot.press("escape")
        await settle(pilot, lambda: "What will change" not in screen_text(app))
    read_only = make_app(db.dsn, read_only=True)
    async with read_only.run_test(size=SIZE) as pilot:
        await select_agent(pilot, "code-1")
        await pilot.press("x")
        await settle(pilot)
        assert "What will change" not in screen_text(read_only)
        assert "Read-only console" in notifications(read_only)
    assert conn.execute("select count(*) as n from shutdowns").fetchone()["n"] == 0
    assert conn.execute("select count(*) as n from fleet_events where kind like 'shutdown%'").fetchone()["n"] == 0


async def test_a_finished_shutdown_shows_the_unaccounted_agent_first_and_opens_its_calls(fleet):
    db, conn = fleet
    e = enqueue(conn, "search", agent_id="sandbox-1")
    claim(conn, "w-1")
    s = request_shutdown(conn, "code-1", "abort", window=0.3)
    tick(conn, supervisor_id="sup-test", sweep=False)
    run_one(conn, "agent/confirm_terminated", agent_id="code-1")

    def finished():
        tick(conn, supervisor_id="sup-test", sweep=False)
        return conn.execute("select state from shutdowns where id = %s", (s["id"],)).fetchone()["state"] == "terminated"
    wait_until(finished, timeout=15, interval=0.1, what="the shutdown to finish")

    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await settle(pilot, lambda: "UNACCOUNTED" in screen_text(app))
        assert "NEVER" in screen_text(app), "the silent sandbox never confirmed"
        await pilot.press("tab")  # to the shutdowns; the pane follows
        await settle(pilot, lambda: "asked by" in screen_text(app))
        await pilot.press("enter")
        await settle(pilot, lambda: "Agents that confirmed" in screen_text(app))
        await pilot.press("escape")
        await settle(pilot, lambda: "Agents that confirmed" not in screen_text(app))
        await pilot.press("5")
        await settle(pilot, lambda: "abort of code-1" in screen_text(app))
        await pilot.press("enter")
        await settle(pilot, lambda: "Agents that confirmed" in screen_text(app))
        text = screen_text(app)
        assert text.index("1 AGENT UNACCOUNTED") < text.index("In-flight calls")
        assert "sandbox-1" in text and "cancel unconfirmed" in text and "revoked by control-plane" in text
        await pilot.press("enter")
        await settle(pilot, lambda: "Ownership" in screen_text(app) or str(e["id"]) in screen_text(app))
        assert str(e["id"]) in screen_text(app)
        await pilot.press("escape")
        await settle(pilot, lambda: "Agents that confirmed" in screen_text(app))


async def test_r_revokes_the_selected_agents_grant_with_a_reason_and_says_so(fleet):
    """Migration 0017: `r` on an agent holding one live grant offers that grant; the reason is
    required; the answer is the database's, journaled as operator_revoke with the operator's name."""
    db, conn = fleet
    app = make_app(db.dsn, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await select_agent(pilot, "code-1")
        await pilot.press("r")
        await settle(pilot)
        assert "holds no live grant" in notifications(app), "code-1 holds none: nothing to revoke"
        await select_agent(pilot, "sandbox-1")
        await pilot.press("r")
        await dialog_ready(pilot, "What will change")
        assert all(words in screen_text(app) for words in (
            "Revoke a grant of sandbox-1", "credential vault:prod-db", "queries/operator/revoke_grant.sql",
            "not revoked yet")), screen_text(app)
        await type_text(pilot, "leaked in a build log")
        await pilot.press("enter")  # the grant is chosen already (the only one): enter applies
        await settle(pilot, lambda: "REVOKED" in screen_text(app))
        assert "vault:prod-db" in screen_text(app).split("REVOKED")[1], "the answer names the grant"
    journal = conn.execute("select actor, reason from fleet_events where kind = 'operator_revoke'").fetchall()
    assert journal == [{"actor": "dana", "reason": "leaked in a build log"}]
    assert conn.execute("select count(*) as n from grants where revoked_at is null").fetchone()["n"] == 0


async def test_an_orphan_is_labelled_and_a_accepts_the_supervisors_proposal(fleet):
    """Migration 0018: planner-1 goes silent while sandbox-1 still holds a credential; the console
    labels the orphan, the supervisor's one pass proposes an abort that starts nothing, and `a` on
    the agent accepts it (a reason required) -- then, and only then, the supervisor carries it out."""
    db, conn = fleet
    conn.execute("update agents set last_seen_at = now() - interval '10 minutes' "
                 "where id in ('planner-1', 'retrieval-1', 'review-1')")
    app = make_app(db.dsn, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("1")
        await settle(pilot, lambda: "ORPHANED" in screen_text(app))
        assert "planner-1 silent for" in screen_text(app), screen_text(app)
        await select_agent(pilot, "sandbox-1")
        assert "ORPHANED" in screen_text(app) and "orphaned: planner-1" in screen_text(app)
        await pilot.press("a")
        await settle(pilot)
        assert "Select a proposed shutdown" in notifications(app), "nothing proposed yet"
        tick(conn, supervisor_id="sup-test", sweep=False)  # one pass: proposed, and nothing more
        proposal = conn.execute("select id, root_agent_id, state from shutdowns").fetchone()
        assert (proposal["root_agent_id"], proposal["state"]) == ("code-1", "proposed")
        await settle(pilot, lambda: "waits for a human" in screen_text(app))  # the fleet's NOTIFY wakes the screen
        await select_agent(pilot, "sandbox-1")
        await pilot.press("a")
        await dialog_ready(pilot, "What will change")
        assert "Accept the proposed abort of code-1" in screen_text(app) and "sup-test" in screen_text(app)
        await type_text(pilot, "the planner is not coming back")
        await pilot.press("enter")
        await settle(pilot, lambda: "ACCEPTED" in screen_text(app))
    assert conn.execute("select state, decided_by from shutdowns").fetchone() == {"state": "requested",
                                                                                 "decided_by": "dana"}
    tick(conn, supervisor_id="sup-test", sweep=False)
    assert conn.execute("select state from agents where id = 'sandbox-1'").fetchone()["state"] != "running"
