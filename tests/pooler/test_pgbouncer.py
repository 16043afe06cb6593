"""leasectl through a real PgBouncer in transaction mode (tests/pooler/conftest.py): the fleet, the
supervisor and the console work; no session state is assumed or left behind; nothing is prepared;
the limits hold in every transaction; LISTEN gives way to polling, and each says so."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from console.control.supervisor import Supervisor
from console.core.models import ToolPause
from console.db import actions, sql
from console.db.connect import connect, run, run_one, translate_error
from console.db.migrate import known_version, migrate
from console.db.pooler import pooler_of, send
from console.db.reads import jobs, triage
from console.db.session import ConsoleSession
from console.operator.doctor import diagnose
from console.shared.config import SessionLimits
from console.shared.errors import PermissionDenied, ReadOnlySession, RowLocked, StatementTimedOut
from console.worker import AsyncCallContext, AsyncWorker, CallContext, Worker
from tests.helpers import QUICK, cli_invoker, enqueue, register_agent, wait_until
from tests.pooler.conftest import POOL_SIZE, Bouncer

pytestmark = pytest.mark.pooler

TOOLS = {"lookup": ("read_only", QUICK), "charge": ("mutating_unverifiable", QUICK)}
LOGINS = {"pooled_worker": "leasectl_worker"}


def query(source: str) -> sql.Query:
    """A statement of the test's own, sent as leasectl sends its files (console.db.pooler.send)."""
    text, params = sql.translate(source)
    return sql.Query(name="tests/pooler", source=source, text=text, params=params, purpose="test", zero_rows="")


SLEEP = query("select pg_sleep(:seconds::float8) as slept")
LOCK = query("select id from tool_jobs where id = :job_id::uuid for update")
SETTINGS = query("select current_setting('statement_timeout') as statement_timeout, "
                 "current_setting('lock_timeout') as lock_timeout, "
                 "current_setting('transaction_read_only') as read_only, "
                 "current_setting('transaction_isolation') as isolation, current_user::text as role")
WORKER_LIMITS = SessionLimits(statement_timeout_ms=300, lock_timeout_ms=200, idle_in_transaction_ms=5_000,
                              plan_cache_mode="auto")


def other_client(dsn: str) -> psycopg.Connection:
    """Another client of the same pool: plain psycopg, nothing set, nothing prepared."""
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, prepare_threshold=None)


@contextmanager
def holding(dsn: str, job_id, admin_dsn: str) -> Iterator[None]:
    """Another client holds the call's row in an open transaction. Ended after 5 s whatever
    happens, so that a lock wait the limits failed to bound fails the test instead of hanging it."""
    with other_client(dsn) as holder, holder.transaction():
        holder.execute(LOCK.text, {"job_id": job_id})
        pid = holder.execute("select pg_backend_pid() as pid").fetchone()["pid"]
        timer = threading.Timer(5, _terminate, args=(admin_dsn, pid))
        timer.start()
        try:
            yield
        finally:
            timer.cancel()


def _terminate(admin_dsn: str, pid: int) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute("select pg_terminate_backend(%s)", (pid,))


def seen_by_another_client(dsn: str, times: int = POOL_SIZE * 2) -> list[dict]:
    """What the settings are for another client, transaction after transaction: PgBouncer hands out
    the server connection used last first, so the first ones run where leasectl's did."""
    with other_client(dsn) as other:
        return [other.execute(SETTINGS.text).fetchone() for _ in range(times)]


def server_default(dsn: str) -> str:
    with other_client(dsn) as direct:
        return direct.execute("select current_setting('statement_timeout') as v").fetchone()["v"]


# ----------------------------------------------------------------------------- what a connection does


def test_leasectl_finds_the_pooler_and_sets_nothing_for_the_session(db, pooled, monkeypatch):
    default = server_default(db.dsn)
    with connect(pooled) as conn:
        pooler = pooler_of(conn)
        assert pooler is not None and pooler.mode == "transaction" and pooler.how.startswith("found:"), pooler
        assert conn.prepare_threshold is None  # and straight to the server, psycopg's default
        for _ in range(8):  # more than psycopg's five runs before it prepares
            mine = send(conn, SETTINGS, {}).fetchone()
            assert (mine["statement_timeout"], mine["lock_timeout"]) == ("5s", "2s")
    assert all(s["statement_timeout"] == default for s in seen_by_another_client(pooled))
    with connect(db.dsn) as direct:
        assert pooler_of(direct) is None and direct.prepare_threshold == 5

    # what the test would have seen had leasectl set its limits for the session, as it does
    # straight to the server: they stay on the server connection and reach the next client
    monkeypatch.setenv("LEASECTL_POOLER", "none")
    with connect(pooled) as conn:
        assert pooler_of(conn) is None
    assert any(s["statement_timeout"] == "5s" for s in seen_by_another_client(pooled))


