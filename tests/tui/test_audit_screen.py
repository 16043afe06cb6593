"""6 Audit through the real console (Pilot) on a real database, as an auditor types it: the filter
(and a bad one that shows the grammar), who held a call then standing on top, the operator journal,
an export written through the dialog, and enter opening the call's detail at that event."""

from __future__ import annotations

import json

import pytest
from textual.widgets import Input, Select

from console.operator.tui.screens.audit import AuditScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.livetable import LiveTable
from tests.helpers import FAST, cancel, claim, complete, enqueue, events, expire_lease, register_tool
from tests.tui.conftest import SIZE, make_app, notifications, screen_text, settle


@pytest.fixture
def history(db):
    """Two calls: one reclaimed after its lease ran out and completed by the second owner, one
    cancelled by an operator (applied) and then again (refused)."""
    with db.connect() as conn:
        register_tool(conn, "quick", "read_only", **FAST)
        reclaimed = enqueue(conn, "quick")
        claim(conn, "w-old", ["quick"])
        expire_lease(conn, reclaimed["id"])
        job = claim(conn, "w-new", ["quick"])
        complete(conn, job, "w-new")
        cancelled = enqueue(conn, "quick")
        cancel(conn, cancelled["id"], "queued", 0, operator="alice", reason="user left")
        cancel(conn, cancelled["id"], "queued", 0, operator="bob", reason="late look")
        yield db, conn, reclaimed["id"], cancelled["id"]


async def open_audit(pilot, filter_text: str | None = None) -> None:
    await pilot.press("6")
    await settle(pilot, lambda: isinstance(pilot.app.screen, AuditScreen) and pilot.app.screen.loaded_once)
    if filter_text is not None:
        await pilot.press("slash")
        for ch in filter_text:
            await pilot.press("space" if ch == " " else ch)
        await pilot.press("enter")
        await settle(pilot)


def table(app, name: str = "#audit-events") -> LiveTable:
    return app.screen.query_one(name, LiveTable)


async def test_the_filter_selects_events_and_a_bad_one_shows_the_grammar(history):
    db, conn, reclaimed, cancelled = history
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot)
        assert len(table(app).row_keys) == len(events(conn, reclaimed)) + len(events(conn, cancelled))
        await open_audit(pilot, f"job:{str(reclaimed)[:8]}")
        await settle(pilot, lambda: f"filter job:{str(reclaimed)[:8]}" in screen_text(app))
        ids = [e["id"] for e in events(conn, reclaimed)]
        assert table(app).row_keys == [str(i) for i in reversed(ids)], "that call's events, newest first"
        await pilot.press("slash")
        for ch in "state:running":
            await pilot.press(ch)
        await pilot.press("enter")
        await settle(pilot, lambda: "Bad filter" in notifications(app))
        assert "unknown filter key 'state:'" in notifications(app) and "audit filter keys" in notifications(app)
        await pilot.press("escape")
        await pilot.press("escape")  # clears the filter
        await settle(pilot, lambda: len(table(app).row_keys) == len(ids) + len(events(conn, cancelled)))


async def test_with_job_and_at_who_held_it_then_stands_on_top(history):
    db, conn, reclaimed, _cancelled = history
    first = next(e for e in events(conn, reclaimed) if e["kind"] == "claimed")
    second = next(e for e in events(conn, reclaimed) if e["kind"] == "reclaimed")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot, f"job:{str(reclaimed)[:8]} at:{first['at'].isoformat()}")
        await settle(pilot, lambda: "who held it then" in screen_text(app))
        text = screen_text(app)
        assert "held by w-old with fencing token 1" in text and "expired" in text
        answer = text.index("who held it then")
        assert answer < text.index("at (UTC)"), "the answer stands above the events"
        await open_audit(pilot, f"job:{str(reclaimed)[:8]} at:{second['at'].isoformat()}")
        await settle(pilot, lambda: "held by w-new with fencing token 2" in screen_text(app))
        assert "succeeded" in screen_text(app)
        await open_audit(pilot, "owner:w-old")
        await settle(pilot, lambda: "who held it then" not in screen_text(app))
        await open_audit(pilot, "job:ffffffff")
        await settle(pilot, lambda: "no call with id ffffffff" in screen_text(app))
        assert "CANNOT REFRESH" not in screen_text(app), "an unknown call is an answer, not a failed refresh"


