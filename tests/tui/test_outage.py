"""The console during an outage, with the database really cut off from it (a TCP proxy in front of
the test server): an action's answer says the database is unreachable and that nothing was
applied -- never "internal error" -- and the banner dates the outage from its first sign, not from
the moment a request finally gave up."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

from tests.helpers import events, job
from tests.netproxy import DbProxy
from tests.tui.conftest import SIZE, make_app, running_search, screen_text, settle
from tests.tui.test_flows import cancel_dialog, type_text


class SilentProxy(DbProxy):
    """Goes silent instead of refusing, as a network partition does: from `silence()` on, no byte
    passes either way and new connections are accepted and left hanging; `hold` seconds later each
    connection is dropped, as the TCP stack would drop it in the end. What the console learns of the
    outage, it learns late."""

    _poll_seconds = 0.05  # a pump sees the silence begin within this

    def __init__(self, dsn: str) -> None:
        self.silent_since: float | None = None  # before DbProxy's threads start
        self.hold = 0.0
        super().__init__(dsn)

    def silence(self, hold: float) -> None:
        self.hold = hold
        self.silent_since = time.monotonic()

    def _left(self) -> float | None:
        if self.silent_since is None:
            return None
        return self.silent_since + self.hold - time.monotonic()

    def _drop_later(self, *sockets: socket.socket) -> None:
        while (left := self._left()) is not None and left > 0:
            time.sleep(min(left, 0.05))
        for s in sockets:
            with contextlib.suppress(OSError):
                s.close()

    def _turned_away(self, client: socket.socket) -> bool:
        if self.silent_since is None:
            return super()._turned_away(client)
        threading.Thread(target=self._drop_later, args=(client,), daemon=True).start()
        return True

    def _stalled(self, a: socket.socket, b: socket.socket) -> bool:
        if self.silent_since is None:
            return False
        self._drop_later(a, b)
        return True


def running_call(db) -> str:
    with db.connect() as conn:
        return str(running_search(conn)["id"])


async def answer_during_outage(db, *, connected: bool) -> None:
    call = running_call(db)
    proxy = DbProxy(db.dsn)
    app = make_app(proxy.dsn, poll=0.5)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await cancel_dialog(pilot, call[:8])
            if connected:  # an action was sent before: its connection is open, and then lost
                await asyncio.to_thread(app.session.act, lambda conn: conn.execute("select 1"))
            proxy.cut()
            await type_text(pilot, "stuck")
            await pilot.press("enter")
            await settle(pilot, lambda: "NOT APPLIED" in screen_text(app), timeout=20)
            said = " ".join(screen_text(app).split())
            assert "the database is unreachable" in said and "Nothing was applied" in said, said
            assert "internal error" not in said and "check --dsn" not in said, said
            await settle(pilot, lambda: "DATABASE UNREACHABLE" in screen_text(app), timeout=10)
    finally:
        proxy.close()
    with db.connect() as conn:
        assert job(conn, call)["state"] == "running", "nothing was applied"
        assert not [e for e in events(conn, call) if e["kind"].startswith("operator_")]


async def test_an_action_whose_connection_is_lost_says_the_database_is_unreachable(db):
    await answer_during_outage(db, connected=True)


async def test_an_action_that_cannot_connect_says_the_database_is_unreachable(db):
    await answer_during_outage(db, connected=False)


async def test_the_banner_dates_the_outage_from_the_request_that_failed_not_from_its_timeout(db):
    """The poll sent just after the database went silent hears nothing for HOLD seconds, then loses
    its connection: the outage began before that request was sent, not when it gave up."""
    hold = 6.0
    running_call(db)
    proxy = SilentProxy(db.dsn)
    app = make_app(proxy.dsn, poll=0.5)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("2")
            await settle(pilot, lambda: "page 1 · " in screen_text(app))
            await settle(pilot, lambda: app.freshness.db_now is not None)
            with db.connect() as conn:  # the database's clock as the outage begins (the same server)
                went_silent = conn.execute("select now() as t").fetchone()["t"]
            proxy.silence(hold)
            await settle(pilot, lambda: "DATABASE UNREACHABLE" in screen_text(app), timeout=hold + 15)
            since = app.freshness.trouble_since
            assert since is not None
            late = (since - went_silent).total_seconds()
            assert -1.0 <= late <= 1.5, f"the banner's since is {late:+.1f}s from the moment the database went silent"
            shown = since.strftime("%H:%M:%S")
            assert f"since {shown}" in screen_text(app)
    finally:
        proxy.close()


def test_the_trouble_dates_from_its_first_sign_after_the_last_good_data():
    """The rule itself, on the console's clock (seconds): the outage began at the earliest of the
    failed request's sending and the listener's loss -- but never before the last data that came."""
    from datetime import UTC, datetime

    from console.operator.tui.state import Freshness
    from console.shared.errors import DatabaseUnavailable, LeasectlError

    t0 = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)
    good = Freshness().arrived(t0, 100.0)  # data from the database's 02:13:00, at our 100.0
    lost = DatabaseUnavailable("database connection lost")

    def began(f: Freshness) -> float:
        assert f.trouble_since is not None
        return (f.trouble_since - t0).total_seconds()

    assert began(good.failed(lost, 124.0)) == 24.0, "no sign but the report itself"
    assert began(good.failed(lost, 124.0, since=102.0)) == 2.0, "the request that failed was sent at 102"
    listener_gone = good.with_listener(True, 100.5).with_listener(False, 101.0).with_listener(False, 103.0)
    assert began(listener_gone.failed(lost, 124.0, since=102.0)) == 1.0, "the listener's first loss came first"
    assert began(Freshness().with_listener(False, 90.0).arrived(t0, 100.0).failed(lost, 124.0, since=102.0)) == 2.0, \
        "a loss before the last good data is not this outage"
    later = good.failed(lost, 124.0, since=102.0).failed(lost, 140.0, since=130.0)
    assert began(later) == 2.0, "later failures keep the first date"
    assert began(good.failed(LeasectlError("a bug"), 124.0, since=102.0)) == 2.0


async def test_an_action_whose_commit_is_cut_says_its_outcome_is_unknown(db):
    """The one moment whose outcome the console cannot know: the connection dies while the server
    commits. The dialog must not say "nothing was applied" -- the server may have committed."""
    call = running_call(db)
    with db.connect() as admin:
        admin.execute("create function test_slow_commit() returns trigger language plpgsql as "
                      "$$ begin perform pg_sleep(30); return null; end $$")
        admin.execute("create constraint trigger test_slow_commit after update on tool_jobs "
                      "deferrable initially deferred for each row execute function test_slow_commit()")
        app = make_app(db.dsn, poll=0.5)
        async with app.run_test(size=SIZE) as pilot:
            await cancel_dialog(pilot, call[:8])
            await type_text(pilot, "cut while committing")
            await pilot.press("enter")

            sleeping: list[int] = []

            def committing() -> bool:
                row = admin.execute("select pid from pg_stat_activity where datname = current_database() "
                                    "and query = 'COMMIT' and wait_event = 'PgSleep'").fetchone()
                sleeping[:] = [row["pid"]] if row else []
                return bool(sleeping)

            for _ in range(300):  # the dialog is busy meanwhile: settle() would wait for it
                if committing():
                    break
                await pilot.pause(0.05)
            assert sleeping, "the action waits in its COMMIT"
            admin.execute("select pg_terminate_backend(%s, 10000)", (sleeping[0],))
            await settle(pilot, lambda: "OUTCOME UNKNOWN" in screen_text(app), timeout=20)
            said = " ".join(screen_text(app).split())
            assert "will not be sent again" in said and "Nothing was applied" not in said, said
        admin.execute("drop trigger test_slow_commit on tool_jobs")
