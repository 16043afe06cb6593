"""The audit once months of history were archived (issue 29; console/core/history.py): an answer
that rests on archived events is refused and says "archived" (never given from the part that is
left), `archived_before` is in the JSON, a range with no start says it covers the online history
only, `jobs --at` refuses an instant whose calls rest on archived events, and `audit verify`
replays across the archive with --archive DIR, finds a tampered archive (exit 4), and without it
reports no false violation for the calls whose history begins in the archive.

The history: ten calls of the audit benchmark's shapes (queries/audit/bench_seed_*.sql, ten events
each over 100 s, clean for verify), 25 s apart, around the end of a month three months back: calls
1-3 end before the month does, 4-7 begin in it and end in the next, 8-10 begin in the next. The
month is then archived as retention does it (the file and its manifest by console/operator/archive.py,
the drop by leasectl_archive_month): archived_before is the first instant of the next month."""

from __future__ import annotations

import gzip
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

from console.db import audit as audit_db
from console.db import retention as retention_db
from console.db.connect import Conn, run
from console.operator.archive import ArchiveDir, MonthEntry, file_name, month_text
from tests import helpers as h
from tests.db.history import STEP, TOOL, months_ago, seed_calls

AUDITOR = "lc_archived_auditor"
LOGINS = {AUDITOR: "leasectl_auditor"}
OWNER_KEYS = ["job_id", "at", "owner_id", "fencing_token", "held_from", "held_until", "ended_by", "archived_before"]
CALLS = 10
BEFORE = 177  # the first call starts BEFORE - STEP seconds before the month ends


def at_midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class History:
    month: date  # the archived month
    boundary: datetime  # archived_before: where the online history begins
    calls: list[uuid.UUID]  # call g at index g - 1
    archive: Path
    rows: int  # events archived

    def t0(self, g: int) -> datetime:
        """When call g was enqueued."""
        return self.boundary - timedelta(seconds=BEFORE) + timedelta(seconds=STEP * g)


def seed(conn: Conn) -> tuple[date, datetime, list[uuid.UUID]]:
    """The ten calls around the end of the month three months back, in exact mode, after both
    months' partitions were created (so that no row lands in the default partition)."""
    month, following = months_ago(3), months_ago(2)
    boundary = at_midnight(following)
    run(conn, "admin/register_tool", **TOOL)
    seed_calls(conn, CALLS, boundary - timedelta(seconds=BEFORE), months=(month, following))
    calls = [r["id"] for r in conn.execute("select md5('audit-bench:' || g)::uuid as id "
                                           "from generate_series(1, %s) g order by g", (CALLS,))]
    return month, boundary, calls


def archive_month(conn: Conn, month: date, directory: Path) -> int:
    """What `leasectl admin retention` does for one month: the file written and read back, its
    manifest entry, the metric rollup brought past it, then the drop and the register. Returns the
    rows archived."""
    archive = ArchiveDir.for_writing(str(directory))
    month_from = at_midnight(month)
    month_to = at_midnight((month_from + timedelta(days=32)).date().replace(day=1))
    with archive.month_writer(month) as handle:
        audit_db.export(conn, handle, fmt="jsonl", since=month_from, until=month_to - timedelta(microseconds=1))
    facts = archive.read_back(file_name(month), month_from, month_to)
    assert facts.problem is None and facts.rows, facts
    archive.record(MonthEntry(month=month_text(month), file=file_name(month), rows=facts.rows,
                              first_id=facts.first_id, last_id=facts.last_id, sha256=facts.sha256,
                              range_from=iso(month_from), range_to=iso(month_to), written_at=iso(datetime.now(UTC))))
    assert retention_db.fold_through(conn, facts.last_id) >= facts.last_id
    conn.execute("select * from leasectl_archive_month(%s, %s, %s, %s, %s, %s, 'auditor-tester', 'test')",
                 (month, facts.rows, facts.first_id, facts.last_id, facts.sha256, file_name(month)))
    return facts.rows


def archived_history(conn: Conn, directory: Path) -> History:
    month, boundary, calls = seed(conn)
    rows = archive_month(conn, month, directory)
    return History(month=month, boundary=boundary, calls=calls, archive=directory, rows=rows)


