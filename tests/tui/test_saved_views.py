"""Saved views in the console (issue 30): `v` opens the picker of the list's views, `enter` applies
one as typing its filter after `/` would, `s` saves the current filter as a view, and a view that no
longer parses is shown with why, never applied. On a real database, through the real app (Pilot)."""

from __future__ import annotations

from console.core.filters import AGENT_KEYS, parse_fields, parse_filter
from console.db import saved_views as views
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.screens.help import bindings_of
from console.operator.tui.screens.views import ViewsPicker
from tests import helpers as h
from tests.tui.conftest import SIZE, make_app, notifications, screen_text, settle
from tests.tui.test_flows import type_text

TOOLS = {"search": ("read_only", h.SLOW), "pay": ("mutating_unverifiable", h.SLOW)}
ALICE = "lc_views_tui_alice"
LOGINS = {ALICE: "leasectl_operator"}


def calls_of(conn) -> tuple[set[str], set[str]]:
    """Two running calls of search, one queued pay call: (running ids, every id)."""
    running = [h.enqueue(conn, "search") for _ in range(2)]
    for _ in running:
        h.claim(conn, "w-1", ["search"])
    queued = h.enqueue(conn, "pay")
    return {str(c["id"]) for c in running}, {str(c["id"]) for c in (*running, queued)}


def shown(app) -> set[str]:
    return set(app.screen.query_one("#calls").row_keys)


async def open_picker(pilot, marker: str = "Saved views of 2 Calls") -> ViewsPicker:
    await pilot.press("v")
    await settle(pilot, lambda: isinstance(pilot.app.screen, ViewsPicker) and marker in screen_text(pilot.app))
    return pilot.app.screen


def test_v_is_a_declared_binding_of_every_list_with_words_for_help():
    binding = next(b for b in bindings_of(PollingScreen) if b.key == "v")
    assert binding.action == "views" and binding.description and "Saved views" in (binding.tooltip or "")


async def test_v_opens_the_lists_views_and_enter_applies_one_as_slash_would(db, conn, logins):
    running, every = calls_of(conn)
    views.save_view(conn, name="running now", screen="calls", filter_text="state:running", shared=False,
                    operator="dana")
    views.save_view(conn, name="not here", screen="fleet", filter_text="state:draining", shared=False,
                    operator="dana")
    with h.as_login(db, ALICE) as alice:
        views.save_view(alice, name="team pay", screen="calls", filter_text="tool:pay", shared=True, operator="alice")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: shown(app) == every)
        picker = await open_picker(pilot)
        text = screen_text(app)
        assert "● running now  personal" in text and "state:running" in text
        assert f"◆ team pay  shared by alice (login {ALICE})" in text
        assert "not here" not in text, "only this screen's views"
        await pilot.press("enter")  # the first: personal views come first
        await settle(pilot, lambda: not isinstance(app.screen, ViewsPicker) and shown(app) == running)
        assert picker.views[0].name == "running now"
        assert app.screen.where == parse_filter("state:running"), "the same filter / state:running gives"
        assert "filter state:running" in screen_text(app)
        assert "View 'running now' (personal): state:running" in notifications(app)
        # the shared one, by the arrow keys
        await open_picker(pilot)
        await pilot.press("down", "enter")
        await settle(pilot, lambda: not isinstance(app.screen, ViewsPicker) and len(shown(app)) == 1)
        assert app.screen.where == parse_filter("tool:pay")
        # esc leaves the filter as it was
        await open_picker(pilot)
        await pilot.press("escape")
        await settle(pilot, lambda: not isinstance(app.screen, ViewsPicker))
        assert app.screen.where == parse_filter("tool:pay")


async def test_a_fleet_view_filters_the_fleet_by_its_own_grammar(db, conn):
    for agent, parent in (("planner-1", None), ("worker-1", "planner-1"), ("worker-2", "planner-1")):
        h.register_agent(conn, agent, parent, kind=agent.split("-")[0])
    views.save_view(conn, name="workers", screen="fleet", filter_text="kind:worker", shared=True, operator="dana")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await settle(pilot, lambda: "planner-1" in screen_text(app))
        await open_picker(pilot, "Saved views of 4 Fleet")
        assert "◆ workers  shared, yours" in screen_text(app)
        await pilot.press("enter")
        await settle(pilot, lambda: not isinstance(app.screen, ViewsPicker) and "filter kind:worker" in screen_text(app))
        assert app.screen.filter_value == parse_fields("kind:worker", AGENT_KEYS)
        assert [a.id for a in app.screen.shown] == ["worker-1", "worker-2"]