async def test_j_shows_the_operator_journal(history):
    db, _conn, _reclaimed, cancelled = history
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot)
        await pilot.press("j")
        await settle(pilot, lambda: "Operator journal" in screen_text(app))
        journal = table(app, "#audit-journal")
        assert len(journal.row_keys) == 2
        text = screen_text(app)
        assert text.index("bob") < text.index("alice"), "newest first"
        assert "refused" in text and "applied" in text and "user left" in text, text
        assert journal.get_cell(journal.row_keys[0], "reason").text == "late look · the call changed since you looked"
        await open_audit(pilot, "operator:alice")
        await settle(pilot, lambda: len(table(app, "#audit-journal").row_keys) == 1)
        await pilot.press("j")
        await settle(pilot, lambda: "Events across every call" in screen_text(app))


async def test_e_exports_the_current_filter_through_the_dialog(history, tmp_path):
    db, conn, reclaimed, _cancelled = history
    app = make_app(db.dsn)
    target = tmp_path / "call.csv"
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot, f"job:{str(reclaimed)[:8]}")
        await pilot.press("e")
        await settle(pilot, lambda: "Export the history" in screen_text(app))
        path = app.screen.query_one("#export-path", Input)
        path.value = str(target)
        app.screen.query_one("#export-format", Select).value = "csv"
        await pilot.click("#export-go")
        await settle(pilot, lambda: "WRITTEN" in screen_text(app), timeout=20)
        assert f"{len(events(conn, reclaimed))} records" in screen_text(app)
        await pilot.press("escape")
    lines = target.read_text().splitlines()
    assert lines[0].startswith("id,job_id,at,kind,actor,fencing_token")
    assert lines[0].endswith(",details,reason,request_id,db_role"), "the login that wrote each row, too"
    assert len(lines) == 1 + len(events(conn, reclaimed)) and all(str(reclaimed) in line for line in lines[1:])
    login = conn.execute("select session_user as u").fetchone()["u"]
    assert all(line.endswith(f",{login}") for line in lines[1:])
    assert not list(tmp_path.glob(".*partial")), "renamed into place, nothing left behind"


async def test_e_exports_jsonl_by_default_and_owner_narrows_it(history, tmp_path):
    db, _conn, _reclaimed, _cancelled = history
    app = make_app(db.dsn)
    target = tmp_path / "old.jsonl"
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot, "owner:w-old")
        await pilot.press("e")
        await settle(pilot, lambda: "Export the history" in screen_text(app))
        app.screen.query_one("#export-path", Input).value = str(target)
        await pilot.click("#export-go")
        await settle(pilot, lambda: "WRITTEN" in screen_text(app), timeout=20)
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert rows and all("w-old" in (r["owner_to"], r["owner_from"], r["actor"]) for r in rows)
    assert all(list(r)[-3:] == ["reason", "request_id", "db_role"] and r["db_role"] for r in rows)


