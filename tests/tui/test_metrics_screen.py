"""7 Metrics through the real console (Pilot) on a real database: the groups as a table coloured
by urgency, `b` switching tool / model / provider, the sparklines of the last hour, and `enter` on
a row opening Calls filtered to that group (esc comes back)."""

from __future__ import annotations

from textual.widgets import Sparkline

from console.operator.tui.screens.calls import CallsScreen
from console.operator.tui.screens.metrics import GroupCallsScreen, MetricsScreen
from console.operator.tui.widgets.livetable import LiveTable
from tests.tui.conftest import SIZE, make_app, notifications, screen_text, settle


def _table(app) -> LiveTable:
    return app.screen.query_one("#groups", LiveTable)


async def _open_metrics(pilot) -> None:
    await pilot.press("7")
    await settle(pilot, lambda: isinstance(pilot.app.screen, MetricsScreen) and pilot.app.screen.data is not None)


async def test_the_groups_table_by_tool_with_urgent_values_coloured(scenario_dsn):
    app = make_app(scenario_dsn, pinned=True)
    async with app.run_test(size=SIZE) as pilot:
        await _open_metrics(pilot)
        table = _table(app)
        assert table.row_keys == ["browser_session", "erp_update_order", "payment_capture", "report_export",
                                  "web_search"]
        expired = table.get_cell("erp_update_order", "expired_leases")
        assert expired is not None and expired.text == "1" and expired.style == "bold red"
        unknown = table.get_cell("payment_capture", "outcome_unknown")
        assert unknown is not None and unknown.text == "1" and unknown.style == "bold red"
        unheard = table.get_cell("web_search", "cancel_unheard")
        assert unheard is not None and unheard.text == "1" and unheard.style == "yellow"
        calm = table.get_cell("report_export", "expired_leases")
        assert calm is not None and calm.text == "0" and calm.style == "dim"
        lease = table.get_cell("erp_update_order", "min_lease_left_seconds")
        assert lease is not None and lease.text == "-5.0s" and lease.style == "bold red"
        text = screen_text(app)
        assert "7 Metrics" in text and "by tool: live now" in text and "b: by model" in text


async def test_the_sparklines_show_the_last_hour(scenario_dsn):
    app = make_app(scenario_dsn, pinned=True)
    async with app.run_test(size=SIZE) as pilot:
        await _open_metrics(pilot)
        screen = app.screen
        stale = screen.query_one("#spark-stale_writes_rejected", Sparkline)
        assert len(stale.data or []) == 60 and (stale.data or [])[-1] == 2, "two stale writes in the last minute"
        unknown = screen.query_one("#spark-outcome_unknown", Sparkline)
        assert (unknown.data or [])[-1] == 2 and (unknown.data or [])[0] == 0, "the level rebuilt over the hour"
        assert stale.has_class("-warn") and unknown.has_class("-bad")
        text = screen_text(app)
        assert "2 in 1h" in text and "now 2" in text


async def test_b_switches_tool_model_provider(db):
    from tests.helpers import claim, enqueue, register_tool

    with db.connect() as conn:
        register_tool(conn, "search", "read_only")
        enqueue(conn, "search", model="gpt-5.1", provider="openai")
        enqueue(conn, "search", model="claude", provider="anthropic")
        enqueue(conn, "search")
        for worker in ("w-1", "w-2", "w-3"):  # groups by model are of calls running now (or history)
            claim(conn, worker)
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await _open_metrics(pilot)
        assert _table(app).row_keys == ["search"]
        await pilot.press("b")
        await settle(pilot, lambda: app.screen.data.report.by == "model" and "by model" in screen_text(app))
        assert _table(app).row_keys == ["claude", "gpt-5.1", "\x00none"]
        assert "(none)" in screen_text(app)
        await pilot.press("b")
        await settle(pilot, lambda: app.screen.data.report.by == "provider")
        assert _table(app).row_keys == ["anthropic", "openai", "\x00none"]
        await pilot.press("b")
        await settle(pilot, lambda: app.screen.data.report.by == "tool")
        assert _table(app).row_keys == ["search"]


async def test_enter_opens_calls_filtered_to_the_group_and_esc_comes_back(db):
    from tests.helpers import claim, enqueue, register_tool

    with db.connect() as conn:
        register_tool(conn, "search", "read_only")
        register_tool(conn, "browse", "read_only")
        mine = enqueue(conn, "search", key="k-search", model="gpt-5.1")
        enqueue(conn, "browse", key="k-browse", model="claude")
        claim(conn, "w-1")
        claim(conn, "w-2")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await _open_metrics(pilot)
        table = _table(app)
        table.move_to_key("search")
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, CallsScreen) and "page 1" in screen_text(app))
        screen = app.screen
        assert isinstance(screen, GroupCallsScreen) and screen.where.tool == "search"
        text = screen_text(app)
        assert "filter tool:search" in text and str(mine["id"])[:8] in text and "k-browse" not in text
        assert "7 Metrics \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} tool search" in text
        await pilot.press("escape")
        await settle(pilot, lambda: isinstance(app.screen, MetricsScreen))
        # by model: the row opens the calls of that model
        await pilot.press("b")
        await settle(pilot, lambda: app.screen.data.report.by == "model")
        _table(app).move_to_key("claude")
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, CallsScreen) and "page 1" in screen_text(app))
        assert app.screen.where.model == "claude"
        assert "k-browse" in screen_text(app) and "k-search" not in screen_text(app)


async def test_a_group_without_a_model_says_why_it_cannot_be_opened(db):
    from tests.helpers import claim, enqueue, register_tool

    with db.connect() as conn:
        register_tool(conn, "search", "read_only")
        enqueue(conn, "search")
        claim(conn, "w-1")
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await _open_metrics(pilot)
        await pilot.press("b")
        await settle(pilot, lambda: app.screen.data.report.by == "model")
        _table(app).move_to_key("\x00none")
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, MetricsScreen)
        assert "have no model" in notifications(app)


async def test_80x24_keeps_the_live_troubles_and_the_lease(scenario_dsn):
    app = make_app(scenario_dsn, pinned=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_metrics(pilot)
        text = screen_text(app)
        for words in ("expired", "unknown", "unheard", "lease left", "erp_update_order", "renewal fails/min",
                      "outcome unknown"):
            assert words in text, words


async def test_a_paused_tool_is_named_on_triage_and_metrics(scenario_dsn):
    """Migration 0016: who paused which tool, why, and how many of its calls wait, in one yellow line
    on Triage (1) and Metrics (7); gone once it is resumed."""
    from console.db.connect import connect, run_one

    with connect(scenario_dsn) as conn:
        assert run_one(conn, "operator/pause_tool", tool="web_search", paused_by="alice",
                       reason="vendor 5xx storm") is not None
    app = make_app(scenario_dsn)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, lambda: "PAUSED" in screen_text(app))
        line = screen_text(app)
        assert "web_search paused by alice" in line and "vendor 5xx storm" in line, line
        await _open_metrics(pilot)
        await settle(pilot, lambda: "PAUSED" in screen_text(app))
        with connect(scenario_dsn) as conn:
            assert run_one(conn, "operator/resume_tool", tool="web_search", resumed_by="alice",
                           reason="vendor ok") is not None
        await settle(pilot, lambda: "PAUSED" not in screen_text(app))
