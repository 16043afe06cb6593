"""Approvals shows what the service said: each check an owner recorded before repeating a
verifiable request (worker/record_check.sql), or that nobody asked."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from console.db.connect import run_one
from tests.helpers import FAST, claim, enqueue, expire_lease, register_tool, start_side_effect
from tests.tui.conftest import SIZE, make_app, screen_text, settle


async def test_approvals_shows_the_check_history_and_what_the_service_said(db):
    with db.connect() as conn:
        register_tool(conn, "erp", "mutating_verifiable", **FAST)
        e = enqueue(conn, "erp", key="invoice:7")
        first = claim(conn, "w-erp-1", ["erp"])
        start_side_effect(conn, first, "w-erp-1", "erp-req-1")
        expire_lease(conn, first["id"])
        second = claim(conn, "w-erp-2", ["erp"])
        checked = run_one(conn, "worker/record_check", job_id=second["id"], worker_id="w-erp-2",
                          fencing_token=second["fencing_token"], found="unknown",
                          details=Jsonb({"erp": "timeout asking for the order"}))
        assert checked["state"] == "outcome_unknown"
    app = make_app(db.dsn, operator="ana")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await settle(pilot, lambda: str(e["id"])[:8] in screen_text(app))
        # the pane wraps: read it as its words, not its lines
        words = " ".join(w for w in screen_text(app).split() if w not in ("│", "▏", "▕"))
        assert "checked with the service" in words
        assert "w-erp-2 asked about erp-req-1 (token 2): it could not tell" in words
        assert "timeout asking for the order" in words
