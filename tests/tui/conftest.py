"""Console tests drive the real app (Textual's Pilot) against a real database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from console.clock import FrozenClock
from console.config import SessionLimits
from console.db.session import ConsoleSession
from console.demo.scenario import ANCHOR, load_fixed_scenario
from console.tui.app import LeasectlApp
from console.tui.screens.base import PollingScreen

SIZE = (140, 45)  # the terminal people use it in


@pytest.fixture
def scenario_dsn(db) -> str:
    with db.connect() as conn:
        load_fixed_scenario(conn)
    return db.dsn


def make_app(dsn: str, *, pinned: bool = False, read_only: bool = False, operator: str = "dana",
             limits: SessionLimits | None = None, listen: bool = False, poll: float = 2.0) -> LeasectlApp:
    """`pinned`: the fixed scenario's instant on a frozen clock, for pictures that never change."""
    session = ConsoleSession(dsn, operator=operator, read_only=read_only, label="demo",
                             clock=ANCHOR.isoformat() if pinned else None,
                             **({"limits": limits} if limits else {}))
    return LeasectlApp(session, clock=FrozenClock() if pinned else None, listen=listen, poll_seconds=poll)


async def settle(pilot, until: Callable[[], bool] | None = None, timeout: float = 10.0) -> None:
    """Wait for the screen's data (and an optional condition), the way a person would."""
    app = pilot.app
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        await pilot.pause(0.05)
        screen = app.screen
        base = next((s for s in reversed(app.screen_stack) if isinstance(s, PollingScreen)), None)
        loaded = base is None or base.loaded_once
        if loaded and (until is None or until()) and not getattr(screen, "busy", False):
            await pilot.pause(0.1)
            return
    raise AssertionError("the console did not settle in time; on screen:\n" + screen_text(app))


def screen_text(app) -> str:
    """Everything on screen as plain text, dialogs over their screens, as a person reads it."""
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True,
                      color_system="truecolor", legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def notifications(app) -> str:
    """The toasts shown so far (they live on a layer the text export does not capture)."""
    return "\n".join(f"{n.title}: {n.message}" for n in app._notifications)