async def test_e_on_the_journal_exports_the_journal_rows_the_filter_selects(history, tmp_path):
    """What the journal view shows, not every event: its rows, with the keys of `audit actions
    --json` and the login; the filter narrows it as it narrows the view."""
    db, conn, _reclaimed, cancelled = history
    app = make_app(db.dsn)
    everything, alice = tmp_path / "journal.jsonl", tmp_path / "alice.csv"
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot)
        await pilot.press("j")
        await settle(pilot, lambda: "Operator journal" in screen_text(app))
        await pilot.press("e")
        await settle(pilot, lambda: "Export the operator journal" in screen_text(app))
        app.screen.query_one("#export-path", Input).value = str(everything)
        await pilot.click("#export-go")
        await settle(pilot, lambda: "WRITTEN" in screen_text(app), timeout=20)
        assert "2 records" in screen_text(app)
        await pilot.press("escape")
        await open_audit(pilot, "operator:alice")
        await settle(pilot, lambda: len(table(app, "#audit-journal").row_keys) == 1)
        await pilot.press("e")
        await settle(pilot, lambda: "Export the operator journal" in screen_text(app))
        app.screen.query_one("#export-path", Input).value = str(alice)
        app.screen.query_one("#export-format", Select).value = "csv"
        await pilot.click("#export-go")
        await settle(pilot, lambda: "WRITTEN" in screen_text(app), timeout=20)
    keys = ["at", "operator", "action", "outcome", "job_id", "agent_id", "reason", "request_id", "fencing_token",
            "details", "db_role"]
    rows = [json.loads(line) for line in everything.read_text().splitlines()]
    assert [list(r) for r in rows] == [keys, keys], "the journal's rows, not the events"
    assert [(r["operator"], r["action"], r["outcome"], r["job_id"]) for r in rows] == [
        ("bob", "cancel", "refused", str(cancelled)), ("alice", "cancel", "applied", str(cancelled))], "newest first"
    assert rows[1]["reason"] == "user left" and rows[1]["db_role"] and rows[1]["request_id"]
    lines = alice.read_text().splitlines()
    assert lines[0] == ",".join(keys) and len(lines) == 2 and ",alice,cancel,applied," in lines[1]


async def test_each_row_names_its_login_and_marks_a_name_that_is_not_its_own(db, pg_server):
    """Real logins: a worker's own name stands alone (its login in the login column); an operator's
    name written by an operator login is marked, in the events, the journal and the call's detail."""
    from console.operator.present.logins import LOGIN_STYLE
    from tests.helpers import as_login, ensure_login

    worker, operator = "lc_audit_tui_w", "lc_audit_tui_op"
    with pg_server.admin() as admin:
        ensure_login(admin, worker, "leasectl_worker")
        ensure_login(admin, operator, "leasectl_operator")
    with db.connect() as conn:
        register_tool(conn, "quick", "read_only", **FAST)
    with as_login(db, worker) as w, as_login(db, operator) as op:
        done = enqueue(w, "quick")
        complete(w, claim(w, f"{worker}:a", ["quick"]), f"{worker}:a")
        stopped = enqueue(w, "quick")
        assert cancel(op, stopped["id"], "queued", 0, operator="alice", reason="user left") is not None
        ids = {e["kind"]: e["id"] for e in events(w, done["id"])}
        cancel_id = next(e["id"] for e in events(w, stopped["id"]) if e["kind"] == "operator_cancel")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot)
        rows = table(app)
        await settle(pilot, lambda: str(cancel_id) in rows.row_keys)
        claimed_login = rows.get_cell(str(ids["claimed"]), "login")
        assert claimed_login is not None and claimed_login.text == worker, "its own name: the login, unmarked"
        assert rows.get_cell(str(ids["claimed"]), "actor").style != LOGIN_STYLE
        marked = rows.get_cell(str(cancel_id), "login")
        assert marked is not None and marked.text == f"≠ {operator}" and marked.style == LOGIN_STYLE
        assert rows.get_cell(str(cancel_id), "actor").style == LOGIN_STYLE
        assert "an operator's name that is not that login's own" in screen_text(app)
        await pilot.press("j")
        await settle(pilot, lambda: "Operator journal" in screen_text(app))
        journal = table(app, "#audit-journal")
        assert journal.get_cell(journal.row_keys[0], "login").text == f"≠ {operator}"
        journal.focus()
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, DetailScreen) and app.screen.loaded_once)
        await settle(pilot, lambda: "ownership" in screen_text(app))
        text = screen_text(app)  # the call's operator actions and its history: the decision row, each time
        assert text.count(f"≠ {operator}") == 2 and "names and logins:" in text, text