def test_the_limits_hold_in_every_transaction_and_a_set_transaction_still_comes_first(pooled):
    with connect(pooled) as conn:
        with conn.transaction():  # the snapshot of a console refresh (reads.triage), then our limits
            run(conn, "meta/snapshot")
            row = send(conn, SETTINGS, {}).fetchone()
        assert (row["isolation"], row["read_only"], row["statement_timeout"]) == ("repeatable read", "on", "5s")
        snapshot = triage(conn)
        assert snapshot.counts is not None


def test_a_statement_longer_than_the_workers_timeout_is_cancelled_through_the_pooler(db, conn, pooled):
    worker = Worker(pooled, "w-timeout", lambda ctx: None, limits=WORKER_LIMITS)
    lane = worker.heartbeat_lane
    try:
        assert lane.run(lambda c: send(c, SETTINGS, {}).fetchone())["statement_timeout"] == "300ms"
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            lane.run(lambda c: send(c, SLEEP, {"seconds": 5}).fetchall())
        assert time.monotonic() - started < 2
        # the same in a transaction of several statements
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            lane.run(lambda c: _in_a_transaction(c, [SETTINGS, SLEEP], seconds=5))
        assert time.monotonic() - started < 2
        # a row held by another session: the worker waits its lock_timeout, not for ever
        call = enqueue(conn, "lookup")
        with holding(pooled, call["id"], db.dsn):
            started = time.monotonic()
            with pytest.raises(psycopg.errors.LockNotAvailable):
                lane.run(lambda c: send(c, LOCK, {"job_id": call["id"]}).fetchall())
            assert time.monotonic() - started < 2
    finally:
        worker.close()


def _in_a_transaction(conn, queries: list[sql.Query], **values) -> None:
    with conn.transaction():
        for q in queries:
            send(conn, q, {k: v for k, v in values.items() if k in q.params}).fetchall()


def test_the_console_meets_its_own_lock_and_statement_timeouts_through_the_pooler(db, conn, pooled):
    """An action that meets a locked row says so (lock_timeout, set in the action's transaction);
    a read that runs too long says so (statement_timeout)."""
    call = enqueue(conn, "lookup")
    session = ConsoleSession(pooled, operator="alice", limits=SessionLimits(statement_timeout_ms=300,
                                                                            lock_timeout_ms=200))
    try:
        session.open()
        with holding(pooled, call["id"], db.dsn):
            started = time.monotonic()
            with pytest.raises(RowLocked):
                session.act(lambda c: actions.cancel(c, call["id"], seen_state="queued", seen_token=0,
                                                     operator="alice", reason="pooled"))
            assert time.monotonic() - started < 2
        started = time.monotonic()
        with pytest.raises(StatementTimedOut):
            session.read(_sleep_as_leasectl_reads)
        assert time.monotonic() - started < 2
    finally:
        session.close()


def _sleep_as_leasectl_reads(conn) -> None:
    with conn.transaction():
        run(conn, "meta/snapshot")
        try:
            send(conn, SLEEP, {"seconds": 5}).fetchall()
        except psycopg.Error as exc:  # as console.db.connect.run translates its own
            raise translate_error(exc, "a test's sleep") from exc


def test_a_read_only_console_is_read_only_in_every_transaction_and_leaves_nothing_behind(conn, pooled):
    session = ConsoleSession(pooled, operator="alice", read_only=True)
    try:
        assert session.open().schema_version == known_version()
        for _ in range(6):
            row = session.read(lambda c: send(c, SETTINGS, {}).fetchone())
            assert (row["role"], row["read_only"]) == ("leasectl_auditor", "on")
        with pytest.raises((ReadOnlySession, PermissionDenied)):
            session.read(lambda c: enqueue(c, "lookup"))
        assert session.read(triage).counts is not None
    finally:
        session.close()
    assert all((s["role"], s["read_only"]) == ("postgres", "off") for s in seen_by_another_client(pooled))


