"""The console's polish from an attacker's walk, each through the real console on a real database:
enter on a select chooses and moves on, an empty reason is said to be required, a bulk dialog over
nothing asks for no count, toasts never cover a dialog's buttons, 80x24 keeps a dialog's title and
the Calls heartbeat, a dialog's times tick, a `/` filter typed in one burst is kept whole, counts
are said in good English, and the tests never write into the user's own log."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import platformdirs
import pytest
from textual import events
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key

from console.db.session import ConsoleSession
from console.operator.tui.app import LeasectlApp
from console.operator.tui.clock import FrozenClock
from console.operator.tui.pictures import SMALL
from tests.helpers import SLOW, claim, complete, enqueue, register_tool
from tests.tui.conftest import (
    SIZE,
    break_actions,
    cancel_marked,
    make_app,
    notifications,
    running_search,
    screen_text,
    settle,
)
from tests.tui.test_flows import cancel_dialog, mark_terminal_dialog, type_text


@pytest.fixture
def running(db):
    """One running call with a long lease (60 s): mark terminal then needs force, and offers it."""
    with db.connect() as conn:
        e = running_search(conn)
        yield db, conn, str(e["id"])[:8]


# ----------------------------------------------------------------------------- 1. the state select


async def test_enter_on_the_state_select_chooses_and_moves_on(running):
    db, conn, short = running
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await mark_terminal_dialog(pilot, short, "wedged")
        await pilot.press("enter")  # reason -> the state
        select = app.screen.query_one("#terminal")
        assert app.focused is select
        await pilot.press("enter")  # nothing chosen yet: enter opens the list
        await settle(pilot, lambda: select.expanded)
        await pilot.press("down", "down", "enter")  # succeeded, failed: enter chooses ...
        await settle(pilot, lambda: not select.expanded)
        assert str(select.value) == "failed"
        assert app.focused is app.screen.query_one("#force"), f"... and moves on, not to {app.focused}"
        await pilot.press("shift+tab")  # back on the chosen select
        assert app.focused is select
        await pilot.press("enter")  # a choice made: enter moves on, it does not open the list again
        await pilot.pause(0.2)
        assert not select.expanded, "enter on a chosen select opened its list again"
        assert app.focused is app.screen.query_one("#force")
    assert conn.execute("select state from tool_jobs").fetchone()["state"] == "running", "nothing was applied"


# ----------------------------------------------------------------------------- 2. an empty reason


async def test_enter_in_an_empty_reason_says_it_is_required_and_stays(running):
    db, conn, short = running
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await mark_terminal_dialog(pilot, short)  # the reason is not its last field: enter used to move on
        await pilot.press("enter")
        await settle(pilot, lambda: "A reason is required" in screen_text(app))
        assert app.focused is app.screen.query_one("#reason"), f"the focus moved on to {app.focused}"
        await type_text(pilot, "   ")  # blanks are no reason either
        await pilot.press("enter")
        assert app.focused is app.screen.query_one("#reason")
        await type_text(pilot, "wedged")
        await settle(pilot, lambda: "A reason is required" not in screen_text(app))  # answered: said no more
        await pilot.press("enter")
        assert app.focused is app.screen.query_one("#terminal"), "with a reason, enter moves on"


# ----------------------------------------------------------------------------- 3. a bulk action over nothing


async def test_a_bulk_dialog_over_nothing_to_do_asks_for_no_count(db):
    from textual.widgets import Button

    with db.connect() as conn:
        register_tool(conn, "search", "read_only", **SLOW)
        for n in range(2):
            enqueue(conn, "search", f"done:{n}")
            complete(conn, claim(conn, f"w-{n}"), f"w-{n}")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: "page 1 · 2 calls" in screen_text(app))
        await cancel_marked(pilot, 2)
        await settle(pilot, lambda: "Nothing to cancel" in screen_text(app))
        text = screen_text(app)
        assert "type '0'" not in text and "Cancel 0 calls" not in text, text
        assert "already succeeded" in text or "cannot be cancelled" in text, "it says why"
        dialog = app.screen
        assert dialog.query_one("#apply", Button).disabled, "applying nothing is impossible"
        assert not dialog.query_one("#confirm-count").display, "no count to type"
        await type_text(pilot, "cleanup")
        await pilot.press("enter")  # the reason is the last field left: enter tries to apply
        await pilot.pause(0.3)
        assert dialog.result is None and not dialog.busy, "nothing was sent"
        assert "Nothing to send" in screen_text(app)


# ----------------------------------------------------------------------------- 4. toasts and buttons


@pytest.mark.parametrize("size", [SMALL, SIZE], ids=["80x24", "140x45"])
async def test_toasts_never_cover_a_dialogs_answer_or_buttons(running, size):
    from textual.errors import NoWidget
    from textual.geometry import Region
    from textual.widgets._toast import Toast

    db, _conn, short = running
    app = make_app(db.dsn)
    async with app.run_test(size=size, notifications=True) as pilot:  # Pilot shows no toast unless asked
        await cancel_dialog(pilot, short)
        await pilot.press("enter")  # an answer in the dialog's answer line: "a reason is required"
        await settle(pilot, lambda: "A reason is required" in screen_text(app))
        for n in range(4):
            app.notify(f"toast {n}: something happened elsewhere while the dialog was open, "
                       "in words long enough to take a few lines", title="Elsewhere", timeout=30)
        await settle(pilot, lambda: len(app.screen.query(Toast)) == 4)
        await pilot.pause(0.3)
        dialog = app.screen

        def on_screen(widget) -> Region:  # what the compositor draws of it (a toast can be clipped)
            try:
                return dialog.find_widget(widget).visible_region
            except NoWidget:
                return Region()

        toasts = {str(t.render()): on_screen(t) for t in dialog.query(Toast)}
        shown = {words: region for words, region in toasts.items() if region.area}
        assert any("toast 3" in words for words in shown), f"the newest toast is shown: {toasts}"
        for part in ("#apply", "#leave", "#outcome"):
            region = on_screen(dialog.query_one(part))
            assert region.area, f"{part} is on screen"
            covered = [words for words, r in shown.items() if r.overlaps(region)]
            assert not covered, f"a toast covers {part} {region}: {covered}"


# ----------------------------------------------------------------------------- 5. 80x24


async def test_at_80x24_calls_keep_the_call_its_health_lease_and_heartbeat(running):
    """README: "columns give way in order of importance (the call, its lease health, its lease and
    heartbeat stay)"."""
    db, _conn, short = running
    app = make_app(db.dsn)
    async with app.run_test(size=SMALL) as pilot:
        for screen, mode in (("2", "calls"), ("1", "triage")):
            await pilot.press(screen)
            # that screen's own rows and header, not the one before it still on the way out (a loaded
            # machine once read the header between the two)
            await settle(pilot, lambda mode=mode: app.current_mode == mode and short in screen_text(app)
                         and "lease health" in screen_text(app), timeout=15)
            header = next(line for line in screen_text(app).splitlines() if "lease health" in line)
            for column in ("call", "lease health", "lease left", "beat"):
                assert column in header, f"{column!r} gave way at 80 columns: {header}"


