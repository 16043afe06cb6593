"""9 All contexts through the real console (Pilot): two test databases up, each with calls waiting
for a human, and a context down (a closed port). The PARTIAL banner names the one down, the rows
of both up contexts are listed with their context, the all-clear appears only once every context
answers, and `enter` opens a call of this console's context or says where another context's is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.screens.everywhere import AllContextsScreen
from console.operator.tui.widgets.livetable import LiveTable
from tests.conftest import Database, _test_database
from tests.helpers import outcomes_unknown
from tests.tui.conftest import SIZE, make_app, notifications, screen_text, settle

CLOSED = "postgresql://leasectl@127.0.0.1:1/leasectl"  # nothing listens on port 1


def write_contexts(home: Path, contexts: dict[str, str]) -> None:
    path = home / "leasectl" / "contexts.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"[contexts.{name}]\ndsn = {json.dumps(dsn)}\n" for name, dsn in contexts.items()))


@pytest.fixture
def config_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("LEASECTL_CONTEXT", raising=False)
    return tmp_path


@pytest.fixture
def second_db(pg_server, template_db) -> Iterator[Database]:
    with _test_database(pg_server, "leasectl_test", template_db) as database:
        yield database


def tables(app) -> tuple[LiveTable, LiveTable]:
    return app.screen.query_one("#everywhere-contexts", LiveTable), app.screen.query_one("#everywhere-calls", LiveTable)


async def open_all_contexts(pilot, until: str) -> None:
    await pilot.press("9")
    await settle(pilot, lambda: isinstance(pilot.app.screen, AllContextsScreen) and until in screen_text(pilot.app),
                 timeout=15)


async def test_the_partial_banner_and_the_rows_of_both_up_contexts(db, second_db, config_home):
    with db.connect() as conn:
        alpha = outcomes_unknown(conn, 1, tool="pay")
    with second_db.connect() as conn:
        beta = outcomes_unknown(conn, 2, tool="charge")
    write_contexts(config_home, {"alpha": db.dsn, "beta": second_db.dsn, "gamma": CLOSED})
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_all_contexts(pilot, "PARTIAL")
        text = screen_text(app)
        assert "PARTIAL: 1 of 3 contexts did not answer (gamma)" in text
        assert "gamma is DOWN: cannot connect to the database" in text
        assert "9 All contexts" in text, "the header names the screen"
        assert "Nothing needs" not in text
        contexts, calls = tables(app)
        assert contexts.row_keys == ["alpha", "beta", "gamma"]
        assert [contexts.get_cell(k, "state").text for k in contexts.row_keys] == ["up", "up", "DOWN"]
        assert contexts.get_cell("beta", "needs_human").text == "2"
        assert contexts.get_cell("gamma", "needs_human").text == "?", "a down context's count is unknown, not 0"
        assert calls.row_keys == [f"alpha/{alpha[0]['id']}", *(f"beta/{b['id']}" for b in beta)]
        for key in calls.row_keys:
            context, call = key.split("/")
            assert calls.get_cell(key, "context").text == context
            assert calls.get_cell(key, "health").text == "outcome unknown"
            assert call[:8] in text
        assert "3 calls need attention in 2 contexts; 1 of 3 contexts did not answer: there may be more." in text


async def test_enter_opens_a_call_here_and_names_one_elsewhere(db, second_db, config_home):
    with db.connect() as conn:
        alpha = outcomes_unknown(conn, 1, tool="pay")
    with second_db.connect() as conn:
        beta = outcomes_unknown(conn, 1, tool="charge")
    write_contexts(config_home, {"alpha": db.dsn, "beta": second_db.dsn})
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_all_contexts(pilot, "2 calls need attention")
        assert f"context alpha  call {alpha[0]['id']}  enter opens it" in screen_text(app)
        await pilot.press("enter")  # alpha is the database this console is connected to
        await settle(pilot, lambda: isinstance(app.screen, DetailScreen))
        assert app.screen.job_id == alpha[0]["id"]
        await pilot.press("escape")
        await settle(pilot, lambda: isinstance(app.screen, AllContextsScreen))
        await pilot.press("down")
        await settle(pilot, lambda: f"context beta  call {beta[0]['id']}" in screen_text(app))
        assert f"leasectl --context beta show {str(beta[0]['id'])[:8]}" in screen_text(app)
        await pilot.press("enter")
        await settle(pilot, lambda: "In context beta" in notifications(app))
        assert isinstance(app.screen, AllContextsScreen), "another context's call is named, not opened here"
        assert str(beta[0]["id"]) in notifications(app)


async def test_the_all_clear_only_while_every_context_answers(db, second_db, config_home):
    write_contexts(config_home, {"alpha": db.dsn, "beta": second_db.dsn})
    app = make_app(db.dsn, poll=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await open_all_contexts(pilot, "Nothing needs a human in any of the 2 contexts")
        assert "PARTIAL" not in screen_text(app)
        write_contexts(config_home, {"alpha": db.dsn, "beta": second_db.dsn, "gamma": CLOSED})
        await settle(pilot, lambda: "PARTIAL: 1 of 3 contexts did not answer (gamma)" in screen_text(app), timeout=15)
        text = screen_text(app)
        assert "Nothing needs a human" not in text
        assert "Nothing needs attention in the 2 of 3 contexts that answered, but 1 did not: this is NOT an all-clear." in text


async def test_no_contexts_file_is_said(db, config_home):
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await open_all_contexts(pilot, "no contexts to ask")
        assert "does not exist" in screen_text(app)
        assert "PARTIAL" not in screen_text(app) and "Nothing needs" not in screen_text(app)
