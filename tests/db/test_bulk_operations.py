"""Bulk operations of any size (migration 0023): over 1,000 calls a bulk action becomes a
bulk_operations row worked in batches by the CLI or the supervisor -- resumable after a crash with
no call acted on twice and none skipped, stoppable, every call still guarded by the state and token
read for it, and the database deciding who may start, work and stop one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

from console.control import supervisor
from console.core import bulk as core_bulk
from console.core.filters import parse_filter
from console.db import bulk
from console.db.connect import connect, run, run_one
from console.operator.cli import app
from console.shared.errors import LeasectlError, PermissionDenied, ReadOnlySession, RowLocked
from tests.helpers import SLOW, as_login, claim_many, complete, job

TOOLS = {"search": ("read_only", SLOW)}
OPERATOR, WORKER, AUDITOR, CONTROL = "lc_bulk_op", "lc_bulk_worker", "lc_bulk_aud", "lc_bulk_sup"
LOGINS = {OPERATOR: "leasectl_operator", WORKER: "leasectl_worker", AUDITOR: "leasectl_auditor",
          CONTROL: "leasectl_supervisor"}


# ----------------------------------------------------------------------------- the world


def seed(conn, queued: int, running: int = 0, tool: str = "search") -> None:
    """`queued` calls of `tool` and `running` more claimed by one worker, written in two statements."""
    conn.execute("insert into tool_jobs (idempotency_key, payload, tool) "
                 "select 'op:' || n, '{}'::jsonb, %s from generate_series(1, %s) n", (tool, queued + running))
    if running:
        assert len(claim_many(conn, "w-1", [tool], running)) == running


def operation_row(conn, operation_id) -> dict:
    return conn.execute("select * from bulk_operations where id = %s", (operation_id,)).fetchone()


def journal_per_call(conn, operation_id) -> dict[uuid.UUID, list[str]]:
    """Every journal row of the operation's calls (details.batch_id), by call: their outcomes."""
    rows = conn.execute("select job_id, coalesce(details ->> 'outcome', kind) as outcome from job_events "
                        "where details ->> 'batch_id' = %s order by id", (str(operation_id),)).fetchall()
    found: dict[uuid.UUID, list[str]] = {}
    for r in rows:
        found.setdefault(r["job_id"], []).append(r["outcome"])
    return found


def fleet_journal(conn, operation_id) -> list[str]:
    return [r["kind"] for r in conn.execute(
        "select kind from fleet_events where details ->> 'operation_id' = %s order by id", (str(operation_id),))]


def started(conn, where: str = "tool:search", *, action: str = "cancel", operator: str = "dana",
            reason: str = "incident 42", background: bool = False, **choices):
    """An operation over what `where` selects, started as the CLI starts one (no work done yet)."""
    plan = bulk.plan(action, bulk.selection(conn, where=parse_filter(where)), **choices)
    return bulk.start(conn, plan, operator=operator, reason=reason, filter_text=where, background=background)


def assert_exactly_once(conn, op_id, total: int) -> dict:
    """Every call of the operation acted on once: one journal row each, an outcome each, counts right."""
    op = operation_row(conn, op_id)
    journal = journal_per_call(conn, op_id)
    assert len(journal) == total, f"{len(journal)} calls journaled of {total}"
    twice = {k: v for k, v in journal.items() if len(v) != 1}
    assert not twice, f"calls journaled more than once: {list(twice.items())[:3]}"
    outcomes = conn.execute("select outcome, count(*) as n from bulk_operation_calls where operation_id = %s "
                            "group by outcome", (op_id,)).fetchall()
    by = {r["outcome"]: r["n"] for r in outcomes}
    assert None not in by, "no call left unsettled"
    assert (op["done"], op["applied"], op["refused"], op["failed"]) == (
        total, by.get("applied", 0), by.get("refused", 0), by.get("failed", 0)), (op, by)
    assert op["state"] == "finished"
    unjournaled = conn.execute(
        "select count(*) as n from bulk_operation_calls c where c.operation_id = %s and c.outcome <> 'skipped' "
        "and not exists (select 1 from job_events e where e.job_id = c.job_id and e.request_id = c.request_id "
        "and e.details ->> 'batch_id' = %s)", (op_id, str(op_id))).fetchone()["n"]
    assert unjournaled == 0, "each outcome names the request id of its call's journal row"
    return op


