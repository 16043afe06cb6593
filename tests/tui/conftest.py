"""Console tests drive the real app (Textual's Pilot) against a real database."""

from __future__ import annotations

import pytest

from console.db.session import ConsoleSession
from console.demo.scenario import load_fixed_scenario
from console.operator.tui import pictures
from console.operator.tui.app import LeasectlApp
from console.operator.tui.pictures import SIZE, screen_text, settle
from console.shared.config import SessionLimits
from tests.helpers import SLOW, claim, enqueue, outcomes_unknown, register_tool

__all__ = ["SIZE", "break_actions", "cancel_marked", "dialog_ready", "make_app", "notifications",
           "outcomes_unknown", "running_search", "screen_text", "settle"]


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


async def cancel_marked(pilot, count: int) -> None:
    """`*` marks the `count` calls the list's filter matches, `c` opens one Cancel dialog for them."""
    await pilot.press("asterisk")
    await settle(pilot, lambda: f"{count} marked" in screen_text(pilot.app))
    await pilot.press("c")
    await dialog_ready(pilot, f"Cancel {count} marked calls")


def running_search(conn, worker: str = "w-7") -> dict:
    """One running call of the read-only tool `search`, under a lease no test outlives (60 s): it
    stays running until the test acts, and marking it terminal takes force."""
    register_tool(conn, "search", "read_only", **SLOW)
    e = enqueue(conn, "search")
    claim(conn, worker)
    return e


def break_actions(monkeypatch, message: str) -> None:
    """Every action the console sends fails with RuntimeError(message): a bug of ours, provoked."""
    from console.db import actions

    def broken(*args, **kwargs):
        raise RuntimeError(message)

    monkeypatch.setattr(actions, "perform", broken)
