"""Bulk actions in the console: space marks, * marks every call the filter matches
(all pages), one dialog with the blast radius and the count typed to confirm, a line per call,
and afterwards only the calls not applied stay marked."""

from __future__ import annotations

import pytest

from tests.helpers import SLOW, complete, events, job, running_and_queued
from tests.tui.conftest import SIZE, cancel_marked, dialog_ready, make_app, outcomes_unknown, screen_text, settle
from tests.tui.test_flows import type_text

TOOLS = {"search": ("read_only", SLOW)}


@pytest.fixture
def fleet_of_calls(db, conn):
    """Four running calls of `search` (each its own worker's) and two queued: (db, conn, running, queued)."""
    return db, conn, *running_and_queued(conn, 4, 2)


async def test_mark_all_matching_then_one_dialog_with_the_count(fleet_of_calls, monkeypatch):
    from console.operator.tui.screens import calls as calls_screen

    db, conn, running, queued = fleet_of_calls
    monkeypatch.setattr(calls_screen, "PAGE", 3)  # two pages: * must mark both
    app = make_app(db.dsn, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: "page 1" in screen_text(app))
        await pilot.press("slash", *"tool:search", "enter")
        await settle(pilot, lambda: "filter tool:search" in screen_text(app))
        await cancel_marked(pilot, 6)
        await settle(pilot, lambda: "what will change" in screen_text(app))
        text = screen_text(app)
        assert "queued → cancelled" in text and "cancel requested (NOT stopped" in text
        assert "read-only" in text, "counts by side-effect class"
        await type_text(pilot, "incident 7")
        await pilot.press("tab")
        await type_text(pilot, "5")
        await pilot.press("enter")
        await settle(pilot, lambda: "Type '6' to confirm" in screen_text(app))
        assert not [e for r in running for e in events(conn, r["id"]) if e["kind"] == "operator_cancel"]
        await pilot.press("backspace")
        complete(conn, running[0], "w-0")  # meanwhile one call finishes: it will be refused
        await type_text(pilot, "6")
        await pilot.press("enter")
        await settle(pilot, lambda: "NOT ALL APPLIED" in screen_text(app))
        assert "5 applied, 1 refused" in screen_text(app)
        await pilot.press("escape")
        await settle(pilot, lambda: "1 marked" in screen_text(app))
        assert app.screen.marked == {str(running[0]["id"])}, "only the refused call stays marked"
    assert {job(conn, q["id"])["state"] for q in queued} == {"cancelled"}
    batches = {e["details"].get("batch_id") for r in running for e in events(conn, r["id"])
               if e["kind"] == "operator_cancel"}
    assert len(batches) == 1


async def test_space_marks_and_approve_unverifiable_asks_for_the_words(db):
    with db.connect() as conn:
        made = outcomes_unknown(conn, 2)
    app = make_app(db.dsn, operator="ana")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, lambda: "outcome unknown" in screen_text(app))
        await pilot.press("space", "down", "space")
        await settle(pilot, lambda: "2 marked" in screen_text(app))
        await pilot.press("a")
        await dialog_ready(pilot, "Approve retries of 2 marked calls")
        await settle(pilot, lambda: "approve 2 unverifiable" in screen_text(app))
        await type_text(pilot, "bank confirmed nothing was captured")
        await pilot.press("tab")
        await type_text(pilot, "approve 2 unverifiable")
        await pilot.press("enter")
        await settle(pilot, lambda: "DONE" in screen_text(app))
    with db.connect() as conn:
        assert {job(conn, m["id"])["state"] for m in made} == {"queued"}
