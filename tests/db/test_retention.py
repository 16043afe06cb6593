"""History over years (issue 29): job_events partitioned by month (migration 0021), partitions kept
ahead, and `leasectl admin retention`, which archives, verifies, then drops, and leaves either the
month or a verified archive of it whatever instant it is killed at."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from console.control.supervisor import tick
from console.db import retention as retention_db
from console.db.connect import connect, run_one
from console.db.migrate import migrate
from console.operator.archive import ArchiveDir, events_in
from tests import helpers as h
from tests.db.history import months_ago, seed_month

LOGINS = {"lc_ret_operator": "leasectl_operator"}
ARCHIVE_COLUMNS = ("id", "job_id", "at", "kind", "actor", "fencing_token", "state_from", "state_to", "owner_from",
                   "owner_to", "lease_until", "details", "reason", "request_id", "db_role")


def partitions(conn) -> dict[str, str]:
    return {r["name"]: r["bound"] for r in conn.execute(
        "select c.relname as name, pg_get_expr(c.relpartbound, c.oid) as bound from pg_inherits i "
        "join pg_class c on c.oid = i.inhrelid where i.inhparent = 'job_events'::regclass")}


def part_name(month) -> str:
    return f"job_events_{month:%Y_%m}"


def month_rows(conn, month) -> list[dict]:
    return conn.execute(f"select * from {part_name(month)} order by id").fetchall()


def metric_totals(conn) -> list[dict]:
    return conn.execute("select * from leasectl_metric_totals order by 1, 2, 3").fetchall()


@pytest.fixture
def history(db, conn):
    """Two past months of calls (three and two months ago), and a call of today."""
    old, older = months_ago(2), months_ago(3)
    seed_month(conn, older, 40, start=0)
    seed_month(conn, old, 30, start=40)
    h.register_tool(conn, "search", "read_only")
    today = h.enqueue(conn, "search")
    last = conn.execute("select max(id) as id from job_events").fetchone()["id"]
    assert retention_db.fold_through(conn, last) >= last, "a transaction elsewhere held the rollup back for 30 s"
    return older, old, today


def test_the_rollup_waits_for_a_transaction_elsewhere_on_the_server(db, conn, history):
    """xids are the server's: a transaction open in another database (a backup, another
    application, another test) holds the fold's watermark back; retention waits for it to end
    instead of giving up after a second (CI on a shared PostgreSQL 15 did)."""
    h.enqueue(conn, "search")
    last = conn.execute("select max(id) as id from job_events").fetchone()["id"]
    elsewhere = psycopg.connect(make_conninfo(db.dsn, dbname="postgres"), autocommit=False)
    elsewhere.execute("select pg_current_xact_id()")
    run_one(conn, "metrics/fold", lag_seconds=0)  # the watermark, taken while that one is open
    timer = threading.Timer(2.5, elsewhere.rollback)
    timer.start()
    try:
        started = time.monotonic()
        assert retention_db.fold_through(conn, last) >= last
        assert time.monotonic() - started >= 2.0, "the fold could not pass a watermark an open transaction held"
    finally:
        timer.join()
        elsewhere.close()


def retention(db, archive: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "USER": "retention-tester"}
    env.pop("LEASECTL_FAULT", None)
    if fault:
        env["LEASECTL_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "console", "admin", "retention", "--keep", "1d", "--archive",
                           str(archive), "--yes", "--dsn", db.dsn, *args], capture_output=True, text=True, env=env,
                          timeout=120)


# ----------------------------------------------------------------------------- the partitioned table


def test_partitions_exist_for_this_month_and_two_ahead_and_the_supervisor_recreates_one(db, conn):
    names = set(partitions(conn))
    assert {part_name(months_ago(n)) for n in (0, -1, -2)} | {"job_events_default"} <= names
    conn.execute(f"drop table {part_name(months_ago(-2))}")  # as the owner: gone
    report = tick(conn, supervisor_id="sv-test")
    assert part_name(months_ago(-2)) in partitions(conn), report
    assert any("partition" in n for n in report.notes)
    # an event of today lands in this month's partition, never in the default one
    h.register_tool(conn, "search", "read_only")
    call = h.enqueue(conn, "search")
    where = conn.execute("select tableoid::regclass::text as p from job_events where job_id = %s",
                         (call["id"],)).fetchone()["p"]
    assert where == part_name(months_ago(0))


def test_a_row_whose_month_had_no_partition_is_moved_into_it_when_the_partition_comes(db, conn):
    far = months_ago(-5)
    conn.execute("set session_replication_role = replica")  # exact mode: a row dated in that month
    conn.execute("insert into job_events (job_id, at, kind, actor) overriding system value "
                 "select gen_random_uuid(), %s::timestamptz + interval '3 days', 'note', 'test'", (far,))
    conn.execute("set session_replication_role = origin")
    assert conn.execute("select count(*) as n from job_events_default").fetchone()["n"] == 1
    assert run_one(conn, "admin/create_event_partition", month=far)["created"] is True
    assert conn.execute("select count(*) as n from job_events_default").fetchone()["n"] == 0
    assert conn.execute(f"select count(*) as n from {part_name(far)}").fetchone()["n"] == 1
    # and the moved partition is append-only like every other
    with pytest.raises(psycopg.Error) as refused:
        conn.execute(f"delete from {part_name(far)}")
    assert refused.value.sqlstate == "LCH01"


@pytest.mark.parametrize("statement", ["update job_events set actor = 'x'", "delete from job_events",
                                       "truncate job_events", "truncate {part}", "delete from {part}",
                                       "update {part} set actor = 'x'", "truncate job_events_default"])
def test_the_history_stays_append_only_on_the_table_and_every_partition(db, conn, statement):
    h.register_tool(conn, "search", "read_only")
    h.enqueue(conn, "search")
    with pytest.raises(psycopg.Error) as refused:
        conn.execute(statement.format(part=part_name(months_ago(0))))  # as the owner
    assert refused.value.sqlstate == "LCH01"


def test_no_login_reaches_a_partition_directly(db, conn, logins):
    for role in ("leasectl_worker", "leasectl_operator", "leasectl_auditor"):
        assert not conn.execute("select has_table_privilege(%s, %s, 'select') as may",
                                (role, part_name(months_ago(0)))).fetchone()["may"]
        assert conn.execute("select has_table_privilege(%s, 'job_events', 'select') as may",
                            (role,)).fetchone()["may"]


# ----------------------------------------------------------------------------- retention


def test_retention_archives_verifies_drops_and_the_counters_survive(db, conn, history, tmp_path):
    older, old, today = history
    kept = {m: month_rows(conn, m) for m in (older, old)}
    totals = metric_totals(conn)
    assert totals, "the rollup counted the seeded months"
    proc = retention(db, tmp_path, "--reason", "90 days online")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # both months: a file holding exactly their rows, in id order, and a manifest entry with its sha256
    manifest = ArchiveDir.for_reading(str(tmp_path)).manifest()
    assert sorted(manifest) == [f"{older:%Y-%m}", f"{old:%Y-%m}"]
    for month, rows in kept.items():
        entry = manifest[f"{month:%Y-%m}"]
        archived = list(events_in(tmp_path / entry.file))
        assert [e["id"] for e in archived] == [r["id"] for r in rows]
        assert (entry.rows, entry.first_id, entry.last_id) == (len(rows), rows[0]["id"], rows[-1]["id"])
        assert archived[0].keys() == set(ARCHIVE_COLUMNS)
        assert archived[0]["job_id"] == str(rows[0]["job_id"]) and archived[0]["kind"] == rows[0]["kind"]
        with gzip.open(tmp_path / entry.file, "rb") as raw:
            assert raw.read(1)
        assert part_name(month) not in partitions(conn), "dropped"
    # registered, journaled under the operator's name, counters unchanged, today's call untouched
    register = conn.execute("select * from job_events_archive order by month").fetchall()
    assert [r["month"] for r in register] == [older, old]
    assert [r["sha256"] for r in register] == [manifest[f"{m:%Y-%m}"].sha256 for m in (older, old)]
    journal = conn.execute("select * from fleet_events where kind = 'history_archived' order by id").fetchall()
    assert [(j["actor"], j["reason"], j["details"]["month"]) for j in journal] == [
        ("retention-tester", "90 days online", f"{older:%Y-%m}"), ("retention-tester", "90 days online", f"{old:%Y-%m}")]
    assert metric_totals(conn) == totals
    listed = h.js(h.cli_invoker(db.dsn, "auditor")("audit", "actions", "--action", "retention", "--json"))
    assert [(a["operator"], a["action"], a["outcome"], a["details"]["month"]) for a in listed] == [
        ("retention-tester", "retention", "applied", f"{old:%Y-%m}"),
        ("retention-tester", "retention", "applied", f"{older:%Y-%m}")], "the operator journal, newest first"
    assert conn.execute("select leasectl_archived_before() as b").fetchone()["b"] == register[-1]["range_to"]
    assert h.kinds(conn, today["id"]) == ["enqueued"]
    # run again: nothing older is left, nothing is written
    again = retention(db, tmp_path)
    assert again.returncode == 0 and "nothing to archive" in again.stderr


@pytest.mark.parametrize("point", ["before_write", "written", "verified", "detached", "dropped"])
def test_killed_at_any_step_leaves_the_month_or_its_verified_archive_and_a_rerun_finishes(db, conn, history,
                                                                                         tmp_path, point):
    older, old, _ = history
    kept = {m: [r["id"] for r in month_rows(conn, m)] for m in (older, old)}
    killed = retention(db, tmp_path, fault=f"retention:{point}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr + killed.stdout
    for month, ids in kept.items():  # never neither
        online = part_name(month) in partitions(conn)
        manifest = ArchiveDir.for_reading(str(tmp_path)).manifest() if tmp_path.exists() else {}
        entry = manifest.get(f"{month:%Y-%m}")
        if online:
            assert [r["id"] for r in month_rows(conn, month)] == ids, "the month is whole in the database"
        else:
            assert entry is not None, f"{month} dropped without a manifest entry ({point})"
            assert [e["id"] for e in events_in(tmp_path / entry.file)] == ids
            assert conn.execute("select 1 from job_events_archive where month = %s", (month,)).fetchone()
    # no temporary file is taken for an archive
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("job_events-") and not p.name.endswith(".gz")]
    done = retention(db, tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    manifest = ArchiveDir.for_reading(str(tmp_path)).manifest()
    for month, ids in kept.items():
        assert part_name(month) not in partitions(conn)
        assert [e["id"] for e in events_in(tmp_path / manifest[f"{month:%Y-%m}"].file)] == ids
    assert conn.execute("select count(*) as n from job_events_archive").fetchone()["n"] == 2
    assert conn.execute("select count(*) as n from fleet_events where kind = 'history_archived'").fetchone()["n"] == 2


def test_a_file_that_no_longer_matches_is_written_again_not_trusted(db, conn, history, tmp_path):
    older, _, _ = history
    killed = retention(db, tmp_path, fault="retention:verified")  # the older month written and verified
    assert killed.returncode == -signal.SIGKILL
    name = tmp_path / f"job_events-{older:%Y-%m}.jsonl.gz"
    with gzip.open(name, "wt") as broken:
        broken.write('{"id": 1}\n')
    done = retention(db, tmp_path)
    assert done.returncode == 0, done.stderr
    entry = ArchiveDir.for_reading(str(tmp_path)).manifest()[f"{older:%Y-%m}"]
    assert entry.rows == 40 * 10 and len(list(events_in(name))) == entry.rows


def test_only_the_schema_owner_may_and_a_refusal_writes_nothing(db, conn, history, tmp_path, logins):
    operator_dsn = make_conninfo(db.dsn, user="lc_ret_operator")
    archive = tmp_path / "a"
    proc = subprocess.run([sys.executable, "-m", "console", "admin", "retention", "--keep", "1d", "--archive",
                           str(archive), "--yes", "--dsn", operator_dsn], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "schema owner" in proc.stderr and "Traceback" not in proc.stderr
    assert not archive.exists() or not any(archive.iterdir())
    assert conn.execute("select count(*) as n from job_events_archive").fetchone()["n"] == 0


def test_without_yes_and_no_terminal_nothing_changes(db, conn, history, tmp_path):
    invoke = h.cli_invoker(db.dsn, "retention-tester")
    result = invoke("admin", "retention", "--keep", "1d", "--archive", str(tmp_path), input="")
    assert result.exit_code == 2, result.output
    assert "not confirmed" in result.output
    assert not list(tmp_path.iterdir())
    assert len(partitions(conn)) == 6


def test_bad_input_is_refused_before_anything_is_read(db, tmp_path):
    invoke = h.cli_invoker(db.dsn, "retention-tester")
    assert invoke("admin", "retention", "--keep", "soon", "--archive", str(tmp_path), "--yes").exit_code == 2
    afile = tmp_path / "f"
    afile.write_text("x")
    result = invoke("admin", "retention", "--keep", "30d", "--archive", str(afile), "--yes")
    assert result.exit_code == 2 and "not a directory" in result.output


def test_json_report(db, conn, history, tmp_path):
    proc = retention(db, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [m["outcome"] for m in report["months"]] == ["archived", "archived"]
    assert datetime.fromisoformat(report["archived_before"]) == datetime(*months_ago(1).timetuple()[:3], tzinfo=UTC)


def test_a_database_of_the_previous_schema_keeps_every_event_in_order_when_partitioned(empty_db):
    """The conversion (0021) on a populated history: every row with its id, in id order, in its
    month's partition; the identity goes on above the last id; the journal still writes."""
    with connect(empty_db.dsn) as conn:
        migrate(conn, target=20)
        seed_month(conn, months_ago(4), 20, start=0, partition=False)  # before 0021 these land in the one table
        h.register_tool(conn, "search", "read_only")
        live = h.enqueue(conn, "search")
        before = conn.execute("select * from job_events order by id").fetchall()
        migrate(conn)
        after = conn.execute("select * from job_events order by id").fetchall()
        assert after == before
        physical = conn.execute("select id from job_events").fetchall()  # partitions in month order
        assert [r["id"] for r in physical] == [r["id"] for r in before]
        assert conn.execute(f"select count(*) as n from {part_name(months_ago(4))}").fetchone()["n"] == 200
        assert conn.execute("select count(*) as n from job_events_default").fetchone()["n"] == 0
        claimed = h.claim(conn, "w-1", ["search"])
        assert claimed["id"] == live["id"]
        newest = conn.execute("select max(id) as m from job_events").fetchone()["m"]
        assert newest > before[-1]["id"]
        # the operator journal's function, whose signature names the row type, came along
        assert h.cancel(conn, live["id"], "running", claimed["fencing_token"], operator="alice") is not None