async def test_at_80x24_the_mark_terminal_dialog_keeps_its_title(running):
    db, _conn, short = running
    app = make_app(db.dsn)
    async with app.run_test(size=SMALL) as pilot:
        await mark_terminal_dialog(pilot, short, "wedged")
        for _ in range(3):  # the state, force, the buttons: the body scrolls down to each
            assert f"Mark terminal call {short}" in screen_text(app), screen_text(app)
            await pilot.press("tab")
            await pilot.pause(0.1)
        assert f"Mark terminal call {short}" in screen_text(app), screen_text(app)
        assert "Apply" in screen_text(app)


# ----------------------------------------------------------------------------- 6. times tick in a dialog


async def test_a_dialogs_times_keep_ticking_while_it_is_open(running):
    db, _conn, short = running
    clock = FrozenClock()
    app = LeasectlApp(ConsoleSession(db.dsn, operator="dana", label="demo"), clock=clock, listen=False)

    def shown(part: str) -> str:  # what the dialog's widget shows now, unwrapped
        return str(app.screen.query_one(part).content)

    def lease_left() -> int:
        found = re.search(r"holds a live lease \((\d+)s left\)", shown("#what-changes"))
        assert found, shown("#what-changes")
        return int(found.group(1))

    async with app.run_test(size=SIZE) as pilot:
        await mark_terminal_dialog(pilot, short)
        first = lease_left()
        assert "as you saw it 0s ago" in shown("#guard")
        clock.at += 7
        await settle(pilot, lambda: "as you saw it 7s ago" in shown("#guard"))
        assert lease_left() == first - 7, "the lease left counts down with the guard's age"
        clock.at += 60
        await settle(pilot, lambda: "as you saw it 1m07s ago" in shown("#guard"))
        assert "lease ran out" in shown("#what-changes"), "a lease counted down past its end says so"