def test_dates_read_through_the_pooler_from_a_server_that_writes_them_otherwise(db, pooled):
    """psycopg reads dates only in ISO: the one session setting leasectl makes through the pooler,
    which PgBouncer keeps per client (and sets back for the others)."""
    with other_client(db.dsn) as admin:
        admin.execute(f'alter database "{db.name}" set datestyle = \'SQL, DMY\'')
    with connect(pooled) as conn:
        for _ in range(8):
            assert triage(conn).counts is not None and run_one(conn, "views/db_info")["db_now"] is not None
            assert conn.execute("select current_setting('DateStyle') as d").fetchone()["d"] == "ISO, DMY"
        assert all(s["d"] == "SQL, DMY" for s in _datestyles(pooled))


def _datestyles(dsn: str) -> list[dict]:
    with other_client(dsn) as other:
        return [other.execute("select current_setting('DateStyle') as d").fetchone() for _ in range(POOL_SIZE * 2)]


def test_migrate_through_the_pooler_holds_its_lock_for_one_transaction(empty_db, pgbouncer: Bouncer):
    with connect(pgbouncer.dsn_for(empty_db)) as conn:
        report = migrate(conn)
    assert report.version == known_version() and report.applied
    with psycopg.connect(empty_db.dsn, autocommit=True) as direct:  # no lock left on a server connection
        assert direct.execute("select pg_try_advisory_lock(hashtext('leasectl.migrate'))").fetchone()[0]


def test_migrate_through_the_pooler_waits_for_another_migrator_past_its_timeouts(empty_db, pgbouncer: Bouncer):
    """The wait for the lock outlasts the transaction's lock_timeout (2 s), then the migrations' own
    statements have the transaction's bounds back (lock_timeout) or none (statement_timeout)."""
    import threading
    import time

    with psycopg.connect(empty_db.dsn, autocommit=True) as holder:
        holder.execute("select pg_advisory_lock(hashtext('leasectl.migrate'))")
        released = threading.Timer(3.0, lambda: holder.execute("select pg_advisory_unlock(hashtext('leasectl.migrate'))"))
        released.start()
        t0 = time.monotonic()
        try:
            with connect(pgbouncer.dsn_for(empty_db)) as conn:
                report = migrate(conn)
        finally:
            released.join()
    assert time.monotonic() - t0 >= 3.0, "it waited for the other migrator"
    assert report.version == known_version() and report.applied


def test_doctor_names_the_pooler_and_what_it_changes(db, pooled, monkeypatch):
    checks = {c.name: c for c in diagnose(pooled)}
    pooler = checks["pooler"]
    assert pooler.status == "warn" and "transaction mode" in pooler.detail
    for change in ("no session state", "prepared statements off", "no LISTEN/NOTIFY", "pg_stat_activity"):
        assert change in pooler.detail, change
    assert "default_pool_size" in pooler.fix
    assert checks["schema"].status == "ok" and checks["state machine"].status == "ok"
    assert {c.name: c for c in diagnose(db.dsn)}["pooler"].detail.startswith("none")
    shown = cli_invoker(pooled, "alice")("doctor")
    assert shown.exit_code == 0 and "pooler" in shown.output and "transaction mode" in shown.output
    monkeypatch.setenv("LEASECTL_POOLER", "none")  # told there is none: the doctor looks anyway
    assert "LEASECTL_POOLER=none, but" in {c.name: c for c in diagnose(pooled)}["pooler"].detail
    monkeypatch.setenv("LEASECTL_POOLER", "session")  # told it keeps sessions: as straight to the server
    with connect(pooled) as conn:
        assert pooler_of(conn).keeps_sessions and conn.prepare_threshold == 5


def test_psycopgs_own_prepared_statements_do_break_here(pooled):
    """The tier's own check: through this pooler, psycopg left to itself fails as the issue says --
    so the fleet's clean run below means something."""
    errors: list[str] = []

    def client() -> None:
        with psycopg.connect(pooled, autocommit=True) as c:
            for i in range(40):
                try:
                    c.execute("select %s::int", (i,)).fetchone()
                except psycopg.Error as exc:
                    errors.append(str(exc))
                    return

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert any("prepared statement" in e for e in errors), errors


# ----------------------------------------------------------------------------- the fleet


