"""Benchmark: the auditor's tools over a big history, each figure with its conditions and, where one
makes sense, a reference measured in the same run.

    python -m tests.bench.audit [--dsn DSN] [--calls 100000] [--runs 200]

Data: `calls` finished calls with ten events each (1,000,000 events by default) spread over a month,
seeded in exact mode (session_replication_role = replica, superuser) by queries/audit/bench_seed_*.sql:
insert ... select from generate_series, the rows exactly as the triggers would have written them
(kinds, tokens, owners, leases, previous_lease_until; `audit verify` must find them clean), in time
order so that ids follow time. One call in twenty has an operator cancel, one a refused
mark-terminal, one a lock-timeout failure: 15,000 operator rows by 40 operators.

  audit owner          who held a random call at a random instant of its life (median, p95;
                       aim <= 10 ms); reference: reading that call's current row
  audit actions        --operator op-N, newest 100 (median, p95; aim <= 10 ms); reference: the
                       same without --operator
  screen first page    the Audit screen's data call, no filter (aim <= 50 ms); with job: and at:;
                       with owner: (a walk newest first until the page is full)
  export               the CLI writing JSONL (and CSV) to a file, in a subprocess: events/s
                       (aim >= 100,000/s) and the process's peak RSS (VmHWM) for 10,000 and for
                       1,000,000 events (aim: the same); reference: a plain select of the same rows
                       through the same server-side cursor, nothing written
  verify               the whole history (aim <= 30 s); reference: reading the same rows plainly
  jobs --at            every call rebuilt at one instant as `leasectl jobs --at T --json` writes it
                       (aim <= 2 s): the CLI in a subprocess writing to a file, at the end of the
                       history, its peak RSS beside that of the newest 10,000 (streamed: the same);
                       the rebuild streamed in process, at the end and in the middle; reference, the
                       machine's ceiling: the same JSON read back from a table and written the same
                       way (alternated with the rebuild, the ratio is the figure). As models: the
                       newest 10,000 (an index scan per call; Triage's at:) beside `jobs` now of as
                       many, and a page of 200 (the Calls screen's at:)
  write path           100,000 claim/state events inserted with and without the indexes of
                       migrations 0007 and 0008, alternated (the protocol benchmark is the end-to-end check:
                       python -m tests.bench.protocol, before and after)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from psycopg.rows import tuple_row

from console.core.audit import AUDIT_LIMITS, parse_audit_filter
from console.db import audit as audit_db
from console.db import reads, sql
from console.db.connect import connect, run, run_one
from console.shared.config import SessionLimits
from console.shared.errors import StatementTimedOut
from console.shared.times import Instant
from tests.bench.common import BenchServer, bench_server, percentile, print_header, timed

BENCH_TOOL = dict(name="bench_audit", side_effect="read_only", lease_seconds=60, heartbeat_seconds=10,
                  missed_heartbeats=2, jitter_seconds=10, max_attempts=5, stage_timeout_seconds=None,
                  description="audit benchmark")
EVENTS_PER_CALL = 10
CALL_BY_CALL = 10_000  # at most this many calls are rebuilt with an index scan each (audit/jobs_at.sql)
UNLIMITED = SessionLimits(statement_timeout_ms=0, lock_timeout_ms=0, idle_in_transaction_ms=0)


def seeded(server: BenchServer, calls: int) -> tuple[str, float]:
    dsn = server.leasectl_database()
    t0 = time.perf_counter()
    with connect(dsn, limits=UNLIMITED) as conn:
        run(conn, "admin/register_tool", **BENCH_TOOL)
        base = conn.execute("select now() - %s * interval '25 seconds' - interval '1 hour' as b",
                            (calls,)).fetchone()["b"]
        run(conn, "demo/exact_mode", on=True)
        for start in range(0, calls, 10_000):
            count = min(10_000, calls - start)
            run(conn, "audit/bench_seed_events", start=start, count=count, base=base)
            run(conn, "audit/bench_seed_calls", start=start, count=count, base=base)
        run(conn, "demo/exact_mode", on=False)
        run(conn, "meta/bench_vacuum")
    return dsn, time.perf_counter() - t0


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} ms, p95 {percentile(values, 95):.2f} ms"


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


# The peak RSS of the probe's own image: VmHWM, reset by exec. getrusage's ru_maxrss is not: Linux
# carries the high-water mark over from the image exec replaced, so a probe spawned by this process
# reported this process's peak (567 MB for a `jobs --at` probe after 100,000 models were built here).
PEAK_RSS_MB = 'int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) / 1024'

CLI_PROBE = f"""
import json, re, sys, time
sys.argv = ["leasectl", *sys.argv[1:]]
from console.operator.cli import main
t0 = time.perf_counter()
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
else:
    code = 0
