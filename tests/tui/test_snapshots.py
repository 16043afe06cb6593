"""Pictures of every screen and dialog (pytest-textual-snapshot), on the fixed scenario with the
display clock pinned and a frozen clock: they change only when the screens do.
Update deliberately with `pytest tests/tui/test_snapshots.py --snapshot-update` and look at them."""

from __future__ import annotations

from tests.tui.conftest import SIZE, make_app, screen_text, settle


def shot(snap_compare, dsn, *keys: str, until=None, read_only: bool = False) -> bool:
    app = make_app(dsn, pinned=True, read_only=read_only)

    async def run_before(pilot) -> None:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
        if until:
            await settle(pilot, lambda: until in screen_text(app))

    return snap_compare(app, terminal_size=SIZE, run_before=run_before)


def filter_to(short_id: str) -> list[str]:
    return ["2", "slash", *list(f"id:{short_id}"), "enter"]


def test_triage(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, until="outcome unknown")


def test_calls(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, "2", until="page 1")


def test_calls_filtered(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, "2", "slash", *list("state:running"), "enter", until="filter state:running")


def test_approvals(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, "3", until="may already have happened")


def test_detail_of_a_zombie(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, *filter_to("b5c7e033"), "enter", until="receiver_rejected")


def test_detail_payload_revealed(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, *filter_to("71d2e8c0"), "enter", "p", until="inv-7")


def test_cancel_dialog(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, *filter_to("8f1b7c3d"), "c", until="What will change")


def test_mark_terminal_dialog_on_a_live_lease(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, *filter_to("8f1b7c3d"), "t", until="force: fence")


def test_approve_dialog_unverifiable(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, "3", "a", until="first 8 characters")


def test_help(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, "question_mark", until="Keys")


def test_read_only_header(snap_compare, scenario_dsn):
    assert shot(snap_compare, scenario_dsn, until="READ-ONLY", read_only=True)
