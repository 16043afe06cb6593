"""A bulk operation's progress in the console: `0` lists the operations, `enter` opens one's
progress (refreshed while it runs, the calls not applied and why), `s` stops it with a reason;
a read-only console is offered no stop."""

from __future__ import annotations

from console.core.filters import parse_filter
from console.db import bulk
from tests.helpers import SLOW
from tests.tui.conftest import SIZE, dialog_ready, make_app, screen_text, settle
from tests.tui.test_flows import type_text

TOOLS = {"search": ("read_only", SLOW)}


def operation_of(conn, calls: int, *, background: bool = False):
    conn.execute("insert into tool_jobs (idempotency_key, payload, tool) "
                 "select 'op:' || n, '{}'::jsonb, 'search' from generate_series(1, %s) n", (calls,))
    plan = bulk.plan("cancel", bulk.selection(conn, where=parse_filter("tool:search")))
    return bulk.start(conn, plan, operator="dana", reason="incident 42", filter_text="tool:search",
                      background=background)


async def test_the_progress_of_a_bulk_operation_and_stopping_it(db, conn):
    op = operation_of(conn, 300)
    bulk.work(conn, op.id, worker="cli:test", max_batches=2)
    # a call still to be sent changes meanwhile: its batch will refuse it, never act on it blind
    changed = conn.execute("select c.job_id, j.fencing_token from bulk_operation_calls c join tool_jobs j on "
                           "j.id = c.job_id where c.operation_id = %s and c.outcome is null order by c.ordinal "
                           "limit 1", (op.id,)).fetchone()
    conn.execute("select * from leasectl_request_cancel(%s, 'queued', %s, 'eve', 'by hand')",
                 (changed["job_id"], changed["fencing_token"]))
    app = make_app(db.dsn, operator="ana")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("0")
        await settle(pilot, lambda: op.short_id in screen_text(app) and "100/300" in screen_text(app))
        assert "running" in screen_text(app) and "Bulk operations" in screen_text(app)
        await pilot.press("enter")
        await settle(pilot, lambda: "100 of 300 done" in screen_text(app))
        text = screen_text(app)
        assert "RUNNING" in text and "Cancel 300 calls (tool:search)" in text and "started by dana" in text
        # it moves on elsewhere (a CLI, the supervisor): the screen follows without a key
        bulk.work(conn, op.id, worker="cli:test", max_batches=2)
        await settle(pilot, lambda: "200 of 300 done" in screen_text(app), timeout=15)
        text = screen_text(app)
        assert "199 applied" in text and "1 refused" in text
        assert "REFUSED" in text and "the call changed since you looked" in text, "the calls not applied and why"
        await pilot.press("s")
        await dialog_ready(pilot, f"Stop bulk operation {op.short_id}")
        assert "never sent" in screen_text(app)
        await type_text(pilot, "wrong filter")
        await pilot.press("enter")
        await settle(pilot, lambda: "STOPPED" in screen_text(app))
        await pilot.press("escape")
        await settle(pilot, lambda: "100 calls never sent" in screen_text(app))
    row = conn.execute("select state, done, stop_requested_by, stop_reason from bulk_operations where id = %s",
                       (op.id,)).fetchone()
    assert (row["state"], row["done"], row["stop_requested_by"], row["stop_reason"]) == (
        "stopped", 200, "ana", "wrong filter")
    assert conn.execute("select count(*) as n from tool_jobs where state = 'queued'").fetchone()["n"] == 100


async def test_a_read_only_console_shows_the_progress_and_offers_no_stop(db, conn):
    op = operation_of(conn, 20)
    app = make_app(db.dsn, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("0")
        await settle(pilot, lambda: op.short_id in screen_text(app))
        await pilot.press("enter")
        await settle(pilot, lambda: "0 of 20 done" in screen_text(app))
        await pilot.press("s")
        await pilot.pause(0.5)
        assert "Stop bulk operation" not in screen_text(app), "no stop on a read-only console"
    assert conn.execute("select state from bulk_operations where id = %s", (op.id,)).fetchone()["state"] == "running"


async def test_marking_more_than_a_thousand_on_calls_starts_an_operation_for_the_supervisor(db, conn):
    """`*` on Calls marks every match past 1,000; the same dialog asks the same count, then starts
    a background operation (nothing sent by the console itself) that `0` shows."""
    conn.execute("insert into tool_jobs (idempotency_key, payload, tool) "
                 "select 'many:' || n, '{}'::jsonb, 'search' from generate_series(1, 1100) n")
    app = make_app(db.dsn, operator="ana")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: "page 1" in screen_text(app))
        await pilot.press("slash", *"tool:search", "enter")
        await settle(pilot, lambda: "filter tool:search" in screen_text(app))
        await pilot.press("asterisk")
        await settle(pilot, lambda: "1100 marked" in screen_text(app), timeout=20)
        await pilot.press("c")
        await dialog_ready(pilot, "Cancel 1,100 marked calls")
        await settle(pilot, lambda: "what will change" in screen_text(app), timeout=20)
        assert "this runs as a bulk operation" in screen_text(app), "said before the count is typed"
        await type_text(pilot, "runaway agent")
        await pilot.press("tab")
        await type_text(pilot, "1100")
        await pilot.press("enter")
        await settle(pilot, lambda: "0 lists the bulk operations" in screen_text(app), timeout=20)
    op = conn.execute("select action, total, done, state, operator, background from bulk_operations").fetchone()
    assert (op["action"], op["total"], op["done"], op["state"], op["operator"], op["background"]) == (
        "cancel", 1100, 0, "running", "ana", True), "started, not sent by the console: the supervisor works it"
    assert conn.execute("select count(*) as n from tool_jobs where state = 'queued'").fetchone()["n"] == 1100


async def test_a_dead_database_is_not_told_as_no_operation(db):
    """Before the first answer the list is unknown, not empty: `0` under a dead database never says
    "no bulk operation yet" (a false all-clear while one may be running)."""
    app = make_app("postgresql://postgres@127.0.0.1:1/leasectl?connect_timeout=1")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.5)
        await pilot.press("0")
        await pilot.pause(1.5)
        text = screen_text(app)
        assert "Not read yet: waiting for the database" in text, text
        assert "No bulk operation yet" not in text