print(json.dumps({{"code": code, "seconds": time.perf_counter() - t0, "maxrss_mb": {PEAK_RSS_MB}}}),
      file=sys.stderr)
"""

PLAIN_PROBE = f"""
import json, re, sys, time
from datetime import datetime
from console.db import audit
from console.db.connect import connect, run
from console.core.audit import AUDIT_LIMITS
dsn, since, until = sys.argv[1], sys.argv[2] or None, sys.argv[3] or None
t0 = time.perf_counter()
n = 0
with connect(dsn, limits=AUDIT_LIMITS) as conn, conn.transaction():
    run(conn, "meta/snapshot")
    for rows in audit.stream(conn, "audit/bench_plain_select", {{"since": since and datetime.fromisoformat(since),
                             "until": until and datetime.fromisoformat(until)}}, cursor_name="plain"):
        n += len(rows)
print(json.dumps({{"events": n, "seconds": time.perf_counter() - t0, "maxrss_mb": {PEAK_RSS_MB}}}), file=sys.stderr)
"""


def probe(code: str, *args: str, stdout: Path | None = None) -> dict[str, Any]:
    """Run `code` in a fresh interpreter; its figures are the last line it writes on stderr (stdout,
    which may be a command's output, goes to `stdout` or a temporary file)."""
    with stdout.open("w") if stdout is not None else tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code, *args], stdout=out, stderr=subprocess.PIPE, text=True,
                              check=True)
        wall = time.perf_counter() - t0
    # `seconds`: the command itself, once Python has started and imported leasectl; `wall`: all of it
    return {**json.loads(done.stderr.strip().splitlines()[-1]), "wall": wall}


def keep_past(conn: Any, at: Any, written: Path) -> None:
    """Store the calls rebuilt at `at` as written (the file of `jobs --at --json`), one JSON object a
    row, in a temporary table: the ceiling's input."""
    run(conn, "audit/bench_past_keep")
    calls = json.loads(written.read_text())
    with conn.cursor().copy(sql.load("audit/bench_past_copy").text) as copy:
        for n, call in enumerate(calls):
            copy.write_row([n, json.dumps([call], indent=2)[2:-2]])


def past_lines(conn: Any, out: Any) -> None:
    """The ceiling: the kept lines streamed back and written as write_jobs_at writes them."""
    query = sql.load("audit/bench_past_rows")
    first = True
    with conn.cursor(row_factory=tuple_row) as cur:
        pending: list[str] = []
        for (line,) in cur.stream(query.text, {}, size=2_000):
            pending.append(line)
            if len(pending) == 2_000:
                out.write(("[\n" if first else ",\n") + ",\n".join(pending))
                first = False
                pending.clear()
        out.write(("[\n" if first else ",\n") + ",\n".join(pending) + "\n]\n")


def alternate(ours: Callable[[], Any], ceiling: Callable[[], Any], rounds: int) -> float:
    """Median of ours / ceiling, each round running both back to back (the machine drifts)."""
    ratios = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ours()
        t1 = time.perf_counter()
        ceiling()
        ratios.append((t1 - t0) / (time.perf_counter() - t1))
    return statistics.median(ratios)


