"""Contexts in the console (Pilot, real databases): the header names the context, always, and a
production one stands out in its colour; ctrl+o lists the contexts with whether each answers and
switches the whole console to the one chosen -- its data, its operator, its read-only state --
leaving nothing of the other database on screen; a console opened without a context can go back
where it started."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.text import Text

from console.db.session import ConsoleSession
from console.operator.tui.app import LeasectlApp
from console.operator.tui.screens.contexts import ContextPicker
from console.operator.tui.widgets.status import StatusBar
from console.shared.contexts import Overrides, resolve_context, settle
from tests.conftest import Database, _test_database
from tests.helpers import SLOW, claim, enqueue, register_tool
from tests.tui.conftest import SIZE, make_app, notifications, screen_text
from tests.tui.conftest import settle as settle_screen

CLOSED = "postgresql://leasectl:hunter22@127.0.0.1:1/leasectl"  # nothing listens on port 1


@pytest.fixture
def config_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("LEASECTL_CONTEXT", raising=False)
    monkeypatch.delenv("LEASECTL_OPERATOR", raising=False)
    return tmp_path


@pytest.fixture
def second_db(pg_server, template_db) -> Iterator[Database]:
    with _test_database(pg_server, "leasectl_test", template_db) as database:
        yield database


def write(home: Path, text: str) -> None:
    path = home / "leasectl" / "contexts.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def running(db: Database, tool: str) -> str:
    """One running call of `tool` in `db`: its short id."""
    with db.connect() as conn:
        register_tool(conn, tool, "read_only", **SLOW)
        call = enqueue(conn, tool)
        assert claim(conn, "w-1", [tool]) is not None
    return str(call["id"])[:8]


def app_in(name: str, **command_line: object) -> LeasectlApp:
    """The console as `leasectl --context NAME` opens it (console.operator.cli: the same settle)."""
    context = resolve_context(name)
    overrides = Overrides(**command_line)  # type: ignore[arg-type]
    settled = settle(context, overrides)
    session = ConsoleSession(settled.dsn, operator=settled.operator, read_only_because=settled.read_only_reason,
                             context=context, overrides=overrides)
    return LeasectlApp(session, listen=False)


def header(app) -> str:
    return screen_text(app).splitlines()[0].strip()


def context_style(app, name: str) -> str:
    """The style the header draws the context's name in."""
    content = app.screen.query_one(StatusBar).content
    assert isinstance(content, Text)
    return next(str(span.style) for span in content.spans if name in content.plain[span.start:span.end])


async def open_picker(pilot) -> None:
    await pilot.press("ctrl+o")
    await settle_screen(pilot, lambda: isinstance(pilot.app.screen, ContextPicker)
                        and "asking…" not in screen_text(pilot.app), timeout=10)


async def test_header_names_the_context_and_ctrl_o_switches_everything(db, second_db, config_home):
    alpha = running(db, "alpha-search")
    beta = running(second_db, "beta-report")
    write(config_home, f"""
[contexts.staging]
dsn = "{db.dsn}"
operator = "sam"

[contexts.prod-eu]
dsn = "{second_db.dsn}"
production = true
colour = "magenta"
operator = "oncall-dana"
read_only = true

[contexts.gone]
dsn = "{CLOSED}"
""")
    app = app_in("staging")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle_screen(pilot, lambda: alpha in screen_text(app))
        top = header(app)
        assert top.startswith("staging 2 Calls"), top
        assert "sam@" in top and "read-write" in top
        assert context_style(app, "staging") == "bold", "staging is no production context: no colour"

        await open_picker(pilot)
        listed = screen_text(app)
        assert "▶ staging" in listed, "the current context is marked"
        assert "prod-eu" in listed and "production" in listed and "as oncall-dana" in listed
        assert "✕ DOWN: Connection refused" in listed, "the closed port says so, and why"
        assert listed.count("● answers") == 2
        assert "hunter22" not in listed

        await pilot.press("down", "enter")  # staging is highlighted (current): prod-eu is next
        await settle_screen(pilot, lambda: beta in screen_text(app) and "prod-eu" in header(app), timeout=15)
        top = header(app)
        assert top.startswith("prod-eu  2 Calls"), f"the mode stays, the context changes: {top}"
        assert "oncall-dana@" in top, "the context's operator"
        assert "READ-ONLY" in top, "the context's read_only"
        assert app.session.read_only_reason == "context prod-eu is read_only"
        assert context_style(app, "prod-eu") == "bold white on magenta", "production, in its colour"
        assert alpha not in screen_text(app), "nothing of the other database stays on screen"
        assert "Now on context prod-eu, as oncall-dana" in notifications(app)

        await pilot.press("1")  # every screen was made anew on the new database, not only the one shown
        await settle_screen(pilot, lambda: "1 Triage" in header(app))
        assert header(app).startswith("prod-eu  1 Triage")


