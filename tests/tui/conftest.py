"""Console tests drive the real app (Textual's Pilot) against a real database."""

from __future__ import annotations

import pytest

from console.db.session import ConsoleSession
from console.demo.scenario import load_fixed_scenario
from console.operator.tui import pictures
from console.operator.tui.app import LeasectlApp
from console.operator.tui.pictures import SIZE, screen_text, settle
from console.shared.config import SessionLimits

__all__ = ["SIZE", "dialog_ready", "make_app", "notifications", "screen_text", "settle"]


@pytest.fixture
def scenario_dsn(db) -> str:
    with db.connect() as conn:
        load_fixed_scenario(conn)
    return db.dsn


def make_app(dsn: str, *, pinned: bool = False, read_only: bool = False, operator: str = "dana",
             limits: SessionLimits | None = None, listen: bool = False, poll: float = 2.0) -> LeasectlApp:
    """`pinned`: the fixed scenario's instant on a frozen clock, for pictures that never change."""
    if pinned:
        return pictures.make_app(dsn, read_only=read_only, operator=operator)
    session = ConsoleSession(dsn, operator=operator, read_only=read_only, label="demo",
                             **({"limits": limits} if limits else {}))
    return LeasectlApp(session, listen=listen, poll_seconds=poll)


def notifications(app) -> str:
    """The toasts shown so far (they live on a layer the text export does not capture)."""
    return "\n".join(f"{n.title}: {n.message}" for n in app._notifications)


async def dialog_ready(pilot, marker: str) -> None:
    """A dialog is on screen and armed: it ignores keys typed before it appeared, so a person (and
    a test) reads it first, then types."""
    from console.operator.tui.screens.action import TYPE_AHEAD_GAP

    await settle(pilot, lambda: marker in screen_text(pilot.app))
    await pilot.pause(TYPE_AHEAD_GAP + 0.1)
