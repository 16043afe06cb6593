"""The operator's safety in the console: hostile text on every screen, ordinary typing
that never changes data, one handler for every failed worker, a bounded payload, one filter
grammar, and a read-only session that offers no action at all."""

from __future__ import annotations

import unicodedata

import pytest
from psycopg.types.json import Jsonb

from console.control.supervisor import tick
from console.db.connect import run_one
from tests import helpers as h
from tests.tui.conftest import (
    SIZE,
    break_actions,
    dialog_ready,
    make_app,
    notifications,
    outcomes_unknown,
    running_search,
    screen_text,
    settle,
)

# OSC 52 (clipboard), OSC 2 (window title), SGR, a bidi override, zero-width, a line separator, a BOM
HOSTILE = "\x1b]52;c;UFdORUQ=\x07\x1b]2;PWNED-TITLE\x07\x1b[31mX\u202egnp.exe\u200b\u2028\ufeff"


def raw_controls(text: str) -> list[str]:
    return sorted({f"U+{ord(c):04X}" for c in text
                   if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and c != "\n"})


def drawn(app) -> str:
    """What the console would write to the terminal, as text (Textual's own control codes aside)."""
    return screen_text(app)


def assert_safe(app, where: str) -> None:
    text = drawn(app)
    assert not raw_controls(text), f"{where}: raw control or invisible characters drawn: {raw_controls(text)}"


async def open_detail(pilot, call: dict) -> None:
    """From the calls list, the detail screen of `call`."""
    await pilot.press("2")
    await settle(pilot, lambda: str(call["id"])[:8] in drawn(pilot.app))
    await pilot.press("enter")
    await settle(pilot, lambda: "ownership" in drawn(pilot.app))


@pytest.fixture
def hostile(db):
    """Every text column a worker, an agent or an operator can choose, set to the hostile set."""
    with db.connect() as conn:
        tool = f"pay{HOSTILE}"
        h.register_tool(conn, tool, "mutating_unverifiable", **h.FAST)
        h.register_tool(conn, "search", "read_only", **h.SLOW)
        root, child = f"root{HOSTILE}", f"child{HOSTILE}"
        h.register_tree(conn, {root: None, child: root})
        h.give_grant(conn, child, "credential", f"vault:{HOSTILE}", issued_by=root)
        e = run_one(conn, "worker/enqueue", tool=tool, idempotency_key=f"key:{HOSTILE}",
                    payload=Jsonb({"note": HOSTILE}), agent_id=child, session_id=HOSTILE, deadline_at=None,
                    model=HOSTILE, provider=HOSTILE)
        c = h.claim(conn, f"w{HOSTILE}")
        h.start_side_effect(conn, c, f"w{HOSTILE}", f"req{HOSTILE}")
        h.record_event(conn, c, "heartbeat_lost", f"w{HOSTILE}", details={"why": HOSTILE})
        h.report_unknown(conn, c, f"w{HOSTILE}")
        running = h.enqueue(conn, "search", f"run:{HOSTILE}", agent_id=root)
        h.claim(conn, f"w2{HOSTILE}", ["search"])
        h.cancel(conn, running["id"], "running", 9, operator=f"op{HOSTILE}", reason=f"why{HOSTILE}")
        s = h.request_shutdown(conn, child, "abort", window=0.2, operator="ops", reason=f"because{HOSTILE}")

        def reconciled() -> bool:
            tick(conn, supervisor_id=f"sup{HOSTILE}", sweep=False)
            return conn.execute("select state from shutdowns where id = %s", (s["id"],)).fetchone()["state"] \
                == "terminated"
        h.wait_until(reconciled, timeout=20, interval=0.1, what="the hostile shutdown to be reconciled")
        yield db, conn, e, running


