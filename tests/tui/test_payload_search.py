"""The Calls screen's `/payload:…`: a search that runs out of statement time says so where the list
would be (never an empty list, never "database trouble" in the status), and one that answers lists."""

from __future__ import annotations

import psycopg

from console.shared.config import SessionLimits
from tests.db.test_payload_filter import TOOLS, calls  # noqa: F401 - the fixture and its tools
from tests.tui.conftest import SIZE, make_app, settle
from tests.tui.test_flows import type_text

SHORT = SessionLimits(statement_timeout_ms=300, lock_timeout_ms=0, idle_in_transaction_ms=10_000)


def unanswered(app) -> str:
    widget = app.screen.query_one("#calls-unanswered")
    return str(widget.render()) if widget.display else ""


async def test_a_payload_search_out_of_time_is_said_where_the_list_would_be(db, calls):  # noqa: F811
    app = make_app(db.dsn, limits=SHORT)
    holder = psycopg.connect(db.dsn)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("2")
            await settle(pilot, lambda: bool(app.screen.query_one("#calls").row_keys))
            # from now on a read of tool_jobs waits until its statement timeout ends it
            holder.execute("lock table tool_jobs in access exclusive mode")
            await pilot.press("slash")
            await type_text(pilot, "payload:refund")
            await pilot.press("enter")
            await settle(pilot, lambda: "did not finish" in unanswered(app), timeout=15)
            words = unanswered(app)
            assert "the payload search did not finish within the statement timeout of 0.3 s" in words
            assert not app.screen.query_one("#calls").display, "no list (an empty one would read as no calls)"
            # the dashboard's own reads wait on the lock too and may be said late (that is right); the
            # search's timeout is not one of them: its answer is unknown, the database is not in trouble
            trouble = app.freshness.trouble or ""
            assert "payload search" not in trouble and "views/jobs" not in trouble, trouble
            assert app.screen.poll_seconds == 30.0, "asked again now and then, not at every poll"
    finally:
        holder.rollback()
        holder.close()


async def test_a_payload_search_that_answers_lists_its_calls(db, calls):  # noqa: F811
    conn, ids = calls
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.press("slash")
        await type_text(pilot, 'payload:$.customer.name="Ada Lovelace"')
        await pilot.press("enter")
        await settle(pilot, lambda: set(app.screen.query_one("#calls").row_keys) == {ids["inv7"]}, timeout=10)
        assert set(app.screen.query_one("#calls").row_keys) == {ids["inv7"]}
        assert unanswered(app) == ""


async def test_the_screens_that_filter_in_memory_refuse_payload_and_say_where(db, calls):  # noqa: F811
    from tests.tui.conftest import notifications

    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        for key, screen in (("1", "Triage"), ("3", "Approvals")):
            await pilot.press(key)
            await settle(pilot)
            await pilot.press("slash")
            await type_text(pilot, "payload:refund")
            await pilot.press("enter")
            await settle(pilot, lambda s=screen: f"the {s} screen filters" in notifications(app))
            assert "search payloads on the Calls screen (2)" in notifications(app)
            await pilot.press("escape")  # the bar closed; no filter applied
            assert app.screen.filter_value.payload is None