async def test_enter_opens_the_calls_detail_at_that_event(history):
    db, conn, reclaimed, _cancelled = history
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot, f"job:{str(reclaimed)[:8]}")
        rows = table(app)
        rows.focus()
        await pilot.press("down")  # the second newest event of the call
        key = rows.cursor_key
        assert key is not None
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, DetailScreen) and app.screen.loaded_once)
        detail = app.screen
        assert isinstance(detail, DetailScreen)
        assert detail.job_id == reclaimed and detail.at_event == int(key)
        ids = [e["id"] for e in events(conn, reclaimed)]
        await settle(pilot, lambda: "ownership" in screen_text(app))
        from textual.widgets import Static

        history_table = detail.query_one("#history", Static).content
        styles = [row.style for row in history_table.rows]  # type: ignore[union-attr]
        assert styles[ids.index(int(key))] == "reverse" and styles.count("reverse") == 1, "that event stands out"
        await pilot.press("escape")
        await settle(pilot, lambda: isinstance(app.screen, AuditScreen))


async def test_the_audit_screen_at_80x24_keeps_the_answer_and_the_events(history):
    db, conn, reclaimed, _cancelled = history
    first = next(e for e in events(conn, reclaimed) if e["kind"] == "claimed")
    app = make_app(db.dsn)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_audit(pilot, f"job:{str(reclaimed)[:8]} at:{first['at'].isoformat()}")
        await settle(pilot, lambda: "held by w-old" in screen_text(app))
        text = screen_text(app)
        assert "claimed" in text and str(reclaimed)[:8] in text and "at (UTC)" in text, "the events up to then"
        assert "reclaimed" not in text.split("at (UTC)")[1], "at: shows the events up to that instant"



async def test_hostile_text_on_the_audit_screen_never_reaches_the_terminal(db):
    from tests.tui.test_safety import HOSTILE, assert_safe

    with db.connect() as conn:
        register_tool(conn, "quick", "read_only", **FAST)
        e = enqueue(conn, "quick")
        claim(conn, f"w{HOSTILE}", ["quick"])
        cancel(conn, e["id"], "running", 1, operator=f"op{HOSTILE}", reason=f"why{HOSTILE}")
        claimed = next(ev for ev in events(conn, e["id"]) if ev["kind"] == "claimed")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot)
        await settle(pilot, lambda: "operator_cancel" in screen_text(app))
        assert_safe(app, "audit events")
        assert "\\x1b" in screen_text(app), "shown as visible escapes"
        await open_audit(pilot, f"job:{str(e['id'])[:8]} at:{claimed['at'].isoformat()}")
        await settle(pilot, lambda: "who held it then" in screen_text(app))
        assert_safe(app, "who held it")
        await pilot.press("j")
        await settle(pilot, lambda: "Operator journal" in screen_text(app))
        assert_safe(app, "journal")


async def test_esc_during_an_export_stops_it_and_says_nothing_was_written(history, tmp_path):
    from console.operator.files import atomic_write
    from console.operator.tui.screens.export import ExportDialog
    from console.shared.errors import LeasectlError

    db, *_ = history
    target = tmp_path / "slow.jsonl"
    stopped = []

    def slow_writer(path, fmt, progress, cancelled):
        with atomic_write(path) as handle:
            handle.write("{}\n")
            while not cancelled():  # a long export: only the cancel ends it
                progress(1, None)
                import time
                time.sleep(0.02)
            stopped.append(True)
            raise LeasectlError("export stopped")  # as the screen's writer does: the temporary file goes
        return 1

    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_audit(pilot)
        app.push_screen(ExportDialog("Export the history", "slow", str(target), slow_writer))
        await settle(pilot, lambda: isinstance(app.screen, ExportDialog))
        await pilot.click("#export-go")
        await settle(pilot, lambda: "exporting" in screen_text(app))
        await pilot.press("escape")
        await settle(pilot, lambda: "Export stopped" in notifications(app))
        assert "was not written" in notifications(app) and str(target.name) in notifications(app)
        await settle(pilot, lambda: bool(stopped))
    assert not target.exists() and not list(tmp_path.glob(".*partial")), "no file, complete or partial"
