"""NOTIFY wakes the screens early: a burst costs a bounded number of fetches, and no change waits
longer than WAKE_EVERY after the previous wake (it used to wait WAKE_EVERY after itself, again for
each change of a steady stream, so back-to-back changes reached the screen ~250 ms late)."""

from __future__ import annotations

import asyncio
import time

from console.operator.tui.app import WAKE_EVERY
from console.operator.tui.messages import DbChanged
from console.operator.tui.screens.base import PollingScreen
from tests.tui.conftest import make_app


def record_wakes(app) -> list[float]:
    """When the current screen is woken, from now on (it still fetches as it would)."""
    screen = app.screen
    assert isinstance(screen, PollingScreen)
    wakes: list[float] = []
    original = screen.wake

    def counted() -> None:
        wakes.append(time.monotonic())
        original()

    screen.wake = counted  # type: ignore[method-assign]
    return wakes


async def test_a_burst_of_changes_wakes_the_screens_a_bounded_number_of_times(db):
    app = make_app(db.dsn, poll=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        wakes = record_wakes(app)
        start = time.monotonic()
        for _ in range(40):  # 40 changes over ~0.4 s
            app.post_message(DbChanged({}))
            await asyncio.sleep(0.01)
        await asyncio.sleep(WAKE_EVERY * 2)
        span = time.monotonic() - start
        assert 1 <= len(wakes) <= span / WAKE_EVERY + 1, wakes
        # the last change of the burst was heard: a wake came after it
        assert wakes[-1] >= start + 0.39


async def test_a_change_soon_after_a_wake_waits_only_for_the_rest_of_the_interval(db):
    app = make_app(db.dsn, poll=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        wakes = record_wakes(app)
        app.post_message(DbChanged({}))
        await asyncio.sleep(0.02)
        assert len(wakes) == 1  # the first change wakes at once
        first = wakes[0]
        await asyncio.sleep(WAKE_EVERY * 0.75)
        sent = time.monotonic()
        app.post_message(DbChanged({}))
        await asyncio.sleep(WAKE_EVERY)
        assert len(wakes) == 2
        # due at the first wake + WAKE_EVERY, not WAKE_EVERY after the change itself (that would be
        # at first + 0.17 + WAKE_EVERY = 0.37 s): 0.12 s left for a loaded machine's timers, which
        # a run of the whole suite on 2 cores took (0.31 s)
        assert wakes[1] - first < WAKE_EVERY + 0.12, (wakes[1] - first)
        assert wakes[1] - sent < WAKE_EVERY * 0.5 + 0.06, (wakes[1] - sent)
