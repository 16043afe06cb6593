"""A bug in the console ends it with one readable line and a log file, never a traceback with
local variables (which could show a DSN's password or a payload) on the screen."""

from __future__ import annotations

import pytest

from console.operator.tui.screens.triage import TriageScreen
from tests.tui.conftest import SIZE, make_app


async def test_a_crash_prints_one_line_and_writes_a_log(db, monkeypatch, tmp_path, capfd):
    monkeypatch.setenv("LEASECTL_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.delenv("LEASECTL_DEBUG", raising=False)

    def broken(self, data):
        raise RuntimeError("secret-dsn-password-should-not-show")

    monkeypatch.setattr(TriageScreen, "show", broken)
    app = make_app(db.dsn)
    with pytest.raises(RuntimeError):  # run_test hands the app's error back to the test
        async with app.run_test(size=SIZE) as pilot:
            # until the first data meets the bug, however long a loaded machine takes to fetch it
            # (a fixed 1.5 s may not be enough), 20 s at most
            for _ in range(200):
                if app._exception is not None:
                    break
                await pilot.pause(0.1)
    printed = capfd.readouterr()
    shown = printed.out + printed.err
    assert "internal error (RuntimeError)" in shown
    assert "secret-dsn" not in shown and "Traceback" not in shown
    logs = list((tmp_path / "logs").glob("crash-*.log"))
    assert logs and "secret-dsn-password-should-not-show" in logs[0].read_text()


async def test_a_tick_during_teardown_is_not_a_crash(db):
    """Quitting removes a screen's widgets before the screen leaves the stack; the once-a-second
    tick can land in between (it did, in CI: NoMatches on 'CallTable' at exit)."""
    from console.operator.tui.pictures import settle
    from console.operator.tui.widgets.calltable import CallTable

    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TriageScreen) and screen.loaded_once
        await screen.query_one(CallTable).remove()  # what teardown does first
        screen._tick()  # the screen's own one-second timer
        assert app.screen is screen