@pytest.fixture
def cli(db, conn):
    return h.cli_invoker(db.dsn, "auditor-tester"), conn


@pytest.fixture
def archived(cli, tmp_path):
    invoke, conn = cli
    return invoke, conn, archived_history(conn, tmp_path / "archive")


def refusal(result) -> dict:
    """A refusal for archived history: exit 1, a JSON object on stdout, the message on stderr."""
    assert result.exit_code == 1, result.output
    answer = json.loads(result.stdout)
    assert answer["archived"] is True and answer["error"].startswith("archived:"), answer
    assert "archived" in result.stderr
    return answer


# ----------------------------------------------------------------------------- audit owner


def test_owner_at_an_archived_instant_says_archived_and_json_carries_archived_before(cli, tmp_path):
    invoke, conn = cli
    month, boundary, calls = seed(conn)
    nine = str(calls[8])
    claimed = conn.execute("select at from job_events where job_id = %s and kind = 'claimed' order by id limit 1",
                           (calls[8],)).fetchone()["at"]
    before = h.js(invoke("audit", "owner", nine, "--at", iso(claimed), "--json"))
    assert list(before) == OWNER_KEYS and before["archived_before"] is None, "nothing archived yet: null"
    archive_month(conn, month, tmp_path)

    after = h.js(invoke("audit", "owner", nine, "--at", iso(claimed), "--json"))
    assert list(after) == OWNER_KEYS, "the contract's keys, then archived_before, in every answer"
    assert after["archived_before"] == iso(boundary)
    assert {k: v for k, v in after.items() if k != "archived_before"} == \
        {k: v for k, v in before.items() if k != "archived_before"}, "a whole online history answers as before"

    # a call whose events are all archived, at an instant of its life
    two = calls[1]
    t = boundary - timedelta(seconds=BEFORE - STEP * 2 - 30)
    answer = refusal(invoke("audit", "owner", str(two), "--at", iso(t), "--json"))
    assert answer["job_id"] == str(two) and answer["at"] == iso(t)
    assert answer["archived_before"] == iso(boundary)
    assert "owner_id" not in answer, "no owner said, not even 'nobody'"
    human = invoke("audit", "owner", str(two)[:8], "--at", iso(t))
    assert human.exit_code == 1 and "ARCHIVED" in human.stdout and iso(boundary) in human.stdout
    assert "nobody" not in human.output

    # a call whose first events are archived: archived at any instant, even one after archived_before
    five = calls[4]
    later = boundary + timedelta(seconds=10)
    answer = refusal(invoke("audit", "owner", str(five), "--at", iso(later), "--json"))
    assert answer["archived_before"] == iso(boundary) and "the history of call" in answer["error"]
    assert "job_events-" in answer["error"], "the archive is named"

    # a call created after archived_before, asked about an instant before it: it did not exist yet
    early = h.js(invoke("audit", "owner", nine, "--at", iso(boundary - timedelta(days=3)), "--json"))
    assert early["owner_id"] is None and early["archived_before"] == iso(boundary)


# ----------------------------------------------------------------------------- ranges


def test_actions_export_and_jobs_at_refuse_a_range_before_archived_before(archived, tmp_path):
    invoke, conn, hist = archived
    inside = at_midnight(hist.month) + timedelta(days=5)
    for args in (("audit", "actions", "--since", iso(inside), "--json"),
                 ("audit", "actions", "--until", iso(inside), "--json"),
                 ("jobs", "--at", iso(inside), "--json")):
        answer = refusal(invoke(*args))
        assert answer["archived_before"] == iso(hist.boundary), args
        assert iso(hist.boundary) in answer["error"] and "job_events_archive" in answer["error"], args
    target = tmp_path / "out.jsonl"
    export = invoke("audit", "export", "--since", iso(inside), "--output", str(target))
    assert export.exit_code == 1 and iso(hist.boundary) in export.stderr and "archived" in export.stderr
    assert not target.exists() and not list(tmp_path.glob(".*partial")), "nothing written"
    human = invoke("audit", "actions", "--since", iso(inside))
    assert human.exit_code == 1 and "archived" in human.stderr and iso(hist.boundary) in human.stderr

    # one call's range: refused for a call whose history begins in the archive, not for a whole one
    refusal_five = invoke("audit", "export", "--job", str(hist.calls[4]), "--since", iso(inside))
    assert refusal_five.exit_code == 1 and "archived" in refusal_five.stderr
    nine = invoke("audit", "export", "--job", str(hist.calls[8]), "--since", iso(inside))
    assert nine.exit_code == 0 and len(nine.stdout.splitlines()) == 10, "call 9's whole history is online"

    # from archived_before on: answered, and whole
    after = invoke("audit", "export", "--since", iso(hist.boundary))
    assert after.exit_code == 0 and "online history begins" not in after.stderr
    online = conn.execute("select count(*) as n from job_events").fetchone()["n"]
    assert len(after.stdout.splitlines()) == online