async def test_hostile_text_in_every_field_never_reaches_the_terminal(hostile):
    db, _conn, e, running = hostile
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, lambda: "outcome unknown" in drawn(app))
        assert_safe(app, "triage")
        assert "\\x1b" in drawn(app), "hostile characters are shown as visible escapes"
        for key, where in (("2", "calls"), ("3", "approvals")):
            await pilot.press(key)
            await settle(pilot)
            assert_safe(app, where)
        await pilot.press("a")  # approve dialog on the hostile call
        await dialog_ready(pilot, "What will change")
        assert_safe(app, "approve dialog")
        await pilot.press("escape")
        await pilot.press("t")
        await dialog_ready(pilot, "What will change")
        assert_safe(app, "mark-terminal dialog")
        await pilot.press("escape")
        await pilot.press("enter")  # the call's detail
        await settle(pilot, lambda: "ownership" in drawn(app))
        assert_safe(app, "detail")
        await pilot.press("p")
        await settle(pilot, lambda: "bytes as text" in drawn(app))
        assert_safe(app, "payload revealed")
        await pilot.press("escape")
        await pilot.press("4")
        await settle(pilot, lambda: "root" in drawn(app))
        assert_safe(app, "fleet")
        await pilot.press("tab")
        await settle(pilot)
        assert_safe(app, "fleet shutdowns")
        await pilot.press("5")
        await settle(pilot, lambda: "UNACCOUNTED" in drawn(app) or "confirmed" in drawn(app))
        assert_safe(app, "reconciliations")
        await pilot.press("enter")
        await settle(pilot, lambda: "In-flight calls" in drawn(app))
        assert_safe(app, "record")
        await pilot.press("question_mark")
        await settle(pilot, lambda: "Keys here" in drawn(app))
        assert_safe(app, "help")


async def test_the_terminal_boundary_drops_what_a_screen_forgot_to_sanitize(db):
    from textual.widgets import Static

    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        forgot = Static(f"RAW{HOSTILE}RAW", markup=False)  # a widget that skipped sanitize()
        await app.screen.mount(forgot)
        await settle(pilot, lambda: "RAW" in drawn(app))
        assert_safe(app, "a widget with raw text")


async def test_ordinary_typing_never_changes_data(db, monkeypatch):
    """`/ocean⏎` on a call's detail: `/` says there is nothing to filter, `c` opens Cancel, and
    `ean⏎` -- typed before the dialog appeared -- must not become a reason and apply it."""
    from console.operator.tui.screens import action

    # a loaded test machine can space Pilot's keys further apart than a person types: widen the
    # burst for the test (the rule itself is tested with exact key times below)
    monkeypatch.setattr(action, "TYPE_AHEAD_GAP", 2.0)
    with db.connect() as conn:
        e = running_search(conn, "w-1")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot, e)
        await pilot.press("slash", "o", "c", "e", "a", "n", "enter")
        await settle(pilot)
        assert "nothing to filter" in notifications(app)
        assert "Ignored" in drawn(app) and "typed before this dialog appeared" in drawn(app), notifications(app)
        await pilot.pause(2.2)
        with db.connect() as conn:
            assert h.job(conn, e["id"])["state"] == "running", "nothing changed"
            assert not [ev for ev in h.events(conn, e["id"]) if ev["kind"].startswith("operator_")]
        # the dialog's own flow still works once the operator reads it: reason, enter applies
        for ch in "stuck":
            await pilot.press(ch)
        await pilot.press("enter")
        await settle(pilot, lambda: "APPLIED" in drawn(app))
    with db.connect() as conn:
        assert h.job(conn, e["id"])["state"] == "cancel_requested"


def test_the_type_ahead_rule_with_exact_key_times():
    from textual import events

    from console.operator.tui.screens.action import TYPE_AHEAD_GAP, GuardedDialog

    dialog = GuardedDialog()
    opened = dialog.opened_at

    def key(name: str, at: float) -> events.Key:
        event = events.Key(name, name if len(name) == 1 else None)
        event.time = at
        return event

    burst = [key(k, opened + 0.1 * i) for i, k in enumerate("ean", start=1)] + [key("enter", opened + 0.4)]
    assert all(dialog.swallows(k) for k in burst), "a burst begun before the dialog is ignored, key by key"
    assert not dialog.swallows(key("escape", opened + 0.45)), "esc always works"
    assert not dialog.swallows(key("s", opened + 0.4 + TYPE_AHEAD_GAP + 0.1)), "after a pause: typed at the dialog"
    assert not dialog.swallows(key("t", opened + 0.4 + TYPE_AHEAD_GAP + 0.15)), "and armed from then on"
    assert dialog.swallowed == 4


async def test_an_unexpected_error_in_an_action_reads_not_applied(db, monkeypatch):
    with db.connect() as conn:
        e = running_search(conn, "w-1")
    break_actions(monkeypatch, "a bug in the action path")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: str(e["id"])[:8] in drawn(app))
        await pilot.press("c")
        await dialog_ready(pilot, "What will change")
        for ch in "stuck":
            await pilot.press(ch)
        await pilot.press("enter")
        await settle(pilot, lambda: "NOT APPLIED" in drawn(app))
        text = drawn(app)
        assert "internal error" in text and "RuntimeError" in text and "applying" not in text
        assert app.screen.busy is False, "the dialog is not left waiting"
    from console.operator.tui.failures import log_path

    logged = log_path().read_text()
    assert "a bug in the action path" in logged and "Traceback" in logged, "the log keeps the traceback"


