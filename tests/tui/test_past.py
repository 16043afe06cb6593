"""`at:` on the Calls and Triage screens: every call as it was at an instant, rebuilt
from the history (not the current rows), the screen saying plainly that it shows the past, and
no action taken on it."""

from __future__ import annotations

import time

from tests.helpers import FAST, approve, claim, complete, enqueue, job, register_tool, report_unknown, start_side_effect
from tests.tui.conftest import SIZE, make_app, notifications, screen_text, settle


def iso(conn) -> str:
    return conn.execute("select to_char(now() at time zone 'utc', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') as t"
                        ).fetchone()["t"]


async def test_calls_and_triage_at_an_instant_show_the_past(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", lease_seconds=60, heartbeat_seconds=5, missed_heartbeats=2,
                      jitter_seconds=5)
        register_tool(conn, "pay", "mutating_unverifiable", **FAST)
        e = enqueue(conn, "search", "past:1")
        c = claim(conn, "w-then", ["search"])
        p = enqueue(conn, "pay", "pay:past")
        pc = claim(conn, "w-pay", ["pay"])
        start_side_effect(conn, pc, "w-pay")
        report_unknown(conn, pc, "w-pay")
        time.sleep(0.05)
        then = iso(conn)
        time.sleep(0.05)
        complete(conn, c, "w-then")
        approve(conn, p["id"], "outcome_unknown", 1, operator="ana")
        later = enqueue(conn, "search", "past:2")  # created after the instant: absent from the past
        assert job(conn, e["id"])["state"] == "succeeded" and job(conn, p["id"])["state"] == "queued"
    short, pay_short, later_short = str(e["id"])[:8], str(p["id"])[:8], str(later["id"])[:8]
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: later_short in screen_text(app))
        await pilot.press("slash", *f"at:{then}", "enter")
        await settle(pilot, lambda: "THE PAST" in screen_text(app))
        text = screen_text(app)
        past_line = next(line for line in text.splitlines() if "THE PAST" in line)
        assert f"as it was at {then[:19]}" in past_line, "the instant stands on the line, not cut off its end"
        assert short in text and pay_short in text and later_short not in text, "calls created after T are absent"
        row = next(line for line in text.splitlines() if short in line)
        assert "running" in row and "succeeded" not in row, "the state then, not now"
        assert "outcome unknown" in next(line for line in text.splitlines() if pay_short in line)
        await pilot.press("c")
        await settle(pilot, lambda: "shows the past" in notifications(app))
        assert "What will change" not in screen_text(app), "no action on the past"
        await pilot.press("1")
        await settle(pilot)
        await pilot.press("slash", *f"at:{then}", "enter")
        await settle(pilot, lambda: "THE PAST" in screen_text(app))
        assert pay_short in screen_text(app) and "outcome unknown" in screen_text(app), \
            "triage then: the payment waited for a human"
        await pilot.press("escape")
        await settle(pilot, lambda: "THE PAST" not in screen_text(app))
        await settle(pilot, lambda: str(p["id"]) not in app.screen.table.row_keys)
        assert str(p["id"]) not in app.screen.table.row_keys, "now it is queued again: nothing needs a human"


async def test_an_age_in_at_is_one_instant_not_a_moving_window(db):
    """at:2h means two hours before the filter was applied, and stays that instant on every refresh
    (re-read on each poll it slid forward: no fixed T, pages from different instants)."""
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", **FAST)
        enqueue(conn, "search", "past:age")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        for screen_key in ("2", "1"):
            await pilot.press(screen_key)
            await settle(pilot)
            await pilot.press("slash", *"at:1s", "enter")
            await settle(pilot, lambda: "THE PAST" in screen_text(app))
            first = app.screen.as_of
            assert first is not None
            fetched = app.screen.fetched_at
            time.sleep(0.3)
            await pilot.press("r")
            await settle(pilot, lambda fetched=fetched: app.screen.fetched_at != fetched)
            assert app.screen.as_of is not None and app.screen.as_of.at == first.at, "the same instant"
            await pilot.press("escape")
            await settle(pilot, lambda: "THE PAST" not in screen_text(app))


async def test_an_instant_in_the_future_is_refused_while_the_bar_is_open(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", **FAST)
        e = enqueue(conn, "search", "future:1")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: str(e["id"])[:8] in screen_text(app))
        await pilot.press("slash", *"at:2999-01-01T00:00:00Z", "enter")
        await settle(pilot, lambda: "in the future" in notifications(app))
        assert "THE PAST" not in screen_text(app), "nothing was passed off as the past"


async def test_the_fetch_thread_reads_a_request_and_never_writes_the_screen(db):
    """The poll's thread once resolved `at:2h` into the screen's own state (`as_of`) while the UI
    thread could be changing the filter: now it gets the request as a value, answers with what it
    read, and the screen keeps the instant when the answer lands (on the UI thread)."""
    from console.core.filters import parse_filter
    from console.operator.tui.screens.calls import CallsRequest, CallsScreen

    with db.connect() as conn:
        register_tool(conn, "search", "read_only", lease_seconds=60, heartbeat_seconds=5)
        enqueue(conn, "search", "then:1")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CallsScreen)
        request = CallsRequest(parse_filter("at:1h"), None, None)
        page = app.session.read(lambda c: screen.load_request(c, request))
        assert screen.as_of is None, "reading wrote nothing on the screen"
        assert page.as_of is not None and page.as_of.text == "1h"
        screen.where = parse_filter("at:1h")
        screen.show(page)
        assert screen.as_of == page.as_of, "the UI thread keeps the instant the answer brought"