async def test_the_old_session_is_retired_and_reads_nothing_more(db, second_db, config_home):
    write(config_home, f'[contexts.a]\ndsn = "{db.dsn}"\n[contexts.b]\ndsn = "{second_db.dsn}"\n')
    app = app_in("a")
    async with app.run_test(size=SIZE) as pilot:
        await settle_screen(pilot)
        old = app.session
        await open_picker(pilot)
        await pilot.press("down", "enter")
        await settle_screen(pilot, lambda: header(app).startswith("b 1 Triage"), timeout=15)
        assert app.session is not old and app.session.context is not None and app.session.context.name == "b"
        await settle_screen(pilot, lambda: old.retired)
        with pytest.raises(Exception, match="another context was chosen"):
            old.read(lambda conn: conn.execute("select 1").fetchone())


async def test_without_a_context_the_header_says_so_and_the_way_back_is_offered(db, second_db, config_home,
                                                                                 monkeypatch):
    beta = running(second_db, "beta-report")
    alpha = running(db, "alpha-search")
    write(config_home, f'[contexts.other]\ndsn = "{second_db.dsn}"\noperator = "olga"\n')
    monkeypatch.setenv("LEASECTL_OPERATOR", "dana")
    # `leasectl --dsn DB`: no context, no --operator (the environment's name)
    session = ConsoleSession(db.dsn, operator="dana", overrides=Overrides(dsn=db.dsn))
    app = LeasectlApp(session, listen=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle_screen(pilot, lambda: alpha in screen_text(app))
        assert header(app).startswith("no context: local/leasectl_test_"), header(app)
        await open_picker(pilot)
        assert "▶ no context" in screen_text(app)
        await pilot.press("down", "enter")
        await settle_screen(pilot, lambda: beta in screen_text(app), timeout=15)
        assert header(app).startswith("other 2 Calls") and "olga@" in header(app)
        await open_picker(pilot)
        await pilot.press("up", "enter")  # back to where it started: the --dsn, its operator
        await settle_screen(pilot, lambda: alpha in screen_text(app) and "no context" in header(app), timeout=15)
        assert "dana@" in header(app) and beta not in screen_text(app)


async def test_ctrl_o_with_no_contexts_file_says_where_they_go(db, config_home):
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await settle_screen(pilot)
        await pilot.press("ctrl+o")
        await settle_screen(pilot, lambda: "no contexts" in notifications(app))
        assert not isinstance(app.screen, ContextPicker)
        assert str(config_home / "leasectl" / "contexts.toml") in notifications(app)


async def test_a_console_in_a_browser_offers_no_context_and_names_no_server_path(db, config_home):
    """`leasectl serve`'s tabs (console/operator/web/console_process.py) are their database's only:
    ctrl+o and screen 9 say so, and never where a contexts file would be on the server's disk."""
    from console.db.session import ConsoleSession
    from console.operator.present.contexts import ONE_DATABASE_IN_A_BROWSER
    from console.operator.tui.app import LeasectlApp

    write(config_home, f'[contexts.other]\ndsn = "{db.dsn}"\n')  # on the server: never offered
    session = ConsoleSession(db.dsn, operator="dana", label="demo", known_contexts=dict,
                             contexts_withheld=ONE_DATABASE_IN_A_BROWSER)
    app = LeasectlApp(session, poll_seconds=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await settle_screen(pilot)
        await pilot.press("ctrl+o")
        await settle_screen(pilot, lambda: "for this database only" in notifications(app))
        assert not isinstance(app.screen, ContextPicker)
        await pilot.press("9")
        await settle_screen(pilot, lambda: "for this database only" in screen_text(app))
        shown = notifications(app) + screen_text(app)
        assert "contexts.toml" not in shown and str(config_home) not in shown


async def test_esc_stays_and_the_same_context_changes_nothing(db, config_home):
    write(config_home, f'[contexts.only]\ndsn = "{db.dsn}"\n')
    app = app_in("only")
    async with app.run_test(size=SIZE) as pilot:
        await settle_screen(pilot)
        session = app.session
        await open_picker(pilot)
        await pilot.press("escape")
        await settle_screen(pilot, lambda: not isinstance(app.screen, ContextPicker))
        await open_picker(pilot)
        await pilot.press("enter")
        await settle_screen(pilot, lambda: "already there" in notifications(app))
        assert app.session is session, "choosing the current context reconnects nothing"