async def test_an_unexpected_error_in_a_poll_is_a_banner_not_a_crash(db, monkeypatch):
    from console.db import reads

    app = make_app(db.dsn, poll=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)

        def broken(conn, *args, **kwargs):
            raise KeyError("a bug in the triage read")

        monkeypatch.setattr(reads, "triage", broken)
        await settle(pilot, lambda: "CANNOT REFRESH" in drawn(app), timeout=10)
        assert "internal error" in drawn(app) and "KeyError" in drawn(app)
        assert "● live" not in drawn(app).splitlines()[0], "never 'live' under a trouble banner"
        monkeypatch.undo()
        await settle(pilot, lambda: "CANNOT REFRESH" not in drawn(app), timeout=10)


async def test_a_big_payload_is_previewed_bounded_with_its_real_size(db):
    from console.db.reads import PREVIEW_CHARS

    big = {"rows": [{"n": i, "text": "x" * 90} for i in range(70_000)]}  # ~7 MB as text
    with db.connect() as conn:
        h.register_tool(conn, "search", "read_only", **h.SLOW)
        e = h.enqueue(conn, "search", payload=big)
        size = conn.execute("select octet_length(payload::text) as n from tool_jobs").fetchone()["n"]
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot, e)
        assert app.screen.detail.job.payload is None, "the payload is not fetched until asked for"
        await pilot.press("p")
        await settle(pilot, lambda: "bytes as text" in drawn(app), timeout=20)
        preview = app.screen.preview
        assert preview.payload_bytes == size and len(preview.payload_preview) == PREVIEW_CHARS
        shown = app.screen._preview_words(preview).plain
        assert f"{size:,} bytes as text" in shown and "e exports the whole" in shown
        assert "bytes as text" in drawn(app), "the preview is scrolled into view"


async def test_triage_filters_with_the_grammar_and_shows_it(db):
    with db.connect() as conn:
        e = outcomes_unknown(conn, 3, "payment_capture")[-1]
        h.register_tool(conn, "search", "read_only", **h.FAST)
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, lambda: "outcome unknown" in drawn(app))
        await pilot.press("slash", *"tool:payment_capture", "enter")
        await settle(pilot, lambda: "filter tool:payment_capture" in drawn(app))
        assert "3 of 3 shown" in drawn(app), "the false all-clear is gone"
        assert str(e["id"])[:8] in drawn(app)
        await pilot.press("slash")
        await pilot.press("ctrl+u", *"flavour:x", "enter")
        await settle(pilot, lambda: "unknown filter key" in notifications(app))
        assert "state:" in notifications(app), "a bad filter shows the grammar"
        assert app.screen.query_one("FilterBar").is_open, "the bar stays open to fix it"
        await pilot.press("escape", "escape")
        await settle(pilot, lambda: "filter tool:" not in drawn(app))


async def test_typing_a_filter_never_triggers_a_screen_key(db):
    """On Approvals, typing `4` into the filter went to the global keys and switched to Fleet."""
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await settle(pilot)
        await pilot.press("slash", *"id:4abc")
        await settle(pilot)
        assert app.current_mode == "approvals" and app.screen.query_one("FilterBar").value == "id:4abc"
        await pilot.press("enter")
        await settle(pilot, lambda: "filter id:4abc" in drawn(app))
        for key in ("4", "5"):
            await pilot.press(key)
            await settle(pilot)
            await pilot.press("slash", *"agent:1", "enter")
            await settle(pilot, lambda: "filter agent:1" in drawn(app))
            assert app.current_mode == ("fleet" if key == "4" else "reconciliations")