def test_no_start_answers_from_archived_before_and_says_so(archived):
    invoke, conn, hist = archived
    actions = invoke("audit", "actions", "--json")
    assert actions.exit_code == 0 and isinstance(json.loads(actions.stdout), list), "the JSON keeps its shape"
    assert "online history begins" in actions.stderr and "archived" in actions.stderr
    export = invoke("audit", "export")
    assert export.exit_code == 0 and "online history begins" in export.stderr
    assert len(export.stdout.splitlines()) == conn.execute("select count(*) as n from job_events").fetchone()["n"]


def test_jobs_at_refuses_while_a_call_alive_then_began_before_and_leaves_out_the_finished_ones(archived):
    invoke, _conn, hist = archived
    # calls 4-7 began before archived_before; call 7 ends at t0 + 100 s
    alive = hist.boundary + timedelta(seconds=10)
    answer = refusal(invoke("jobs", "--at", iso(alive), "--json"))
    assert "was alive at" in answer["error"] and answer["archived_before"] == iso(hist.boundary)
    assert any(str(c)[:8] in answer["error"] for c in hist.calls[3:7])
    table = invoke("jobs", "--at", iso(alive))
    assert table.exit_code == 1 and "was alive at" in table.stderr

    done = hist.t0(7) + timedelta(seconds=101)  # every call created before archived_before has finished
    listed = h.js(invoke("jobs", "--at", iso(done), "--json"))
    assert sorted(c["id"] for c in listed) == sorted(str(c) for c in hist.calls[7:]), \
        "only the calls created from archived_before on: the others' histories are archived"
    assert all(c["state"] in ("running", "succeeded", "failed", "cancelled", "queued") for c in listed)
    said = invoke("jobs", "--at", iso(done))
    assert said.exit_code == 0 and "are not listed" in said.stderr and "archived" in said.stderr


# ----------------------------------------------------------------------------- verify


def test_verify_without_the_archive_reports_no_false_violation_and_counts_what_it_did_not_replay(archived):
    invoke, conn, hist = archived
    # the history as built: calls 1-3 all archived, 4-7 their first events, 8-10 whole online
    assert conn.execute("select leasectl_archived_before() as b").fetchone()["b"] == hist.boundary
    online = {r["job_id"]: r["n"] for r in conn.execute("select job_id, count(*) as n from job_events group by 1")}
    assert all(c not in online for c in hist.calls[:3])
    assert all(0 < online[c] < 10 for c in hist.calls[3:7]) and all(online[c] == 10 for c in hist.calls[7:])
    assert hist.rows == 30 + sum(10 - online[c] for c in hist.calls[3:7])

    report = h.js(invoke("audit", "verify", "--json"))
    assert report["ok"] is True and report["violations"] == []
    assert report["calls_not_replayed"] == 7, "calls 1-3 (all archived) and 4-7 (begin in the archive)"
    assert report["calls"] == 3 and report["archived_before"] == iso(hist.boundary)
    assert report["archive"] is None and report["archive_months_checked"] == [] and report["archived_events"] == 0
    assert report["events"] == conn.execute("select count(*) as n from job_events").fetchone()["n"]
    human = invoke("audit", "verify")
    assert human.exit_code == 0 and "7 calls not replayed" in human.stdout and "--archive DIR" in human.stdout
    since = invoke("audit", "verify", "--since", iso(at_midnight(hist.month)), "--json")
    assert refusal(since)["archived_before"] == iso(hist.boundary) and "--archive DIR" in since.stderr


