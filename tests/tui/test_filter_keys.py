"""The console's `/` takes every key of the one grammar and shows the calls the database and
`leasectl jobs --where` select for it (tests/db/test_filter_grammar.py holds those equal)."""

from __future__ import annotations

from console.core.filters import parse_filter
from console.db import reads
from tests.db.test_filter_grammar import FILTERS, calls, filters_for  # noqa: F401 - the same calls
from tests.tui.conftest import SIZE, make_app, settle
from tests.tui.test_flows import type_text


async def test_every_key_filters_the_calls_screen(db, calls):  # noqa: F811 - the fixture, imported
    conn, ids = calls
    app = make_app(db.dsn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(pilot)
        for name, text in filters_for(ids).items():
            want = {str(j.id) for j in reads.jobs(conn, parse_filter(text), limit=100)}
            await pilot.press("escape")  # the previous filter cleared
            await pilot.press("slash")
            await type_text(pilot, text)
            await pilot.press("enter")
            await settle(pilot, lambda w=want: shown(app) == w, timeout=10)
            assert shown(app) == want, f"{name}: / {text}"


def shown(app) -> set[str]:
    return set(app.screen.query_one("#calls").row_keys)