async def test_read_only_offers_no_action_and_help_lists_every_screen(db):
    app = make_app(db.dsn, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        footer = drawn(app).splitlines()[-1]
        for word in ("Cancel", "Mark terminal", "Approve retry"):
            assert word not in footer, f"read-only footer offers {word}: {footer}"
        await pilot.press("4")
        await settle(pilot)
        footer = drawn(app).splitlines()[-1]
        assert "Drain" not in footer and "Abort" not in footer
        await pilot.press("question_mark")
        await settle(pilot, lambda: "Keys here" in drawn(app))
        text = drawn(app)
        assert "Connected to" in text and "READ-ONLY" in text
    app = make_app(db.dsn)
    async with app.run_test(size=(140, 200)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot, lambda: "Keys of the other screens" in drawn(app))
        text = drawn(app)
        for where in ("Calls", "Approvals", "Fleet", "Reconciliations", "Detail"):
            assert where in text, f"help lacks the keys of {where}"
        assert "Drain the selected agent's subtree" in text and "Next page (older calls)" in text


async def test_the_palette_has_every_action_and_none_of_textuals(db):
    with db.connect() as conn:
        h.register_tree(conn, {"planner-1": None})
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await settle(pilot, lambda: "planner-1" in drawn(app))
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Drain the subtree of planner-1" in titles and "Abort the subtree of planner-1" in titles
        assert "Keys" not in titles and "Maximize" not in titles
        assert {"Triage", "Calls", "Approvals", "Fleet", "Reconciliations", "Help", "Refresh"} <= set(titles)


async def test_a_read_only_palette_offers_no_action_either(db):
    """The keys are not offered on a read-only session; nor are the palette's entries for them (the
    web console's viewer found them listed, each then refused)."""
    with db.connect() as conn:
        h.register_tree(conn, {"planner-1": None})
        outcomes_unknown(conn, 1)
    for read_only in (False, True):
        app = make_app(db.dsn, read_only=read_only)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, lambda app=app: app.screen.selected_job() is not None)
            titles = " | ".join(c.title for c in app.get_system_commands(app.screen))
            for word in ("Cancel", "Approve"):
                assert (word in titles) is not read_only, (read_only, titles)
            await pilot.press("4")
            await settle(pilot, lambda app=app: "planner-1" in drawn(app))
            titles = " | ".join(c.title for c in app.get_system_commands(app.screen))
            assert ("Drain the subtree of planner-1" in titles) is not read_only, (read_only, titles)
            assert "Refresh" in titles and "Help" in titles, "what only reads stays"


async def test_the_cursor_never_moves_to_another_call_silently(db):
    with db.connect() as conn:
        made = outcomes_unknown(conn, 2)
    app = make_app(db.dsn, poll=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, lambda: str(made[1]["id"])[:8] in drawn(app))
        selected = app.screen.selected_job()
        with db.connect() as conn:  # the selected call is settled elsewhere: it leaves triage
            from tests.helpers import mark_terminal

            mark_terminal(conn, selected.id, "outcome_unknown", 1, "failed", operator="erin")
        await settle(pilot, lambda: "left this list" in drawn(app), timeout=10)
        assert f"call {selected.short_id} left this list" in drawn(app)


async def test_an_answer_fetched_under_the_old_filter_is_dropped_not_shown_under_the_new(db, monkeypatch):
    """A poll in flight when the filter changes lands after it: shown, it would put calls the new
    filter excludes under the new filter's name, and then the new answer 'moves' the cursor and
    reports a call that left the list (it was the filter, not the call). Held here step by step."""
    import threading

    from console.operator.tui.screens.calls import CallsScreen

    with db.connect() as conn:
        h.register_tool(conn, "search", "read_only", **h.FAST)
        h.enqueue(conn, "search", "r:1")
        queued = h.enqueue(conn, "search", "q:1")
        running = h.claim(conn, "w-1")  # the oldest: r:1
        assert running["id"] != queued["id"]
    gate, holding, held = threading.Event(), threading.Event(), threading.Event()
    plain_load = CallsScreen.load_request

    def held_load(self, conn, request):
        answer = plain_load(self, conn, request)  # read under the filter of the moment ...
        if holding.is_set():
            held.set()
            gate.wait(timeout=20)  # ... and delivered late
        return answer

    monkeypatch.setattr(CallsScreen, "load_request", held_load)
    app = make_app(db.dsn, poll=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: str(queued["id"])[:8] in drawn(app))
        holding.set()
        # the next poll starts and is held, asking for everything: waited for (a fixed 0.5 s may
        # not be enough on a loaded machine), 20 s at most
        for _ in range(200):
            if held.is_set():
                break
            await pilot.pause(0.1)
        assert held.is_set(), "no poll was held"
        screen = app.screen
        assert screen._in_flight
        await pilot.press("slash", *list("state:running"), "enter")
        await pilot.pause(0.1)
        holding.clear()
        gate.set()
        await settle(pilot, lambda: "state:running" in drawn(app) and "page 1 · 1 call ·" in drawn(app))
        await pilot.pause(0.5)
        assert str(running["id"])[:8] in drawn(app)
        assert "left this list" not in drawn(app), "the filter moved the cursor, not the call"
        assert str(queued["id"])[:8] not in drawn(app)