def test_a_broken_history_after_archived_before_is_still_a_violation(archived):
    """The archive excuses only a call created before the online history begins: a call created
    after it whose enqueued event is gone is a history that breaks the rules, as before."""
    invoke, conn, hist = archived
    e = h.enqueue(conn, "bench_audit")
    conn.execute("alter table job_events disable trigger user")
    try:
        conn.execute("delete from job_events where job_id = %s and kind = 'enqueued'", (e["id"],))
    finally:
        conn.execute("alter table job_events enable trigger user")
    result = invoke("audit", "verify", "--json")
    assert result.exit_code == 4, result.output
    report = json.loads(result.stdout)
    assert {v["job_id"] for v in report["violations"]} == {str(e["id"])} and report["calls_not_replayed"] == 7


def test_verify_with_the_archive_replays_every_call_and_finds_it_clean(archived):
    invoke, conn, hist = archived
    report = h.js(invoke("audit", "verify", "--archive", str(hist.archive), "--json"))
    assert report["ok"] is True and report["violations"] == [] and report["archive_violations"] == []
    assert report["calls"] == CALLS and report["calls_not_replayed"] == 0
    assert report["archive_months_checked"] == [month_text(hist.month)] and report["archive"] == str(hist.archive)
    assert report["archived_events"] == hist.rows and report["archived_before"] == iso(hist.boundary)
    human = invoke("audit", "verify", "--archive", str(hist.archive))
    assert human.exit_code == 0 and "every check holds" in human.stdout
    assert f"{hist.rows} archived events" in human.stdout
    # --since reaching into the archive is answered with it
    since = h.js(invoke("audit", "verify", "--archive", str(hist.archive), "--since",
                        iso(hist.t0(1) + timedelta(seconds=101)), "--json"))
    assert since["ok"] is True and since["calls"] == CALLS - 1, "call 1 ended before --since"


def _rewrite(path: Path, change) -> None:
    lines = gzip.decompress(path.read_bytes()).decode().splitlines(keepends=True)
    with gzip.GzipFile(filename="", mode="wb", fileobj=path.open("wb"), mtime=0) as out:
        out.write("".join(change(lines)).encode())


def _tamper(lines: list[str]) -> list[str]:
    """An owner rewritten in one claim: the rows and ids stay as they were."""
    i = next(n for n, line in enumerate(lines) if '"kind" : "claimed"' in line or '"kind": "claimed"' in line)
    event = json.loads(lines[i])
    event["owner_to"] = "w-forged"
    return [*lines[:i], json.dumps(event) + "\n", *lines[i + 1:]]


def _violations(result) -> list[dict]:
    assert result.exit_code == 4, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False
    return report["archive_violations"]


def test_verify_finds_a_file_whose_sha256_no_longer_matches_its_manifest(archived):
    invoke, _conn, hist = archived
    _rewrite(hist.archive / file_name(hist.month), _tamper)
    result = invoke("audit", "verify", "--archive", str(hist.archive), "--json")
    found = _violations(result)
    assert [v["rule"] for v in found] == ["sha256_mismatch"] and found[0]["month"] == month_text(hist.month)
    report = json.loads(result.stdout)
    assert report["calls_not_replayed"] == 7 and report["violations"] == [], "a tampered archive is not replayed"
    human = invoke("audit", "verify", "--archive", str(hist.archive))
    assert human.exit_code == 4 and "sha256_mismatch" in human.stdout


def test_verify_finds_a_manifest_edited_to_match_a_tampered_file(archived):
    invoke, _conn, hist = archived
    path = hist.archive / file_name(hist.month)
    _rewrite(path, _tamper)
    archive = ArchiveDir.for_reading(str(hist.archive))
    entry = archive.manifest()[month_text(hist.month)]
    archive.record(MonthEntry(**{**entry.record(), "sha256": archive.read_back(path.name).sha256}))
    found = _violations(invoke("audit", "verify", "--archive", str(hist.archive), "--json"))
    assert [v["rule"] for v in found] == ["manifest_disagrees"], "the database's registered sha256 catches it"


