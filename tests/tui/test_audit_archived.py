"""6 Audit once months of history were archived (issue 29), through the real console (Pilot): a line
says where the online history begins and what the archive holds; a filter reaching before it shows
nothing and says ARCHIVED; who held a call whose history begins in the archive is answered
"archived", never from the rest of its history; the rows with no start are said to be the online
part only, and `]` past the oldest online page says the rest is archived. At 80x24 too."""

from __future__ import annotations

from datetime import timedelta

from console.operator.present.words import when
from tests.db.test_audit_archived import archived_history, at_midnight
from tests.tui.conftest import make_app, notifications, screen_text, settle
from tests.tui.test_audit_screen import open_audit, table


async def test_the_banner_says_where_the_online_history_begins_and_no_partial_answer_is_shown_whole(db, tmp_path):
    with db.connect() as conn:
        hist = archived_history(conn, tmp_path / "archive")
    begins = when(hist.boundary)
    app = make_app(db.dsn)
    async with app.run_test(size=(140, 45)) as pilot:
        await open_audit(pilot)
        await settle(pilot, lambda: "online part only" in screen_text(app))
        text = screen_text(app)
        assert begins in text and "archived (" in text, text
        assert "online part only" in text
        assert len(table(app).row_keys) > 0
        await pilot.press("right_square_bracket")
        await settle(pilot, lambda: "oldest online page" in notifications(app))
        assert begins in notifications(app)
        await pilot.press("e")  # the export of no filter says where it starts
        await settle(pilot, lambda: "Export the history" in screen_text(app))
        assert "The online history begins at" in screen_text(app)
        await pilot.press("escape")

        # a range that reaches into the archived month: nothing shown, ARCHIVED said
        inside = at_midnight(hist.month) + timedelta(days=5)
        await open_audit(pilot, f"since:{inside.isoformat()}")
        await settle(pilot, lambda: "ARCHIVED" in screen_text(app))
        assert table(app).row_keys == [], "no partial page"
        assert "nothing is shown" in screen_text(app) and "online history begins" in screen_text(app)

        # who held a call whose history begins in the archive: archived, not an answer from the rest
        straddling = str(hist.calls[4])[:8]
        later = hist.boundary + timedelta(seconds=10)
        await open_audit(pilot, f"job:{straddling} at:{later.isoformat()}")
        await settle(pilot, lambda: "who held it then" in screen_text(app))
        text = screen_text(app)
        assert "ARCHIVED" in text and "held by" not in text and "nobody held" not in text, text
        assert "online part only" in text, "its online events, said to be a part"

        # a call whose history is whole online answers as ever
        whole = str(hist.calls[8])[:8]
        claimed = hist.t0(9) + timedelta(seconds=5)
        await open_audit(pilot, f"job:{whole} at:{claimed.isoformat()}")
        await settle(pilot, lambda: "held by" in screen_text(app))
        text = screen_text(app)
        assert "ARCHIVED" not in text and "online part only" not in text and "online history from" in text


async def test_the_banner_keeps_its_words_at_80x24(db, tmp_path):
    with db.connect() as conn:
        hist = archived_history(conn, tmp_path / "archive")
    app = make_app(db.dsn)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_audit(pilot, f"since:{(at_midnight(hist.month) + timedelta(days=5)).isoformat()}")
        await settle(pilot, lambda: "ARCHIVED" in screen_text(app))
        assert "the filter reaches before" in screen_text(app)


async def test_calls_and_triage_in_the_past_say_archived_instead_of_failing_or_showing_a_part(db, tmp_path):
    """at: on Calls (2) and Triage (1) before the online history begins: ARCHIVED on the filter
    line, no rows, no failed refresh; after it: the past shown, and what it leaves out said."""
    with db.connect() as conn:
        hist = archived_history(conn, tmp_path / "archive")
    inside = at_midnight(hist.month) + timedelta(days=5)
    app = make_app(db.dsn)
    async with app.run_test(size=(140, 45)) as pilot:
        for screen in ("2", "1"):
            await pilot.press(screen)
            await settle(pilot)
            await pilot.press("slash", *f"at:{inside.isoformat()}", "enter")
            await settle(pilot, lambda: "ARCHIVED" in screen_text(app))
            text = screen_text(app)
            assert "THE PAST" in text and "refresh failed" not in text.lower(), text
            assert not [line for line in text.splitlines() if str(hist.calls[0])[:8] in line], "no partial past"
            await pilot.press("escape")
            await settle(pilot, lambda: "ARCHIVED" not in screen_text(app))
        # after the boundary, once every call of before had finished: shown, and what is left out said
        later = hist.boundary + timedelta(days=1)
        await pilot.press("2")
        await pilot.press("slash", *f"at:{later.isoformat()}", "enter")
        await settle(pilot, lambda: "are not listed" in notifications(app))
        assert "ARCHIVED" not in screen_text(app)