def cli_jobs_at(dsn: str, at: Any, limit: int, target: Path) -> dict[str, Any]:
    result = probe(CLI_PROBE, "jobs", "--at", at.isoformat(), "--json", "--limit", str(limit), "--dsn", dsn,
                   stdout=target)
    assert result["code"] == 0, result
    return result


def export_run(dsn: str, target: Path, fmt: str, since: str | None, until: str | None) -> dict[str, Any]:
    args = ["audit", "export", "--dsn", dsn, "--format", fmt, "--output", str(target)]
    if since:
        args += ["--since", since]
    if until:
        args += ["--until", until]
    result = probe(CLI_PROBE, *args)
    assert result["code"] == 0, result
    with target.open() as f:
        result["events"] = sum(1 for _ in f) - (1 if fmt == "csv" else 0)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="measure on this server (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args(argv)
    rng = random.Random(13)
    with bench_server(args.dsn) as server:
        print_header("leasectl audit benchmark", server)
        dsn, seconds = seeded(server, args.calls)
        with connect(dsn, limits=AUDIT_LIMITS) as conn:
            total = run_one(conn, "audit/export_count", since=None, until=None, job_id=None, owner=None,
                            operator=None, kind=None)
            assert total is not None
            size = conn.execute("select pg_size_pretty(pg_total_relation_size('job_events')) as s").fetchone()["s"]
            print(f"  data:     {args.calls:,} finished calls, {total['events']:,} events ({size} with indexes) "
                  f"over {(total['last_at'] - total['first_at']).days} days, seeded in {seconds:.0f} s by "
                  "insert ... select generate_series in exact mode (rows as the triggers write them)")
            print()

            # -------------------------------------------------------------- owner
            sample = run(conn, "audit/bench_sample", count=args.runs)
            questions = [(r["id"], r["created_at"] + (r["finished_at"] - r["created_at"]) * rng.random())
                         for r in sample]
            answers: list[Any] = []
            it = iter(questions * 2)

            def ask() -> None:
                job_id, at = next(it)
                answers.append(audit_db.owner(conn, job_id, Instant(at, "UTC", at.isoformat())))

            owner_ms = timed(ask, args.runs, warm=args.runs // 10 or 1)
            it_ref = iter(questions * 2)
            row_ms = timed(lambda: reads.job(conn, next(it_ref)[0]), args.runs, warm=5)
            held = sum(a.owner_id is not None for a in answers)
            print(f"audit owner ({args.runs} calls, random instants)   {ms(owner_ms)} | reference, the call's "
                  f"current row: {ms(row_ms)} | {held} of {len(answers)} answers held   aim <= 10 ms: "
                  f"{verdict(statistics.median(owner_ms) <= 10)}")

            # -------------------------------------------------------------- actions
            ops = iter([f"op-{rng.randrange(40)}" for _ in range(args.runs * 2)])
            counts: list[int] = []

            def by_operator() -> None:
                counts.append(len(audit_db.operator_actions(conn, operator=next(ops), limit=100)))

            actions_ms = timed(by_operator, args.runs)
            all_ms = timed(lambda: audit_db.operator_actions(conn, limit=100), args.runs)
            print(f"audit actions --operator (100)     {ms(actions_ms)} ({min(counts)}-{max(counts)} rows) | "
                  f"reference, no filter: {ms(all_ms)}   aim <= 10 ms: {verdict(statistics.median(actions_ms) <= 10)}")

            # -------------------------------------------------------------- the screen's first page
            empty = parse_audit_filter("")
            page_ms = timed(lambda: audit_db.screen_page(conn, empty, limit=200), args.runs)
            job_id, at = questions[0]
            with_job = parse_audit_filter(f"job:{job_id} at:{at.isoformat()}")
            job_ms = timed(lambda: audit_db.screen_page(conn, with_job, limit=200), args.runs)
            by_owner = parse_audit_filter("owner:w-7")
            owner_page_ms = timed(lambda: audit_db.screen_page(conn, by_owner, limit=200), max(args.runs // 10, 5))
            journal_ms = timed(lambda: audit_db.screen_page(conn, empty, view="journal", limit=200), args.runs)
            print(f"screen first page (200 events)     no filter: {ms(page_ms)} | job: + at: {ms(job_ms)} | "
                  f"owner:w-7 {ms(owner_page_ms)} | journal view {ms(journal_ms)}   aim <= 50 ms: "
                  f"{verdict(statistics.median(page_ms) <= 50)}")

            # -------------------------------------------------------------- ranges for the export
            small_size = min(10_000, total["events"] // 2)  # 10,000 events, or half of a small history
            small_from = run_one(conn, "audit/bench_instant", position=total["events"] // 2)
            small_to = run_one(conn, "audit/bench_instant", position=total["events"] // 2 + small_size - 1)
            assert small_from is not None and small_to is not None
            small = (small_from["at"].isoformat(), small_to["at"].isoformat())

            # -------------------------------------------------------------- verify
            t0 = time.perf_counter()
            report = audit_db.verify(conn)
            verify_s = time.perf_counter() - t0
        plain = probe(PLAIN_PROBE, dsn, "", "")
        print(f"verify (whole history)             {verify_s:.1f} s for {report.events:,} events of "
              f"{report.calls:,} calls, {len(report.violations)} violations | reference, reading the rows plainly: "
              f"{plain['seconds']:.1f} s   aim <= 30 s: {verdict(verify_s <= 30 and report.ok)}")

        # ------------------------------------------------------------------ export
        with tempfile.TemporaryDirectory(prefix="leasectl-audit-bench-") as tmp:
            folder = Path(tmp)
            big = export_run(dsn, folder / "all.jsonl", "jsonl", None, None)
            little = export_run(dsn, folder / "some.jsonl", "jsonl", *small)
            big_csv = export_run(dsn, folder / "all.csv", "csv", None, None)
            plain_small = probe(PLAIN_PROBE, dsn, *small)
            size_mb = (folder / "all.jsonl").stat().st_size / 1e6
        rate = big["events"] / big["seconds"]
        print(f"export to a file (CLI, subprocess) jsonl: {big['events']:,} events in {big['seconds']:.1f} s = "
              f"{rate:,.0f} events/s ({size_mb:.0f} MB), peak RSS {big['maxrss_mb']:.0f} MB | csv: "
              f"{big_csv['events'] / big_csv['seconds']:,.0f} events/s, peak RSS {big_csv['maxrss_mb']:.0f} MB | "
              f"reference, plain select of the same rows: {plain['events'] / plain['seconds']:,.0f} rows/s, "
              f"peak RSS {plain['maxrss_mb']:.0f} MB   aim >= 100,000/s: {verdict(rate >= 100_000)}")
        print(f"export memory                      {little['events']:,} events: peak RSS {little['maxrss_mb']:.0f} MB "
              f"({little['events'] / little['seconds']:,.0f} events/s, the command once Python has started) | "
              f"{big['events']:,} events: {big['maxrss_mb']:.0f} MB | reference, plain select of "
              f"{plain_small['events']:,}: {plain_small['maxrss_mb']:.0f} MB   aim, the same: "
              f"{verdict(big['maxrss_mb'] <= little['maxrss_mb'] * 1.1 + 2)}")

        # ------------------------------------------------------------------ jobs --at
        # with the limits the CLI runs under: a statement over its timeout is reported, not a crash
        with tempfile.TemporaryDirectory(prefix="leasectl-audit-bench-") as tmp:
            target = Path(tmp) / "past.json"
            end = total["last_at"] + timedelta(seconds=1)
            middle = total["first_at"] + (total["last_at"] - total["first_at"]) / 2
            with connect(dsn, limits=AUDIT_LIMITS) as conn:

                def measured(fn: Callable[[], Any], runs: int) -> str:
                    try:
                        values = timed(fn, runs, warm=1)
                    except StatementTimedOut:
                        return f"over the CLI's statement timeout ({AUDIT_LIMITS.statement_timeout_ms / 1000:.0f} s)"
                    return f"median {statistics.median(values) / 1000:.2f} s"

                def rebuild_to_file(at: Any) -> None:
                    with target.open("w") as out:
                        audit_db.write_jobs_at(conn, out, at, limit=args.calls)

                def ceiling_to_file() -> None:
                    with target.open("w") as out:
                        past_lines(conn, out)

                at_end = measured(lambda: rebuild_to_file(end), 3)
                size_mb = target.stat().st_size / 1e6
                at_middle = measured(lambda: rebuild_to_file(middle), 3)
                keep_past(conn, end, target)
                ceiling = measured(ceiling_to_file, 3)
                alternated = alternate(lambda: rebuild_to_file(end), ceiling_to_file, rounds=3)
                by_call = measured(lambda: audit_db.jobs_at(conn, middle, limit=CALL_BY_CALL), 3)
                now_models = measured(lambda: reads.jobs(conn, limit=CALL_BY_CALL), 3)
                page = measured(lambda: audit_db.jobs_at(conn, middle, limit=200), 20)
            clis = [cli_jobs_at(dsn, end, args.calls, target) for _ in range(3)]
            cli = sorted(clis, key=lambda r: r["wall"])[1]
            cli_small = cli_jobs_at(dsn, end, min(CALL_BY_CALL, args.calls), target)
            start = probe(CLI_PROBE, "--version")
        print(f"jobs --at --json (every call)      `leasectl jobs --at T --json --limit {args.calls:,}` in a subprocess "
              f"to a file, at the end of the history ({args.calls:,} calls, {size_mb:.0f} MB of JSON): median of 3 "
              f"{cli['wall']:.2f} s, all of it ({cli['seconds']:.2f} s once Python has started and imported leasectl; "
              f"`leasectl --version`: {start['wall']:.2f} s); peak RSS {cli['maxrss_mb']:.0f} MB "
              f"({min(CALL_BY_CALL, args.calls):,} calls: {cli_small['maxrss_mb']:.0f} MB)   aim <= 2 s: "
              f"{verdict(cli['wall'] <= 2)}")
        print(f"jobs --at, the rebuild streamed    in process, to a file: at the end {at_end} | in the middle of the "
              f"history {at_middle}")
        print(f"jobs --at, the machine's ceiling   the same {args.calls:,} calls' JSON read back from a table and "
              f"written the same way, no rebuild: {ceiling}; alternated 3 rounds, rebuild / ceiling = "
              f"{alternated:.2f} (what the rebuild adds to delivering the output)")
        print(f"jobs --at, as models               the newest {CALL_BY_CALL:,} in the middle (the Triage screen's at:, "
              f"the table; an index scan per call): {by_call} | reference, `jobs` now of the newest "
              f"{CALL_BY_CALL:,}: {now_models} | one page of 200 (the Calls screen's at:): {page}")
        server.drop_database(dsn)

        # ------------------------------------------------------------------ the write path
        with_idx, without_idx = server.leasectl_database(), server.leasectl_database()
        with connect(without_idx, limits=UNLIMITED) as conn:
            run(conn, "audit/bench_drop_indexes")
        times: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(5):
            for label, target in (("without", without_idx), ("with", with_idx)):
                with connect(target, limits=UNLIMITED) as conn:
                    t0 = time.perf_counter()
                    run(conn, "audit/bench_write_events", count=100_000)
                    times[label].append(time.perf_counter() - t0)
        before, after = statistics.median(times["without"]), statistics.median(times["with"])
        print(f"write path, 0007+0008 indexes     100,000 claim/state events inserted: without them median "
              f"{before * 1000:.0f} ms, with them {after * 1000:.0f} ms ({(after / before - 1) * 100:+.1f} %; "
              "5 rounds alternated; 0007's take operator kinds only, 0008's the claims, half of these rows)")
        server.drop_database(with_idx)
        server.drop_database(without_idx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