def test_verify_finds_a_missing_file_a_missing_entry_and_rows_that_are_not_the_manifests(archived):
    invoke, _conn, hist = archived
    path = hist.archive / file_name(hist.month)
    kept = path.read_bytes()
    path.unlink()
    assert [v["rule"] for v in _violations(invoke("audit", "verify", "--archive", str(hist.archive), "--json"))] \
        == ["file_missing"]
    path.write_bytes(kept)
    _rewrite(path, lambda lines: lines[:-1])  # the last row dropped, manifest and registry left as they were
    rules = [v["rule"] for v in _violations(invoke("audit", "verify", "--archive", str(hist.archive), "--json"))]
    assert rules == ["sha256_mismatch", "content_mismatch"]
    path.write_bytes(kept)
    manifest = json.loads((hist.archive / "manifest.json").read_text())
    (hist.archive / "manifest.json").write_text(json.dumps({**manifest, "months": []}))
    assert [v["rule"] for v in _violations(invoke("audit", "verify", "--archive", str(hist.archive), "--json"))] \
        == ["not_in_manifest"]


def test_everything_works_as_an_auditor_login(archived, db, logins):
    invoke, _conn, hist = archived
    dsn = make_conninfo(db.dsn, user=AUDITOR)
    assert h.js(invoke("audit", "verify", "--archive", str(hist.archive), "--json", dsn=dsn))["ok"] is True
    nine = h.js(invoke("audit", "owner", str(hist.calls[8]), "--at", iso(hist.t0(9) + timedelta(seconds=5)),
                       "--json", dsn=dsn))
    assert nine["archived_before"] == iso(hist.boundary) and nine["owner_id"] is not None
    refusal(invoke("audit", "owner", str(hist.calls[1]), "--at", iso(hist.t0(2) + timedelta(seconds=5)), "--json",
                   dsn=dsn))
    assert invoke("--read-only", "audit", "actions", dsn=dsn).exit_code == 0


def test_verify_replays_an_archive_retention_wrote(cli, db, tmp_path):
    """The same history archived by `leasectl admin retention` itself (console/operator/retention.py):
    verify --archive finds it clean and replays every call across it."""
    from console.operator.retention import run_retention

    invoke, conn = cli
    month, boundary, calls = seed(conn)
    directory = tmp_path / "retention"
    keep = datetime.now(UTC) - (boundary + timedelta(days=1))  # the seeded month only: it ended before the cutoff
    run_retention(db.dsn, keep=keep, archive=str(directory), operator="auditor-tester")
    assert conn.execute("select leasectl_archived_before() as b").fetchone()["b"] == boundary
    report = h.js(invoke("audit", "verify", "--archive", str(directory), "--json"))
    assert report["ok"] is True and report["calls"] == CALLS and report["calls_not_replayed"] == 0
    assert report["archive_months_checked"] == [month_text(month)] and report["archived_events"] > 0
    assert h.js(invoke("audit", "verify", "--json"))["calls_not_replayed"] == 7


def test_show_and_history_of_a_call_archived_in_part_never_replay_what_is_left(archived):
    """`show --json` gives no ownership (null, never a partial replay) and says where the online
    history begins; `history` says its rows are the online part; a call whose history is whole
    online is shown as ever."""
    invoke, _conn, hist = archived
    straddling, whole = str(hist.calls[4]), str(hist.calls[8])
    shown = h.js(invoke("show", straddling, "--json"))
    assert shown["ownership"] is None and shown["history_archived_before"] is not None
    assert datetime.fromisoformat(shown["history_archived_before"].replace("Z", "+00:00")) == hist.boundary
    listed = invoke("history", straddling, "--json")
    assert listed.exit_code == 0 and isinstance(json.loads(listed.stdout), list)
    assert "ARCHIVED" in listed.stderr and "online part only" in listed.stderr
    fine = h.js(invoke("show", whole, "--json"))
    assert fine["ownership"] and fine["history_archived_before"] is None
    assert "ARCHIVED" not in invoke("history", whole).stderr


def test_verify_finds_a_manifest_that_no_longer_parses(archived):
    invoke, _conn, hist = archived
    (hist.archive / "manifest.json").write_text('{"format": "leasectl-job-events-archive/1", "months": [{')
    result = invoke("audit", "verify", "--archive", str(hist.archive), "--json")
    assert result.exit_code == 4, result.output
    assert [v["rule"] for v in _violations(result)] == ["manifest_unreadable"]