async def test_s_saves_the_current_filter_and_a_taken_name_asks(db, conn):
    calls_of(conn)
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("slash")
        await type_text(pilot, "tool:pay")
        await pilot.press("enter")
        await settle(pilot, lambda: "filter tool:pay" in screen_text(app))
        await open_picker(pilot)
        assert "No saved views of 2 Calls yet" in screen_text(app)
        await pilot.press("s")
        await settle(pilot, lambda: "Save the current filter (tool:pay) as:" in screen_text(app))
        await type_text(pilot, "pay calls")
        await pilot.press("tab", "space")  # shared
        await pilot.press("shift+tab", "enter")
        await settle(pilot, lambda: "SAVED — shared view 'pay calls' of the 2 Calls screen: tool:pay" in screen_text(app))
        await settle(pilot, lambda: "◆ pay calls  shared, yours" in screen_text(app))
        [saved] = views.list_views(conn, "calls")
        assert (saved.name, saved.filter, saved.shared, saved.created_by) == ("pay calls", "tool:pay", True, "dana")

        # the same name again asks; enter again replaces
        await pilot.press("s")
        await type_text(pilot, "pay calls")
        await pilot.press("tab", "space", "shift+tab", "enter")
        await settle(pilot, lambda: "enter again replaces it" in screen_text(app))
        assert views.list_views(conn, "calls")[0].updated_at is None, "asked, not replaced"
        await pilot.press("enter")
        await settle(pilot, lambda: "REPLACED — shared view 'pay calls'" in screen_text(app))
        assert views.list_views(conn, "calls")[0].updated_by == "dana"

        # a bad name is said in place, nothing written
        await pilot.press("s")
        await pilot.press("enter")
        await settle(pilot, lambda: "a view needs a name" in screen_text(app))
        assert len(views.list_views(conn)) == 1


async def test_a_view_that_no_longer_parses_shows_why_and_is_not_applied(db, conn):
    calls_of(conn)
    conn.execute("insert into saved_views (name, screen, filter, created_by) "
                 "values ('renamed key', 'calls', 'owner_id:w-1', 'dana')")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot)
        before = app.screen.where
        await open_picker(pilot)
        text = screen_text(app)
        assert "✗ renamed key" in text and "does not parse, not applied: unknown filter key 'owner_id:'" in text
        await pilot.press("enter")
        await settle(pilot, lambda: "no longer parses, so it is not applied" in screen_text(app))
        assert isinstance(app.screen, ViewsPicker), "the picker stays: nothing was applied"
        await pilot.press("escape")
        await settle(pilot, lambda: not isinstance(app.screen, ViewsPicker))
        assert app.screen.where == before and app.screen.where.empty


async def test_a_read_only_console_opens_views_but_never_saves_one(db, conn):
    running, _ = calls_of(conn)
    views.save_view(conn, name="running", screen="calls", filter_text="state:running", shared=False,
                    operator="dana")
    app = make_app(db.dsn, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("slash")
        await type_text(pilot, "tool:pay")
        await pilot.press("enter")
        await settle(pilot, lambda: "filter tool:pay" in screen_text(app))
        await open_picker(pilot)
        assert "read-only: no saving" in screen_text(app)
        await pilot.press("s")
        await settle(pilot, lambda: "Read-only console (started with --read-only): saved views can be opened, "
                                    "not saved" in screen_text(app))
        assert "Save the current filter" not in screen_text(app)
        await pilot.press("enter")
        await settle(pilot, lambda: not isinstance(app.screen, ViewsPicker) and shown(app) == running)
    assert [v.name for v in views.list_views(conn)] == ["running"]


async def test_v_where_there_is_nothing_to_filter_says_so_and_the_palette_offers_it_where_there_is(db, conn):
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        await settle(pilot)
        assert "Saved views" not in [c.title for c in app.get_system_commands(app.screen)]
        await pilot.press("v")
        await settle(pilot, lambda: "no saved views on this screen" in notifications(app))
        assert not isinstance(app.screen, ViewsPicker)
        await pilot.press("6")
        await settle(pilot)
        [command] = [c for c in app.get_system_commands(app.screen) if c.title == "Saved views"]
        command.callback()
        await settle(pilot, lambda: "Saved views of 6 Audit" in screen_text(app))


async def test_the_picker_reads_off_the_ui_thread_and_says_when_it_cannot(db, conn, monkeypatch):
    def broken(conn, screen=None):
        raise views.PermissionDenied("permission denied for table saved_views", hint=views.NOT_A_CONSOLE_LOGIN)

    monkeypatch.setattr("console.operator.tui.screens.views.list_views", broken)
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot)
        await open_picker(pilot)
        await settle(pilot, lambda: "could not be read: permission denied" in screen_text(app))


async def test_v_typed_into_the_filter_is_text_not_the_picker(db, conn):
    calls_of(conn)
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("slash")
        await type_text(pilot, "provider:vertex")
        await pilot.press("enter")
        await settle(pilot, lambda: "filter provider:vertex" in screen_text(app))
        assert not isinstance(app.screen, ViewsPicker)
        assert app.screen.where == parse_filter("provider:vertex")