def cli(db, *args, dsn=None, input=None, terminal=False, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr("console.operator.cli.common.stdin_is_terminal", lambda: terminal)
    result = CliRunner().invoke(app, [*args, "--dsn", dsn or db.dsn], input=input, env={"USER": "bulk-tester"})
    assert "Traceback" not in result.output, result.output
    return result


def leasectl(db, *args, fault: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real command in its own process (a crash point kills it with SIGKILL)."""
    env = {**os.environ, "USER": "bulk-tester"}
    env.pop("LEASECTL_FAULT", None)
    if fault:
        env["LEASECTL_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "console", *args, "--dsn", db.dsn], capture_output=True, text=True,
                          env=env, timeout=timeout)


def the_operation(conn) -> dict:
    rows = conn.execute("select * from bulk_operations order by created_at").fetchall()
    assert len(rows) == 1, rows
    return rows[0]


# ----------------------------------------------------------------------------- a crash mid-bulk


@pytest.mark.parametrize("fault, resumed_by", [("bulk:mid_batch", "cli"), ("bulk:between_batches", "supervisor")])
def test_a_crash_mid_bulk_resumes_exactly(db, conn, fault, resumed_by, monkeypatch):
    """The CLI is killed (SIGKILL) half-way through its second batch, or right after a commit; the
    operation is resumed by `leasectl bulk resume` or by the supervisor: every call acted on once,
    none skipped, the counts right."""
    seed(conn, queued=1_150, running=60)
    crashed = leasectl(db, "cancel", "--where", "tool:search", "--reason", "incident 42", "--yes", fault=fault)
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, crashed.stderr[-2000:])
    assert "bulk operation" in crashed.stderr and "1,210 calls" in crashed.stderr
    op = the_operation(conn)
    assert op["state"] == "running" and op["total"] == 1_210
    # what committed is whole batches, their calls acted on and settled together; the batch the
    # crash cut is undone: no call acted on without its outcome, none with an outcome not acted on
    assert op["done"] >= 50 and op["done"] % 50 == 0, op["done"]
    journal = journal_per_call(conn, op["id"])
    assert len(journal) == op["done"] and all(len(v) == 1 for v in journal.values())
    settled = {r["job_id"] for r in conn.execute("select job_id from bulk_operation_calls where operation_id = %s "
                                                 "and outcome is not null", (op["id"],))}
    assert settled == set(journal)
    acted = conn.execute("select count(*) as n from tool_jobs where state in ('cancelled', 'cancel_requested')"
                         ).fetchone()["n"]
    assert acted == op["done"], "every call acted on is settled, and no other"

    if resumed_by == "cli":
        again = leasectl(db, "bulk", "resume", str(op["id"])[:8])
        assert again.returncode == 0, again.stderr[-2000:] + again.stdout[-2000:]
        assert "DONE" in again.stdout and "1,210 applied" in again.stdout
    else:  # the supervisor takes over an operation its CLI left without progress
        monkeypatch.setattr(bulk, "WORKER_IDLE_SECONDS", 0.0)
        for _ in range(40):
            supervisor.tick(conn, supervisor_id="sv-bulk")
            if operation_row(conn, op["id"])["state"] == "finished":
                break
    done = assert_exactly_once(conn, op["id"], 1_210)
    assert done["applied"] == 1_210
    assert conn.execute("select count(*) as n from tool_jobs where state = 'cancelled'").fetchone()["n"] == 1_150
    assert conn.execute("select count(*) as n from tool_jobs where state = 'cancel_requested'").fetchone()["n"] == 60
    assert fleet_journal(conn, op["id"]) == ["bulk_started", "bulk_finished"]


def test_without_the_fault_the_same_command_finishes_in_the_foreground(db, conn):
    """The crash test's control: the same command, not killed, works the whole operation itself."""
    seed(conn, queued=1_010)
    done = leasectl(db, "cancel", "--where", "tool:search", "--reason", "incident 42", "--yes")
    assert done.returncode == 0, done.stderr[-2000:]
    op = the_operation(conn)
    assert_exactly_once(conn, op["id"], 1_010)
    assert op["worked_by"].startswith("cli:bulk-tester@")


# ----------------------------------------------------------------------------- guarded per call


def test_a_call_changed_between_creation_and_its_batch_is_refused_and_journaled(db, conn):
    seed(conn, queued=5, running=5)
    op = started(conn)
    running = conn.execute("select * from tool_jobs where state = 'running' order by id limit 2").fetchall()
    complete(conn, running[0], "w-1")  # finished meanwhile: its token and state are not what was frozen
    conn.execute("select * from leasectl_request_cancel(%s, 'running', %s, 'eve', 'by hand')",
                 (running[1]["id"], running[1]["fencing_token"]))  # cancelled by someone else meanwhile
    ended = bulk.work(conn, op.id, worker="test")
    assert (ended.state, ended.applied, ended.refused, ended.done) == ("finished", 8, 2, 10)
    refused = {c.job_id: c for c in bulk.not_applied(conn, op.id)}
    assert set(refused) == {running[0]["id"], running[1]["id"]}
    assert all(c.why == "the call changed since you looked" for c in refused.values())
    assert job(conn, running[0]["id"])["state"] == "succeeded", "nothing acted on blind"
    journal = journal_per_call(conn, op.id)
    assert journal[running[0]["id"]] == ["refused"] and journal[running[1]["id"]] == ["refused"]
    assert_exactly_once(conn, op.id, 10)


def test_the_plans_skipped_calls_are_recorded_and_never_sent(db, conn):
    seed(conn, queued=3, running=2)
    complete(conn, conn.execute("select * from tool_jobs where state = 'running' limit 1").fetchone(), "w-1")
    op = started(conn, action="mark_terminal", terminal_state="failed")  # live leases need force: skipped
    assert (op.total, op.skipped) == (3, 2), "1 finished and 1 live lease skipped, 3 queued sent"
    ended = bulk.work(conn, op.id, worker="test")
    assert (ended.applied, ended.state) == (3, "finished") and not ended.all_applied
    skipped = [c for c in bulk.not_applied(conn, op.id) if c.outcome == "skipped"]
    assert len(skipped) == 2 and {c.why for c in skipped} == {
        "already succeeded", "its owner holds a live lease (force would fence it out)"}
    assert len(journal_per_call(conn, op.id)) == 3, "the skipped calls were never sent"


# ----------------------------------------------------------------------------- stop


def test_stop_lets_the_batch_in_flight_finish_and_sends_nothing_more(db, conn):
    seed(conn, queued=200)
    op = started(conn)
    # a worker is half-way through a batch (its transaction open: calls acted on, settled, not committed)
    with db.connect(autocommit=False) as worker:
        run(worker, "meta/batch_id", batch_id=str(op.id))
        batch = run(worker, "bulk/next_batch", operation_id=op.id, batch_size=50)
        for row in batch:
            run_one(worker, "operator/request_cancel", job_id=row["job_id"], seen_state=row["seen_state"],
                    seen_token=row["seen_token"], operator=op.operator, reason=op.reason)
            run_one(worker, "bulk/settle_call", operation_id=op.id, job_id=row["job_id"], error=None,
                    worker="half-way")
        with db.connect() as stopper:
            started_at = time.monotonic()
            stopped, now = bulk.stop(stopper, op.id, operator="ana", reason="wrong filter")
            assert stopped and now.state == "stopping", "the stop never waits for the batch: it is asked at once"
            assert time.monotonic() - started_at < 10
            with pytest.raises(RowLocked):  # stopped only once the batch in flight has committed
                bulk.close(stopper, op.id, worker="too-early")
            assert run(stopper, "bulk/next_batch", operation_id=op.id, batch_size=50) == [], "no new batch"
        worker.commit()
    assert operation_row(conn, op.id)["done"] == 50, "the batch in flight was settled: its calls count"
    closed = bulk.close(conn, op.id, worker="test")
    assert (closed.state, closed.done, closed.applied, closed.left) == ("stopped", 50, 50, 150)
    assert bulk.work(conn, op.id, worker="late").done == 50, "a stopped operation sends nothing more"
    assert len(journal_per_call(conn, op.id)) == 50
    assert conn.execute("select count(*) as n from tool_jobs where state = 'queued'").fetchone()["n"] == 150
    assert fleet_journal(conn, op.id) == ["bulk_started", "bulk_stop_requested", "bulk_stopped"]
    stop_row = conn.execute("select actor, reason, db_role from fleet_events where kind = 'bulk_stop_requested'"
                            ).fetchone()
    assert (stop_row["actor"], stop_row["reason"]) == ("ana", "wrong filter")


def test_bulk_stop_from_the_command_line_and_its_refusals(db, conn):
    seed(conn, queued=120)
    op = started(conn)
    bulk.work(conn, op.id, worker="test", batch_size=50, deadline=0)  # nothing done: deadline already past
    stop = cli(db, "bulk", "stop", str(op.id)[:8], "--reason", "wrong filter")
    assert stop.exit_code == 0 and "stopped" in stop.output, stop.output
    assert operation_row(conn, op.id)["state"] == "stopped"
    again = cli(db, "bulk", "stop", str(op.id), "--reason", "again")
    assert again.exit_code == 3 and "is stopped: there is nothing to stop" in again.output
    assert "bulk_stop_refused" in fleet_journal(conn, op.id)
    resumed = cli(db, "bulk", "resume", str(op.id))
    assert resumed.exit_code == 3 and "only a running operation is resumed" in resumed.output
    assert conn.execute("select count(*) as n from tool_jobs where state = 'queued'").fetchone()["n"] == 120


def test_the_operator_journal_lists_the_start_and_the_stops(db, conn):
    """`audit actions --action bulk|bulk_stop`: who started an operation and who stopped it (or
    was refused), beside the calls it acted on (their own rows, details.batch_id)."""
    seed(conn, queued=60)
    op = started(conn, operator="dana", reason="incident 42")
    bulk.work(conn, op.id, worker="test", max_batches=1)
    assert cli(db, "bulk", "stop", str(op.id), "--reason", "wrong filter", "--operator", "ana").exit_code == 0
    assert cli(db, "bulk", "stop", str(op.id), "--reason", "again", "--operator", "lee").exit_code == 3
    started_rows = json.loads(cli(db, "audit", "actions", "--action", "bulk", "--json").stdout)
    assert [(r["operator"], r["outcome"], r["reason"], r["details"]["operation_id"]) for r in started_rows] == [
        ("dana", "applied", "incident 42", str(op.id))]
    stops = json.loads(cli(db, "audit", "actions", "--action", "bulk_stop", "--json").stdout)
    assert [(r["operator"], r["outcome"]) for r in stops] == [("lee", "refused"), ("ana", "applied")]
    cancels = json.loads(cli(db, "audit", "actions", "--action", "cancel", "--json").stdout)
    assert len(cancels) == 50 and {r["details"]["batch_id"] for r in cancels} == {str(op.id)}


@pytest.mark.parametrize("args, says", [
    (("bulk", "status", "0000dead"), "no bulk operation with id 0000dead"),
    (("bulk", "status", "not-an-id"), "is not a bulk operation id"),
    (("bulk", "stop", str(uuid.UUID(int=7)), "--reason", "x"), "no bulk operation"),
    (("bulk", "resume", "0000"), "no bulk operation"),
    (("bulk", "stop", "0000"), "Missing option '--reason'"),
])
def test_bad_input_is_a_clear_message_and_exit_2(db, conn, args, says):
    result = cli(db, *args)
    assert result.exit_code == 2 and says in result.output, result.output


def test_stopping_a_finished_operation_is_refused(db, conn):
    seed(conn, queued=7)
    op = started(conn)
    assert bulk.work(conn, op.id, worker="test").state == "finished"
    result = cli(db, "bulk", "stop", str(op.id), "--reason", "too late")
    assert result.exit_code == 3 and "is finished: there is nothing to stop" in result.output
    stopped, now = bulk.stop(conn, op.id, operator="ana", reason="too late")
    assert not stopped and now.state == "finished" and now.applied == 7


# ----------------------------------------------------------------------------- two workers of one operation


def test_two_workers_step_by_step_never_take_the_same_call(db, conn):
    """Deterministic interleaving: worker A holds a batch (not committed); worker B's batch is other
    calls; A's and B's commits settle each call once, and a third worker finds only what is left."""
    seed(conn, queued=130)
    op = started(conn)
    with db.connect(autocommit=False) as a, db.connect(autocommit=False) as b:
        taken = {}
        for name, c in (("a", a), ("b", b)):
            run(c, "meta/batch_id", batch_id=str(op.id))
            taken[name] = run(c, "bulk/next_batch", operation_id=op.id, batch_size=50)
        ids_a = {r["job_id"] for r in taken["a"]}
        ids_b = {r["job_id"] for r in taken["b"]}
        assert len(ids_a) == len(ids_b) == 50 and not ids_a & ids_b, "SKIP LOCKED: B gets other calls"
        for name, c in (("a", a), ("b", b)):
            for row in taken[name]:
                run_one(c, "operator/request_cancel", job_id=row["job_id"], seen_state=row["seen_state"],
                        seen_token=row["seen_token"], operator=op.operator, reason=op.reason)
                run_one(c, "bulk/settle_call", operation_id=op.id, job_id=row["job_id"], error=None, worker=name)
        # A settles again a call B holds: it waits on B's row lock, then finds it settled: an error
        # that undoes nothing of B's (and would undo A's whole batch)
        b.commit()
        with pytest.raises(LeasectlError) as twice:
            run_one(a, "bulk/settle_call", operation_id=op.id, job_id=taken["b"][0]["job_id"], error=None,
                    worker="a")
        assert "not an unsettled call" in str(twice.value)
        a.rollback()  # A's batch is undone, its calls are free again
    assert operation_row(conn, op.id)["done"] == 50
    ended = bulk.work(conn, op.id, worker="c")
    assert (ended.state, ended.done) == ("finished", 130)
    assert_exactly_once(conn, op.id, 130)
    by = {r["worked_by"]: r["n"] for r in conn.execute(
        "select worked_by, count(*) as n from bulk_operation_calls where operation_id = %s group by 1", (op.id,))}
    assert by == {"b": 50, "c": 80}, "A's undone batch was taken again by C, B's was not"


def test_the_cli_and_the_supervisor_at_once_never_act_on_a_call_twice(db, conn, monkeypatch):
    """Real concurrency: a foreground worker (the CLI's) and the supervisor's ticks work one
    operation at once, in small batches, until it is finished."""
    seed(conn, queued=800)
    op = started(conn, background=True)  # the supervisor's at once
    monkeypatch.setattr(bulk, "BATCH_SIZE", 7)
    errors: list[BaseException] = []
    go = threading.Barrier(3)

    def cli_worker() -> None:
        try:
            with db.connect() as c:
                go.wait()
                bulk.work(c, op.id, worker="cli:test")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def supervisor_worker(name: str) -> None:
        try:
            with db.connect() as c:
                go.wait()
                for _ in range(200):
                    supervisor.tick(c, supervisor_id=name, sweep=False)
                    if operation_row(c, op.id)["state"] == "finished":
                        return
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=cli_worker), threading.Thread(target=supervisor_worker, args=("sv-1",)),
               threading.Thread(target=supervisor_worker, args=("sv-2",))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert_exactly_once(conn, op.id, 800)
    workers = {r["worked_by"] for r in conn.execute(
        "select distinct worked_by from bulk_operation_calls where operation_id = %s", (op.id,))}
    assert "cli:test" in workers and workers & {"sv-1", "sv-2"}, f"both kinds of worker took batches: {workers}"
    assert conn.execute("select count(*) as n from tool_jobs where state = 'cancelled'").fetchone()["n"] == 800


# ----------------------------------------------------------------------------- the command line


def test_over_the_limit_a_bulk_action_becomes_an_operation_and_still_asks_first(db, conn, monkeypatch):
    seed(conn, queued=6, running=3)
    monkeypatch.setattr(core_bulk, "LIMIT", 5)
    asked = cli(db, "cancel", "--where", "tool:search", "--reason", "incident 42")
    assert asked.exit_code == 2 and "no terminal" in asked.output
    assert "9 calls" in asked.output and "queued → cancelled" in asked.output, "the sized plan first"
    assert "runs as a bulk operation" in asked.output
    assert conn.execute("select count(*) as n from bulk_operations").fetchone()["n"] == 0, "nothing started"
    wrong = cli(db, "cancel", "--where", "tool:search", "--reason", "incident 42", input="8\n", terminal=True,
                monkeypatch=monkeypatch)
    assert wrong.exit_code == 2 and conn.execute("select count(*) as n from bulk_operations").fetchone()["n"] == 0
    done = cli(db, "cancel", "--where", "tool:search", "--reason", "incident 42", input="9\n", terminal=True,
               monkeypatch=monkeypatch)
    assert done.exit_code == 0, done.output
    assert "bulk operation" in done.output and "DONE" in done.output and "9 applied" in done.output
    op = the_operation(conn)
    assert (op["filter"], op["operator"]) == ("tool:search", "bulk-tester")
    assert op["db_role"] == conn.execute("select session_user as u").fetchone()["u"], "the login, set by the database"
    assert_exactly_once(conn, op["id"], 9)

    listed = json.loads(cli(db, "bulk", "status", "--json").stdout)
    assert [o["id"] for o in listed] == [str(op["id"])]
    assert list(listed[0])[:8] == ["id", "action", "filter", "total", "done", "refused", "state", "operator"]
    one = json.loads(cli(db, "bulk", "status", str(op["id"])[:6], "--json").stdout)
    assert (one["state"], one["done"], one["total"], one["not_applied"]) == ("finished", 9, 9, [])
    table = cli(db, "bulk", "status")
    assert table.exit_code == 0 and str(op["id"])[:8] in table.output and "finished" in table.output


def test_background_returns_at_once_and_the_supervisor_works_it(db, conn):
    seed(conn, queued=30)
    result = cli(db, "cancel", "--where", "tool:search", "--reason", "later", "--background", "--yes")
    assert result.exit_code == 0 and "the supervisor works it" in result.output, result.output
    op = the_operation(conn)
    assert (op["state"], op["done"], op["background"]) == ("running", 0, True)
    status = cli(db, "bulk", "status", str(op["id"]))
    assert "RUNNING" in status.output and "0 of 30 done" in status.output
    report = supervisor.tick(conn, supervisor_id="sv-bulk", sweep=False)
    assert any("running -> finished" in n for n in report.notes), report
    assert_exactly_once(conn, op["id"], 30)
    assert cli(db, "cancel", "abc", "--reason", "x", "--background").exit_code == 2, "--background needs --where"


def test_an_operation_with_some_refused_exits_3_and_lists_them(db, conn, monkeypatch):
    seed(conn, queued=4, running=2)
    monkeypatch.setattr(core_bulk, "LIMIT", 3)
    original = bulk.start

    def start_then_change(*args, **kwargs):  # a call finishes between the confirmation and its batch
        op = original(*args, **kwargs)
        complete(conn, conn.execute("select * from tool_jobs where state = 'running' limit 1").fetchone(), "w-1")
        return op

    monkeypatch.setattr(bulk, "start", start_then_change)
    result = cli(db, "cancel", "--where", "tool:search", "--reason", "x", "--yes")
    assert result.exit_code == 3 and "NOT ALL APPLIED" in result.output and "1 refused" in result.output
    op = the_operation(conn)
    status = cli(db, "bulk", "status", str(op["id"]))
    assert "REFUSED" in status.output and "the call changed since you looked" in status.output


# ----------------------------------------------------------------------------- who may


def _create_as(c):
    return c.execute("select * from leasectl_bulk_create('cancel', null, '{}', 'mallory', 'because', false, "
                     "array[gen_random_uuid()], array['queued'], array[0::bigint], '{}', '{}', '{}', '{}')")


def test_the_database_refuses_a_worker_login_an_auditor_and_a_read_only_session(db, conn, logins):
    seed(conn, queued=3)
    op = started(conn)
    with as_login(db, WORKER) as w:
        for statement in (lambda: _create_as(w),
                          lambda: run(w, "bulk/next_batch", operation_id=op.id, batch_size=5),
                          lambda: run(w, "bulk/stop", operation_id=op.id, operator="w", reason="x"),
                          lambda: w.execute("select * from bulk_operations")):
            with pytest.raises((psycopg.errors.InsufficientPrivilege, PermissionDenied)):
                statement()
    with as_login(db, AUDITOR) as a:
        assert len(bulk.operations(a)) == 1, "the auditor reads them"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _create_as(a)
        with pytest.raises(PermissionDenied):
            bulk.stop(a, op.id, operator="aud", reason="x")
        with pytest.raises(PermissionDenied):
            bulk.work(a, op.id, worker="aud")
    # an operator login on a read-only session (the console's --read-only): refused by the database
    with connect(make_conninfo(db.dsn, user=OPERATOR), read_only=True) as ro, pytest.raises(ReadOnlySession):
        bulk.stop(ro, op.id, operator="ro", reason="x")
    refused = cli(db, "--read-only", "bulk", "stop", str(op.id), "--reason", "x")
    assert refused.exit_code != 0 and "read-only" in refused.output
    assert operation_row(conn, op.id)["state"] == "running" and operation_row(conn, op.id)["done"] == 0
    assert fleet_journal(conn, op.id) == ["bulk_started"]


def test_an_operator_login_starts_works_and_stops_and_the_database_records_its_login(db, conn, logins):
    seed(conn, queued=60)
    with as_login(db, OPERATOR) as o:
        op = started(o)
        assert op.db_role == OPERATOR
        worked = bulk.work(o, op.id, worker="op", batch_size=25, deadline=time.monotonic() + 60)
        assert worked.state == "finished" and worked.applied == 60
    assert {r["db_role"] for r in conn.execute("select db_role from job_events where details ->> 'batch_id' = %s",
                                               (str(op.id),))} == {OPERATOR}
    assert conn.execute("select db_role from fleet_events where kind = 'bulk_started'").fetchone()["db_role"] == OPERATOR


def test_the_control_plane_works_an_operators_operation_and_nothing_else(db, conn, logins):
    """leasectl_supervisor may run the guarded statements only to carry out a running operation an
    operator started, for a call frozen in it, under the very state and token frozen for it."""
    seed(conn, queued=40, running=2)
    with as_login(db, OPERATOR) as o:
        op = started(o, "tool:search state:queued", background=True)
    other = conn.execute("select * from tool_jobs where state = 'running' order by id limit 1").fetchone()
    with as_login(db, CONTROL) as sv:
        # outside any operation: refused, nothing journaled
        with pytest.raises(PermissionDenied):
            run_one(sv, "operator/request_cancel", job_id=other["id"], seen_state="running",
                    seen_token=other["fencing_token"], operator="dana", reason="incident 42")
        # under the operation's batch id, but a call that is not in it, or another state than frozen
        frozen = conn.execute("select * from bulk_operation_calls where operation_id = %s order by ordinal limit 1",
                              (op.id,)).fetchone()
        for job_id, state, token in ((other["id"], "running", other["fencing_token"]),
                                     (frozen["job_id"], "running", 1)):
            with pytest.raises(PermissionDenied), sv.transaction():
                run(sv, "meta/batch_id", batch_id=str(op.id))
                run_one(sv, "operator/request_cancel", job_id=job_id, seen_state=state, seen_token=token,
                        operator="dana", reason="incident 42")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _create_as(sv)
        with pytest.raises(PermissionDenied):
            bulk.stop(sv, op.id, operator="sv", reason="x")
        report = supervisor.tick(sv, supervisor_id="sv-login", sweep=False)
        assert not report.failures, report.failures
    assert job(conn, other["id"])["state"] == "running"
    done = assert_exactly_once(conn, op.id, 40)
    assert done["worked_by"] == "sv-login" and done["db_role"] == OPERATOR
    rows = conn.execute("select distinct actor, db_role from job_events where details ->> 'batch_id' = %s",
                        (str(op.id),)).fetchall()
    assert [(r["actor"], r["db_role"]) for r in rows] == [("dana", CONTROL)], "the operator's name, the login's role"


def test_a_worker_login_cannot_start_work_or_stop_through_the_cli(db, conn, logins):
    seed(conn, queued=3)
    op = started(conn)
    dsn = make_conninfo(db.dsn, user=WORKER)
    for args in (("bulk", "stop", str(op.id), "--reason", "x"), ("bulk", "resume", str(op.id)),
                 ("cancel", "--where", "tool:search", "--reason", "x", "--background", "--yes")):
        result = cli(db, *args, dsn=dsn)
        assert result.exit_code == 1 and "permission denied" in result.output, (args, result.output)
    assert conn.execute("select count(*) as n from bulk_operations").fetchone()["n"] == 1
    assert operation_row(conn, op.id)["done"] == 0


def test_a_call_is_acted_on_and_settled_only_inside_the_batch_that_took_it(db, conn, logins):
    """The control plane cannot act on a frozen call beside a batch (no leasectl_bulk_next in its
    transaction), nor settle a call it did not take and send, nor settle one after a stop: each
    would make the operation's record say what no statement did."""
    seed(conn, queued=6)
    with as_login(db, OPERATOR) as o:
        op = started(o, "tool:search", background=True)
    frozen = conn.execute("select * from bulk_operation_calls where operation_id = %s order by ordinal",
                          (op.id,)).fetchall()
    with as_login(db, CONTROL) as sv:
        # acting beside a batch: the batch id, the frozen state and token, but no call taken
        with pytest.raises(PermissionDenied), sv.transaction():
            run(sv, "meta/batch_id", batch_id=str(op.id))
            run_one(sv, "operator/request_cancel", job_id=frozen[0]["job_id"], seen_state="queued",
                    seen_token=frozen[0]["seen_token"], operator=op.operator, reason=op.reason)
        # settling what was not taken (nothing sent): refused, nothing recorded
        with pytest.raises(LeasectlError, match="taken by this transaction"), sv.transaction():
            run_one(sv, "bulk/settle_call", operation_id=op.id, job_id=frozen[1]["job_id"], error="whatever",
                    worker="sv")
        # taken but not sent: settling it without its journal row or an error is refused too
        with pytest.raises(LeasectlError, match="was not sent in this transaction"), sv.transaction():
            run(sv, "meta/batch_id", batch_id=str(op.id))
            taken = run(sv, "bulk/next_batch", operation_id=op.id, batch_size=1)
            run_one(sv, "bulk/settle_call", operation_id=op.id, job_id=taken[0]["job_id"], error=None, worker="sv")
    assert conn.execute("select count(*) as n from tool_jobs where state = 'queued'").fetchone()["n"] == 6
    assert conn.execute("select count(*) as n from bulk_operation_calls where operation_id = %s and outcome is not "
                        "null", (op.id,)).fetchone()["n"] == 0
    stopped, _ = bulk.stop(conn, op.id, operator="ana", reason="wrong filter")
    assert bulk.close(conn, op.id, worker="t").state == "stopped"
    with pytest.raises(LeasectlError, match="being worked"), conn.transaction():
        run_one(conn, "bulk/settle_call", operation_id=op.id, job_id=frozen[2]["job_id"], error="late", worker="t")
    assert operation_row(conn, op.id)["done"] == 0, "nothing settled once it says stopped"


@pytest.mark.parametrize("action, choices", [
    ("mark_terminal", "{}"),
    ("mark_terminal", '{"terminal_state": "failed"}'),
    ("mark_terminal", '{"terminal_state": "running", "force": false}'),
    ("mark_terminal", '{"terminal_state": "failed", "force": null}'),
    ("cancel", '{"force": true}'),
    ("approve_retry", '{"terminal_state": "failed"}'),
])
def test_an_operation_carries_its_actions_choices_whole(db, conn, action, choices):
    """The choices are the operator's, whole: none is left for whoever carries the operation out
    to pick (the journal's check holds the control plane's statements to them)."""
    seed(conn, queued=1)
    call = conn.execute("select id, state, fencing_token from tool_jobs").fetchone()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="are not those of"):
        conn.execute("select * from leasectl_bulk_create(%s, null, %s::jsonb, 'dana', 'because', true, "
                     "array[%s::uuid], array[%s], array[%s::bigint], '{}', '{}', '{}', '{}')",
                     (action, choices, call["id"], call["state"], call["fencing_token"]))
    assert conn.execute("select count(*) as n from bulk_operations").fetchone()["n"] == 0
