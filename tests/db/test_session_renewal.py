"""The console's session when its connections die under it: a server restart, an
administrator's pg_terminate_backend, a network cut. A dead connection is a lost connection
(DatabaseUnavailable, never a raw driver error), is dropped, and is made again on the next use; an
action whose connection died before the action was sent goes out once on a fresh connection, and
one whose connection died while it was committing is reported as of unknown outcome, never sent
twice."""

from __future__ import annotations

import threading
import uuid

import pytest

from console.core.models import Applied
from console.db import actions, reads
from console.db.session import ConsoleSession
from console.shared.errors import DatabaseUnavailable, OutcomeUnknown
from tests.helpers import enqueue, events, job, register_tool, wait_until
from tests.netproxy import DbProxy


def cancel_queued(session: ConsoleSession, job_id: uuid.UUID) -> object:
    return session.act(lambda conn: actions.cancel(conn, job_id, seen_state="queued", seen_token=0,
                                                   operator="alice", reason="the server restarted"))


@pytest.fixture
def calls(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only")
        yield conn, [enqueue(conn, "search", f"renew-{i}")["id"] for i in range(4)]


def test_the_first_action_after_a_server_restart_is_applied(db, calls):
    if not db.server.can_restart:
        pytest.skip("set LEASECTL_TEST_RESTART_CMD to restart this server from the tests")
    conn, ids = calls
    conn.close()
    session = ConsoleSession(db.dsn, operator="alice")
    try:
        session.open()
        assert isinstance(cancel_queued(session, ids[0]), Applied)  # the action connection is open
        db.server.restart()  # immediate mode: every backend gets 57P01 (AdminShutdown)
        after = cancel_queued(session, ids[1])
        assert isinstance(after, Applied), after
        assert session.read(lambda c: reads.job(c, ids[1])).state == "cancelled"  # reads renewed too
    finally:
        session.close()


def test_connections_terminated_by_an_administrator_are_renewed(db, calls):
    conn, ids = calls
    session = ConsoleSession(db.dsn, operator="alice")
    try:
        session.open()
        assert isinstance(cancel_queued(session, ids[0]), Applied)
        pids = [session.act(lambda c: c.info.backend_pid), session.read(lambda c: c.info.backend_pid)]
        for pid in pids:
            conn.execute("select pg_terminate_backend(%s, 10000)", (pid,))
        assert session.read(lambda c: reads.job(c, ids[0])).state == "cancelled"
        assert isinstance(cancel_queued(session, ids[1]), Applied)
        assert job(conn, ids[1])["state"] == "cancelled"
        assert [e["kind"] for e in events(conn, ids[1])].count("operator_cancel") == 1, "sent once"
    finally:
        session.close()


def test_during_an_outage_an_action_says_unreachable_then_works_once_the_database_is_back(db, calls):
    conn, ids = calls
    proxy = DbProxy(db.dsn)
    session = ConsoleSession(proxy.dsn, operator="alice")
    try:
        session.open()
        assert isinstance(cancel_queued(session, ids[0]), Applied)
        proxy.cut()
        for _ in range(2):  # the connection that died, then no connection at all
            with pytest.raises(DatabaseUnavailable) as lost:
                cancel_queued(session, ids[1])
            assert not isinstance(lost.value, OutcomeUnknown), "nothing was sent: the outcome is known"
        with pytest.raises(DatabaseUnavailable):
            session.read(lambda c: reads.job(c, ids[1]))
        assert job(conn, ids[1])["state"] == "queued"
        assert not [e for e in events(conn, ids[1]) if e["kind"].startswith("operator_")], "nothing journaled"
        proxy.restore()
        assert isinstance(cancel_queued(session, ids[1]), Applied)
    finally:
        session.close()
        proxy.close()


def test_a_connection_lost_while_committing_is_an_unknown_outcome_never_a_second_send(db, calls):
    """The commit is the one moment whose outcome the client cannot know: the server may have
    committed and died before saying so. A constraint trigger that sleeps at COMMIT holds the
    action there while the test terminates its backend."""
    conn, ids = calls
    conn.execute(
        "create function test_slow_commit() returns trigger language plpgsql as "
        "$$ begin perform pg_sleep(30); return null; end $$")
    conn.execute("create constraint trigger test_slow_commit after update on tool_jobs "
                 "deferrable initially deferred for each row execute function test_slow_commit()")
    session = ConsoleSession(db.dsn, operator="alice")
    outcome: list[BaseException | object] = []
    try:
        session.open()
        pid = session.act(lambda c: c.info.backend_pid)

        def act() -> None:
            try:
                outcome.append(cancel_queued(session, ids[0]))
            except BaseException as exc:  # noqa: BLE001 - what the caller would see
                outcome.append(exc)

        thread = threading.Thread(target=act)
        thread.start()
        wait_until(lambda: conn.execute("select 1 from pg_stat_activity where pid = %s and query = 'COMMIT' "
                                        "and wait_event = 'PgSleep'", (pid,)).fetchone(),
                   timeout=15, what="the action to wait in its COMMIT")
        conn.execute("select pg_terminate_backend(%s, 10000)", (pid,))
        thread.join(timeout=15)
        assert len(outcome) == 1
        error = outcome[0]
        assert isinstance(error, OutcomeUnknown), error
        words = str(error) + (error.hint or "")
        assert "unknown whether" in words and "journal" in words and str(ids[0])[:8] in words, words
        # never sent a second time: that transaction died before its commit, so nothing changed
        assert job(conn, ids[0])["state"] == "queued"
        assert not [e for e in events(conn, ids[0]) if e["kind"].startswith("operator_")]
        conn.execute("drop trigger test_slow_commit on tool_jobs")
        assert isinstance(cancel_queued(session, ids[1]), Applied), "the next action renews the connection"
    finally:
        session.close()
