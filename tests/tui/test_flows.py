"""Every action flow through the real console (Pilot) on a real database, as a person types it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from console.db import reads
from console.operator.tui.widgets.status import CRUMB_SEPARATOR
from console.shared.config import SessionLimits
from tests.helpers import FAST, SLOW, claim, enqueue, events, job, report_unknown, start_side_effect
from tests.netproxy import DbProxy
from tests.tui.conftest import SIZE, dialog_ready, make_app, notifications, running_search, screen_text, settle

# the tests make their calls by the protocol itself (real time, real leases)
TOOLS = {"search": ("read_only", SLOW), "pay": ("mutating_unverifiable", FAST)}


async def open_call(pilot, short_id: str) -> None:
    """Go to the calls list and filter it down to one call, as an operator would."""
    await pilot.press("2")
    await settle(pilot)
    await pilot.press("slash")
    for ch in f"id:{short_id}":
        await pilot.press(ch)
    await pilot.press("enter")
    await settle(pilot, lambda: short_id in screen_text(pilot.app) and "· 1 call" in screen_text(pilot.app))


@asynccontextmanager
async def on_call(app, call: dict) -> AsyncIterator[Any]:
    """The console running, on the calls list filtered down to `call`: its pilot."""
    async with app.run_test(size=SIZE) as pilot:
        await open_call(pilot, str(call["id"])[:8])
        yield pilot


async def type_text(pilot, text: str) -> None:
    for ch in text:
        await pilot.press("space" if ch == " " else ch)


async def cancel_dialog(pilot, short: str) -> None:
    """Open the call `short` and its Cancel dialog, armed."""
    await open_call(pilot, short)
    await pilot.press("c")
    await dialog_ready(pilot, "What will change")


async def mark_terminal_dialog(pilot, short: str, reason: str | None = None) -> None:
    """Open the call `short` and its Mark terminal dialog, armed; `reason` typed in if given."""
    await open_call(pilot, short)
    await pilot.press("t")
    await dialog_ready(pilot, "Mark terminal call")
    if reason is not None:
        await type_text(pilot, reason)


async def choose(pilot, option: str) -> None:
    """Pick an option of the focused Select with the keyboard, as a person does: the enter that
    chooses also moves on to the next field."""
    select = pilot.app.focused
    await pilot.press("enter")
    await pilot.pause(0.1)
    options = [str(v) for _label, v in select._options if v is not select.BLANK]
    for _ in range(options.index(option)):
        await pilot.press("down")
    await pilot.press("enter")
    await pilot.pause(0.1)
    assert str(select.value) == option, select.value


async def test_cancel_applied_says_requested_not_stopped_and_is_journaled(db, conn):
    e = running_search(conn)
    app = make_app(db.dsn, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await cancel_dialog(pilot, str(e["id"])[:8])
        text = screen_text(app)
        assert "does NOT stop it" in text and "queries/operator/request_cancel.sql" in text
        assert "with fencing token 1" in text
        await type_text(pilot, "user closed the chat")
        await pilot.press("enter")
        await settle(pilot, lambda: "APPLIED" in screen_text(app))
        assert "NOT stopped yet" in screen_text(app)
    assert job(conn, e["id"])["state"] == "cancel_requested"
    journal = [ev for ev in events(conn, e["id"]) if ev["kind"] == "operator_cancel"]
    assert journal[0]["actor"] == "dana" and journal[0]["reason"] == "user closed the chat"


async def test_empty_reason_and_escape_change_nothing(db, conn):
    e = running_search(conn)
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await cancel_dialog(pilot, str(e["id"])[:8])
        await pilot.press("enter")
        await settle(pilot, lambda: "A reason is required" in screen_text(app))
        await type_text(pilot, "never mind")
        await pilot.press("escape")
        await settle(pilot, lambda: "What will change" not in screen_text(app))
    assert job(conn, e["id"])["state"] == "running"
    assert not [ev for ev in events(conn, e["id"]) if ev["kind"].startswith("operator_")]


async def test_refused_on_stale_token_shows_what_is_true_now(db, conn):
    e = running_search(conn)
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await mark_terminal_dialog(pilot, str(e["id"])[:8])
        # meanwhile an operator elsewhere fences the owner out: the token moves on
        from tests.helpers import mark_terminal

        assert mark_terminal(conn, e["id"], "running", 1, "failed", force=True, operator="erin")
        await type_text(pilot, "looked stuck")
        await pilot.press("enter")  # reason -> the state to mark (nothing preselected)
        await choose(pilot, "failed")  # -> force
        await pilot.press("tab")  # -> leave
        await pilot.press("tab")  # -> apply
        await pilot.press("enter")
        await settle(pilot, lambda: "REFUSED" in screen_text(app))
        text = screen_text(app)
        assert "the call changed since you looked" in text
        assert "now state failed" in text and "token 2" in text
    outcomes = [ev["details"]["outcome"] for ev in events(conn, e["id"]) if ev["actor"] == "dana"]
    assert outcomes == ["refused"], "the refusal is journaled too"


async def test_mark_terminal_forced_fences_the_owner(db, conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w-7")
    app = make_app(db.dsn)
    async with on_call(app, e) as pilot:
        await pilot.press("t")
        await dialog_ready(pilot, "force: fence the owner out")
        assert "holds a live" in screen_text(app)
        await type_text(pilot, "worker is wedged")
        await pilot.press("enter")
        await choose(pilot, "failed")  # and on to force
        await pilot.press("enter")  # enter does not tick it: it moves on
        assert not app.screen.query_one("#force").value, "enter never ticks force"
        await pilot.press("shift+tab")
        await pilot.press("space")  # tick force
        await pilot.press("tab", "tab", "enter")
        await settle(pilot, lambda: "APPLIED" in screen_text(app))
        assert "fenced out" in screen_text(app)
    from tests.helpers import heartbeat

    assert heartbeat(conn, c, "w-7") is None, "the old owner is out"
    assert job(conn, e["id"])["state"] == "failed"


async def test_approve_unverifiable_needs_the_id_typed_back(db, conn):
    e = enqueue(conn, "pay", agent_id="billing-agent")
    c = claim(conn, "w-pay")
    start_side_effect(conn, c, "w-pay", "psp-1")
    report_unknown(conn, c, "w-pay")
    short = str(e["id"])[:8]
    app = make_app(db.dsn, operator="ana")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await settle(pilot, lambda: short in screen_text(app))
        assert "UNVERIFIABLE" in screen_text(app) and "psp-1" in screen_text(app)
        await pilot.press("a")
        await dialog_ready(pilot, "Type the first 8 characters")
        assert short not in str(app.screen.query_one("#confirm-id").placeholder), "the placeholder never gives it away"
        await type_text(pilot, "checked with the PSP: nothing captured")
        await pilot.press("enter")
        await type_text(pilot, "deadbeef")
        await pilot.press("enter")
        await settle(pilot, lambda: "to confirm this approval" in screen_text(app))
        assert job(conn, e["id"])["state"] == "outcome_unknown"
        for _ in range(8):
            await pilot.press("backspace")
        await type_text(pilot, short)
        await pilot.press("enter")
        await settle(pilot, lambda: "APPLIED" in screen_text(app))
    final = job(conn, e["id"])
    assert final["state"] == "queued" and final["retry_approved_by"] == "ana"


async def test_read_only_console_refuses_actions_and_says_so(db, conn):
    e = running_search(conn)
    app = make_app(db.dsn, read_only=True)
    async with on_call(app, e) as pilot:
        assert "READ-ONLY" in screen_text(app)
        await pilot.press("c")
        await settle(pilot, lambda: "Read-only console" in notifications(app))
        assert "What will change" not in screen_text(app), "no dialog opens"
        # and the database session itself refuses writes
        with pytest.raises(Exception, match="read-only|permission denied"):
            app.session.read(lambda c_: reads.job(c_, e["id"]) and c_.execute(
                "update tool_jobs set state = 'cancelled' where id = %s", (e["id"],)))
    assert job(conn, e["id"])["state"] == "running"


async def test_lock_timeout_is_reported_as_such_and_journaled(db, conn):
    e = running_search(conn)
    app = make_app(db.dsn, limits=SessionLimits(statement_timeout_ms=5000, lock_timeout_ms=300,
                                                idle_in_transaction_ms=10_000))
    async with on_call(app, e) as pilot:
        holder = db.connect(autocommit=False)
        holder.execute("update tool_jobs set heartbeat_at = now() where id = %s", (e["id"],))
        try:
            await pilot.press("c")
            await dialog_ready(pilot, "What will change")
            await type_text(pilot, "stuck")
            await pilot.press("enter")
            await settle(pilot, lambda: "NOT APPLIED" in screen_text(app))
            assert "row is locked by another transaction" in screen_text(app)
        finally:
            holder.rollback()
            holder.close()
    assert job(conn, e["id"])["state"] == "running", "nothing changed"
    failed = [ev for ev in events(conn, e["id"]) if ev["kind"] == "operator_action_failed"]
    assert failed and failed[0]["details"]["action"] == "cancel"


async def test_untrusted_text_is_shown_as_text(db, conn):
    evil = "[bold red]PWNED[/] \x1b[31mred\x1b[0m \x07bell"
    e = enqueue(conn, "search", "k:[b]x[/b]", payload={"note": evil}, agent_id="[link=http://x]a[/link]")
    conn.execute("select 1")
    claim(conn, "[red]w[/]")
    app = make_app(db.dsn)
    async with on_call(app, e) as pilot:
        text = screen_text(app)
        assert "[red]w[/]" in text, "markup in an owner name is shown, not applied"
        await pilot.press("enter")
        await settle(pilot, lambda: "payload sha256" in screen_text(app))
        await pilot.press("p")
        await settle(pilot, lambda: "PWNED" in screen_text(app))
        text = screen_text(app)
        assert "[bold red]PWNED[/]" in text
        assert "\x1b" not in text and "\x07" not in text, "no raw control byte reaches the terminal"
        assert "bell" in text
        assert "[link=http://x]a[/link]" in text


async def test_dead_database_banner_disables_actions_and_recovers(db, conn):
    e = running_search(conn)
    proxy = DbProxy(db.dsn)
    app = make_app(proxy.dsn, poll=0.5)
    try:
        async with on_call(app, e) as pilot:
            proxy.cut()
            await settle(pilot, lambda: "DATABASE UNREACHABLE" in screen_text(app), timeout=15)
            assert str(e["id"])[:8] in screen_text(app), "the last good data stays on screen"
            await pilot.press("c")
            await settle(pilot, lambda: "actions are disabled" in notifications(app))
            assert "What will change" not in screen_text(app)
            proxy.restore()
            await settle(pilot, lambda: "DATABASE UNREACHABLE" not in screen_text(app), timeout=20)
            await pilot.press("c")
            await settle(pilot, lambda: "What will change" in screen_text(app))
    finally:
        proxy.close()


async def test_notify_wakes_the_screen_long_before_the_next_poll(db, conn):
    """A NOTABLE change (an operator's cancel of a running call) is announced at once (migration
    0009: plain claims, completions and enqueues wait for the poll)."""
    import time

    from console.operator.tui.widgets.calltable import CallTable
    from tests.helpers import cancel

    e = enqueue(conn, "search", "notify-me")
    c = claim(conn, "w-1")
    key = str(e["id"])
    app = make_app(db.dsn, listen=True, poll=60.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: app.freshness.listening)
        table = app.screen.query_one(CallTable)
        await settle(pilot, lambda: key in table.jobs and table.jobs[key].state == "running")
        fetched = app.screen.fetched_at
        started = time.monotonic()
        assert cancel(conn, e["id"], "running", c["fencing_token"], operator="zoe", reason="notify probe")
        # the next poll is a minute away: any time well short of it is the NOTIFY's (2 s can pass on a
        # loaded machine; the wake's own interval is tests/tui/test_wake.py's)
        await settle(pilot, lambda: table.jobs.get(key) is not None and table.jobs[key].state == "cancel_requested",
                     timeout=30)
        took = time.monotonic() - started
        assert app.screen.fetched_at != fetched, "a fetch the NOTIFY asked for, not the 60 s poll"
        assert took < 30, f"the change reached the screen in {took:.2f}s with a 60 s poll interval"


async def test_detail_shows_timeline_and_operator_actions(db, conn):
    e = enqueue(conn, "search", "report:9:stage:1")
    enqueue(conn, "search", "report:9:stage:2")
    claim(conn, "w-1")
    from tests.helpers import cancel

    cancel(conn, e["id"], "running", 99, operator="zoe", reason="oops stale")
    app = make_app(db.dsn)
    async with on_call(app, e) as pilot:
        await pilot.press("enter")
        await settle(pilot, lambda: "ownership" in screen_text(app))
        text = screen_text(app)
        assert "w-1" in text and "holds it" in text
        assert "zoe" in text and "refused" in text and "oops stale" in text
        assert "report:9:stage:2" in text, "lineage"
        await pilot.press("escape")
        await settle(pilot, lambda: "ownership" not in screen_text(app))


async def test_header_names_the_open_call_and_keeps_ticking_under_a_dialog(db, conn):
    e = running_search(conn)
    short = str(e["id"])[:8]
    app = make_app(db.dsn, operator="dana")
    async with on_call(app, e) as pilot:
        await pilot.press("enter")
        await settle(pilot, lambda: f"2 Calls{CRUMB_SEPARATOR}call {short}" in screen_text(app))
        await pilot.press("c")
        await settle(pilot, lambda: "What will change" in screen_text(app))
        header = screen_text(app).splitlines()[0]
        assert f"call {short}" in header, header
        # the dialog covers the detail screen; its header is still what the operator sees above it
        # db time has whole seconds: it moves on within one, and a loaded machine's late ticks
        # (a fixed 2.5 s may not be enough) are waited for, for 10 s at most
        await settle(pilot, lambda: screen_text(app).splitlines()[0] != header, timeout=10)
        later = screen_text(app).splitlines()[0]
        assert later != header, f"the header froze under the dialog: {later}"
        await pilot.press("escape")
    assert job(conn, e["id"])["state"] == "running", "esc changed nothing"
