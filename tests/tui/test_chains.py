"""Chains through the real console (Pilot) on a real database: a call's detail tells its chain as
one story (every stage, its owner, how it ended, the deadline left when it started and ended, the
slowest stage marked), screen 8 lists the chains and opens the stage one is at, and the demo's
report export is a real chain, with a night's trouble whose deadline runs out mid-stage."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from psycopg.types.json import Jsonb

from console.db import chains
from console.db.connect import run_one
from console.operator.tui.screens.chains import ChainsScreen
from console.operator.tui.screens.detail import DetailScreen
from tests.helpers import SLOW, claim, complete, demo_fleet, enqueue, register_tool, sweep, wait_until
from tests.tui.conftest import SIZE, make_app, screen_text, settle
from tests.tui.test_flows import open_call, type_text


@pytest.fixture
def live(db):
    with db.connect() as conn:
        register_tool(conn, "export", "read_only", **SLOW)
        register_tool(conn, "alone", "read_only", **SLOW)  # lone calls nobody claims
        yield db, conn


def db_now(conn):
    return conn.execute("select now() as t").fetchone()["t"]


def next_stage(conn, call: dict, worker: str, key: str) -> uuid.UUID:
    """Finish a stage and enqueue the next, in one transaction (worker/complete_and_enqueue.sql)."""
    row = run_one(conn, "worker/complete_and_enqueue", job_id=call["id"], worker_id=worker,
                  fencing_token=call["fencing_token"], result=Jsonb({"ok": True}), next_tool="export",
                  next_idempotency_key=key, next_payload=Jsonb({}))
    assert row is not None and row["next_id"] is not None
    return row["next_id"]


def chain_of(conn, stem: str, stages: int, *, deadline_in: float = 600, slow_first: bool = False,
             finish: bool = False) -> list[uuid.UUID]:
    """`stages` stages by the protocol, each enqueued as the one before it completed; the last one
    left running (or, with `finish`, completed too); with `slow_first`, the first one ran longest."""
    first = enqueue(conn, "export", f"{stem}:1", deadline_at=db_now(conn) + timedelta(seconds=deadline_in))
    ids = [first["id"]]
    for n in range(1, stages + 1):
        worker = f"w-{n}"
        call = claim(conn, worker, ["export"])
        assert call is not None and call["id"] == ids[-1]
        time.sleep(1.1 if slow_first and n == 1 else 0.05)
        if n == stages:
            if finish:
                assert complete(conn, call, worker) is not None
            break
        ids.append(next_stage(conn, call, worker, f"{stem}:{n + 1}"))
    return ids


async def test_the_detail_tells_the_chain_as_one_story(live):
    db, conn = live
    ids = chain_of(conn, "report:7:stage", 3, slow_first=True, finish=True)
    lone = enqueue(conn, "alone", "alone:1")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_call(pilot, str(ids[1])[:8])
        await pilot.press("enter")
        await settle(pilot, lambda: "where the time went" in screen_text(app))
        text = screen_text(app)
        assert f"chain {str(ids[0])[:8]}" in text and "report:7:stage" in text and "3 stages" in text
        story = text[text.index(f"chain {str(ids[0])[:8]} ·"):text.index("where the time went")]
        rows = {str(i)[:8]: next(line for line in story.splitlines()[1:] if str(i)[:8] in line) for i in ids}
        for n, (short, row) in enumerate(rows.items()):
            assert row.split()[1:5] == [str(n), ("▶" if n == 1 else "") + short, f"report:7:stage:{n + 1}",
                                        f"w-{n + 1}"], row
            assert "succeeded" in row and "→" in row, row
        assert "◀ slowest" in rows[str(ids[0])[:8]], "the first stage ran longest"
        assert "◀" not in rows[str(ids[1])[:8]] + rows[str(ids[2])[:8]]
        assert "deadline left" in story and "9m5" in rows[str(ids[0])[:8]], "of a 10-minute deadline"
        assert "slowest: stage 0 (export, w-1) ran 1s" in text
        assert "succeeded · deadline" in text and "met, 9m5" in text
        await pilot.press("escape")
        await settle(pilot, lambda: not isinstance(app.screen, DetailScreen))
        await open_call(pilot, str(lone["id"])[:8])
        await pilot.press("enter")
        await settle(pilot, lambda: "ownership" in screen_text(app))
        text = screen_text(app)
        assert "a chain of one" in text and "where the time went" not in text


async def test_the_detail_says_where_the_deadline_ran_out(live):
    db, conn = live
    first = enqueue(conn, "export", "night:1:stage:1", deadline_at=db_now(conn) + timedelta(seconds=1.5))
    second = next_stage(conn, claim(conn, "w-a", ["export"]), "w-a", "night:1:stage:2")
    assert claim(conn, "w-b", ["export"])["id"] == second
    time.sleep(1.7)
    assert any(r["id"] == second and r["state_to"] == "failed" for r in sweep(conn))
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_call(pilot, str(first["id"])[:8])
        await pilot.press("enter")
        await settle(pilot, lambda: "where the time went" in screen_text(app))
        text = " ".join(screen_text(app).split())
        assert "the deadline passed while stage 1 ran" in text, text
        assert "missed by" in text and "failed" in text
        assert "stage 1 failed: lease expired after the deadline" in text


async def test_screen_8_lists_chains_newest_first_and_opens_the_stage_one_is_at(live):
    db, conn = live
    older = chain_of(conn, "report:1:stage", 3)
    lone = enqueue(conn, "alone", "alone:1")
    newer = chain_of(conn, "backup:9:step", 2, finish=True)
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("8")
        await settle(pilot, lambda: isinstance(app.screen, ChainsScreen) and "report:1:stage" in screen_text(app))
        text = screen_text(app)
        assert "8 Chains" in text and "2 chains" in text
        listed = [line for line in text.splitlines() if "report:1:stage " in line or "backup:9:step " in line]
        assert [str(newer[0])[:8] in listed[0], str(older[0])[:8] in listed[1]] == [True, True], "newest first"
        assert str(lone["id"])[:8] not in text, "a lone call is no chain to list"
        assert "2/2" in listed[1] and "running" in listed[1], "at stage 2 of 0-2"
        assert "1/1" in listed[0] and "succeeded" in listed[0] and "met, 9m5" in listed[0]
        assert "where the time went" in text, "the highlighted chain's story"
        await pilot.press("down")
        await settle(pilot, lambda: "9m5" in screen_text(app) and "now" in screen_text(app))
        assert "report:1:stage:3" in screen_text(app), "the story follows the cursor"
        await pilot.press("l")
        await settle(pilot, lambda: str(lone["id"])[:8] in screen_text(app))
        assert "3 chains" in screen_text(app)
        await pilot.press("l")
        await settle(pilot, lambda: str(lone["id"])[:8] not in screen_text(app))
        await pilot.press("slash")
        await type_text(pilot, "key:report")
        await pilot.press("enter")
        await settle(pilot, lambda: "1 of 2 shown" in screen_text(app))
        assert str(newer[0])[:8] not in screen_text(app)
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, DetailScreen) and app.screen.loaded_once)
        assert app.screen.job_id == older[2], "the stage the chain is at: its running one"
        await settle(pilot, lambda: "where the time went" in screen_text(app))


async def test_the_demo_report_is_a_real_chain_and_one_runs_out_of_time_mid_stage(db):
    """The demo at tempo 0.1: every report's next stage is made as the one before it finishes, and
    the night's trouble -- a chain whose deadline passes while its second stage runs -- is in the
    Chains screen, said missed."""
    with demo_fleet(db, seed=3, tempo=0.1):
        with db.connect() as conn:
            def night():
                row = conn.execute("select id from tool_jobs where idempotency_key like 'report:nightly:stage:2:%' "
                                   "and state = 'failed'").fetchone()
                return row and chains.chain_of(conn, row["id"])

            chain = wait_until(night, timeout=60, interval=0.3, what="the nightly report ran out of time")
            staged = conn.execute(
                "select count(*) as n from tool_jobs c join tool_jobs p on p.id = c.parent_id "
                "where c.tool = 'report_export' and c.created_at >= p.finished_at and p.state = 'succeeded'"
            ).fetchone()["n"]
        assert [s.stage for s in chain.stages] == [0, 1], "stage 2 never started"
        assert chain.stages[0].state == "succeeded" and chain.outcome == "failed"
        passed = chain.deadline_passed_in(chain.db_now)
        assert passed is not None and passed[0].stage == 1 and passed[1] == "running", passed
        assert staged >= 1, "a next stage made as the one before it finished"
        app = make_app(db.dsn)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press("8")
            # that chain's line: a later night's report may have begun since, listed above it
            await settle(pilot, lambda: chain.short_id in screen_text(app))
            line = next(x for x in screen_text(app).splitlines() if chain.short_id in x)
            assert "report:nightly:stage" in line, line
            assert "failed" in line and "missed by" in line, line