# ----------------------------------------------------------------------------- 9. a filter typed in one burst


def burst(app, *keys: str) -> None:
    """Keys as a terminal delivers a paste or `tmux send-keys '/state:running' Enter`: all at once,
    none waiting for the one before it to be handled (Pilot's press waits after every key). Names
    and characters as Pilot's press takes them."""
    for typed in keys:
        key = _character_to_key(typed) if len(typed) == 1 and not typed.isalnum() else typed
        original = REPLACED_KEYS.get(key, key)
        try:
            character: str | None = unicodedata.lookup(_get_unicode_name_from_key(original))
        except KeyError:
            character = key if len(key) == 1 else None
        event = events.Key(key, character)
        event.set_sender(app)
        app._driver.send_message(event)


@pytest.mark.parametrize("where", ["2", "1"], ids=["calls", "triage"])
async def test_a_filter_typed_in_one_burst_is_kept_whole(running, where):
    db, conn, short = running
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(where)
        await settle(pilot)
        burst(app, "/", *"state:running key:x/y", "enter")  # `/` in the text is text, once the bar is open
        await settle(pilot, lambda: "filter state:running key:x/y" in screen_text(app))
        assert not app.screen.query_one("FilterBar").is_open
        assert "Nothing to do" not in notifications(app), "keys of the burst reached the list's bindings"
        # the bar opens on the active filter, selected: a burst replaces it, as slower typing does
        burst(app, "/", *"tool:search", "enter")
        await settle(pilot, lambda: "filter tool:search " in screen_text(app))


# ----------------------------------------------------------------------------- 10. counts in words


async def test_counts_of_one_are_said_in_the_singular(running):
    db, _conn, short = running
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: short in screen_text(app))
        assert "page 1 · 1 call · newest first" in screen_text(app)
        await pilot.press("asterisk")
        await settle(pilot, lambda: "Marked" in notifications(app))
        assert "Marked 1 call matching" in notifications(app)


# ----------------------------------------------------------------------------- 8. the user's own log


async def test_the_tests_never_write_the_users_own_console_log(db, console_log_dir, monkeypatch):
    """The console's log and crash reports go where LEASECTL_LOG_DIR says; the tests set it
    (tests/conftest.py), so their tracebacks -- provoked on purpose -- stay out of the user's log."""
    from console.operator.tui.app import write_crash_log
    from console.operator.tui.failures import log_path

    users = Path(platformdirs.user_log_dir("leasectl"))  # where the console logs for a person

    def state_of(directory: Path) -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.glob("*")} \
            if directory.is_dir() else {}

    before = state_of(users)
    assert log_path().parent == console_log_dir, f"the console logs to {log_path()} under the tests"
    with db.connect() as conn:
        e = running_search(conn, "w-1")
    break_actions(monkeypatch, "a bug provoked by the tests")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await cancel_dialog(pilot, str(e["id"])[:8])
        await type_text(pilot, "stuck")
        await pilot.press("enter")
        await settle(pilot, lambda: "NOT APPLIED" in screen_text(app))
    crash = write_crash_log(RuntimeError("a crash provoked by the tests"))
    assert crash.parent == console_log_dir
    assert "a bug provoked by the tests" in log_path().read_text(), "the traceback is in the tests' log"
    assert state_of(users) == before, f"the tests wrote into {users}"
