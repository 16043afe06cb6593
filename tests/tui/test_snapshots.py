"""Pictures of every screen and dialog (pytest-textual-snapshot): the same list `leasectl
screenshots` writes for the README, on the fixed scenario with the display clock pinned and a
frozen clock, so they change only when the screens do. Update deliberately with
`pytest tests/tui/test_snapshots.py --snapshot-update`, and look at what changed."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from console.operator.tui.pictures import SHOTS, Shot, make_app, picture_contexts, play

COMPARED = [s for s in SHOTS if s.compared]


@pytest.mark.parametrize("shot", COMPARED, ids=[s.name for s in COMPARED])
def test_picture(snap_compare, scenario_dsn, shot: Shot):
    assert shot.prepare is None, "a prepared shot is compared: give its preparation fixed ids and times"
    app = make_app(scenario_dsn, read_only=shot.read_only, context=shot.context)

    async def run_before(pilot) -> None:
        await play(pilot, shot)

    with picture_contexts(scenario_dsn) if shot.contexts else nullcontext():
        assert snap_compare(app, terminal_size=shot.size, run_before=run_before)