def test_the_fleet_runs_through_pgbouncer_in_transaction_mode(db, conn, pooled, pgbouncer: Bouncer, logins,
                                                              caplog):
    caplog.set_level(logging.INFO)
    register_agent(conn, "agent-a")
    total = 48
    for i in range(total):
        enqueue(conn, "charge" if i % 3 == 0 else "lookup", agent_id="agent-a", payload={"n": i})
    worker_dsn = make_conninfo(pooled, user="pooled_worker")

    def handler(ctx: CallContext) -> dict:
        if ctx.call.tool == "charge":
            ctx.start_side_effect(f"req-{ctx.call.id}")
        ctx.sleep(0.25)  # over a heartbeat (QUICK: every 0.2 s)
        return {"n": ctx.payload["n"]}

    async def async_handler(ctx: AsyncCallContext) -> dict:
        await asyncio.sleep(0.25)
        return {"n": ctx.payload["n"]}

    stop = threading.Event()
    done: list[int] = []
    failures: list[BaseException] = []

    def keep(fn, *args) -> None:
        try:
            result = fn(*args)
            if isinstance(result, int):
                done.append(result)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            failures.append(exc)

    workers = [Worker(worker_dsn, f"pooled_worker:{n}", handler, poll_interval=0.05, concurrency=4) for n in range(3)]
    workers.append(AsyncWorker(worker_dsn, "pooled_worker:async", {"lookup": async_handler},
                               poll_interval=0.05, concurrency=8))
    supervisor_notes: list[str] = []
    supervisor = Supervisor(pooled, interval=0.2, sweep_interval=0.5, on_note=supervisor_notes.append)
    session = ConsoleSession(pooled, operator="alice")
    console_notes: list[str] = []
    reads: list[int] = []

    def console() -> None:
        session.open()
        while not stop.is_set():
            snapshot = session.read(triage)
            page = session.read(lambda c: jobs(c, limit=50))
            reads.append(len(snapshot.rows) + len(page))
            time.sleep(0.05)

    crowd: list[int] = []

    def watch_the_pool() -> None:  # how many clients share how many server connections
        while not stop.is_set():
            pools = [p for p in pgbouncer.show("pools") if p["database"] == db.name]
            crowd.append(sum(p["cl_active"] + p["cl_waiting"] for p in pools))
            assert all(p["sv_active"] + p["sv_idle"] + p["sv_used"] + p["sv_tested"] + p["sv_login"] <= POOL_SIZE
                       for p in pools), pools
            time.sleep(0.1)

    threads = [threading.Thread(target=keep, args=(w.run, stop)) for w in workers]
    threads += [threading.Thread(target=keep, args=(supervisor.run, stop)),
                threading.Thread(target=keep, args=(console,)),
                threading.Thread(target=keep, args=(watch_the_pool,)),
                threading.Thread(target=keep, args=(session.listen, lambda _: None, stop, None,
                                                    console_notes.append, 2.0))]
    started = time.monotonic()
    for t in threads:
        t.start()
    try:
        wait_until(lambda: failures or _count(conn, "succeeded") == total, timeout=40, what="every call to succeed")
        assert not failures, failures
        # an operator's actions and the control plane's drain, through the pooler too
        assert isinstance(session.act(lambda c: actions.pause_tool(c, "lookup", operator="alice", reason="pooled")),
                          ToolPause)
        session.act(lambda c: actions.resume_tool(c, "lookup", operator="alice", reason="pooled"))
        session.act(lambda c: actions.request_shutdown(c, "agent-a", mode="drain", operator="alice",
                                                       reason="pooled", window_seconds=1))
        wait_until(lambda: failures or _shutdown_state(conn) == "terminated", timeout=15,
                   what="the supervisor to carry the drain through")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        session.close()
    elapsed = time.monotonic() - started
    assert not failures, failures
    assert _count(conn, "succeeded") == total and sum(done) == total
    assert reads and max(crowd) > POOL_SIZE, (len(reads), crowd)
    journaled = conn.execute("select count(*) as n from job_events where kind = 'database_error'").fetchone()["n"]
    assert journaled == 0
    text = caplog.text + pgbouncer.log.read_text()
    assert "prepared statement" not in text
    # each part said what the pooler changes for it
    assert any("connection pooler in transaction mode" in r.getMessage() and "not prepared" in r.getMessage()
               for r in caplog.records if r.name == "leasectl.worker")
    assert console_notes and "The console polls every 2 s" in console_notes[0], console_notes
    assert session.polling_reason == console_notes[0]
    assert supervisor_notes and "ticks every 0.2 s" in supervisor_notes[0], supervisor_notes
    assert elapsed < 50


def _count(conn, state: str) -> int:
    return conn.execute("select count(*) as n from tool_jobs where state = %s", (state,)).fetchone()["n"]


def _shutdown_state(conn) -> str | None:
    row = conn.execute("select state from shutdowns where root_agent_id = 'agent-a' "
                       "order by requested_at desc limit 1").fetchone()
    return row["state"] if row else None
