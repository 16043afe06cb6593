"""Benchmark: `payload:` searches over many calls, within the session's statement timeout or saying
they did not finish, beside the same filters without payload, in one run.

    python -m tests.bench.payload [--dsn DSN] [--calls 1000000] [--runs 5] [--limit 500]
                                  [--timeout-ms 5000] [--no-unbounded]

One fresh database. `calls` finished calls written by the server (queries/bench/payload_calls.sql:
insert ... select generate_series, 50,000 a statement, exact mode), one every 2 s, with the payloads
of five tools as agents send them: bench_pay 1% (an invoice with a customer and lines),
bench_search 49% (a query), bench_fetch 25% (a url and headers), bench_browse 15% (a task with a
4 KB page context: stored out of line, TOASTed), bench_sql 10% (a statement); then VACUUM ANALYZE
and a CHECKPOINT.

Then each case below `runs` times (after one run not counted, which brings the pages it reads into
the cache), through console.db.reads.jobs (views/jobs.sql, after its privilege check) -- what the
Calls screen and `leasectl jobs --where` run -- for one page of `limit` calls (the Calls screen
asks for 500), on one session with the console's limits (CONSOLE_LIMITS: the statement timeout the
console and the CLI set, 5 s; `--timeout-ms` to try another). A run answers (its time and its rows)
or ends in PayloadSearchTimedOut (counted, with the message a person reads). With --unbounded (the
default), each case that timed out is run once more without a statement timeout, to say how long it
would have taken.

  payload path, alone: one match        payload:$.invoice=INV-<a call in the middle>: the page never
                                        fills, so every call is read (the worst case of a path)
  payload path, alone: a page           payload:$.currency=EUR: a third of bench_pay's calls
  payload text, alone: no match         payload:"no such text": every call's JSON text read
  payload text, alone: a page           payload:analytics: every bench_sql call
  payload + tool: path, one match       tool:bench_pay payload:$.invoice=INV-<the same call>
  payload + tool: text, no match        tool:bench_pay payload:"no such text"
  payload + agent: text, no match       agent:agent-7 payload:"no such text" (2% of calls, by an index)
  plain tool: (no payload)              tool:bench_pay
  plain: no filter                      the first page of every call
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from console.core.filters import parse_filter
from console.db import reads
from console.db.connect import Conn, connect, run, run_one
from console.shared.config import CONSOLE_LIMITS, SessionLimits
from console.shared.errors import PayloadSearchTimedOut
from tests.bench.common import bench_server, machine_facts, print_header

BATCH = 50_000  # calls a seeding statement
SPACING = timedelta(seconds=2)  # queries/bench/payload_calls.sql: call g created at base + 2 s x g
UNLIMITED = SessionLimits(statement_timeout_ms=0, lock_timeout_ms=0, idle_in_transaction_ms=0)


def seed(conn: Conn, calls: int, *, start: int = 0, base: datetime | None = None,
         on_batch: Callable[[int], None] | None = None) -> None:
    """Calls start+1 .. start+calls of queries/bench/payload_calls.sql (their five tools registered
    first), in batches of BATCH, in exact mode; by default the last one an hour ago."""
    run(conn, "bench/payload_tools")
    if base is None:
        base = reads.db_info(conn).db_now - SPACING * (start + calls) - timedelta(hours=1)
    run(conn, "demo/exact_mode", on=True)
    try:
        for first in range(start, start + calls, BATCH):
            count = min(BATCH, start + calls - first)
            run(conn, "bench/payload_calls", start=first, count=count, base=base)
            if on_batch:
                on_batch(first - start + count)
    finally:
        run(conn, "demo/exact_mode", on=False)


@dataclass
class Case:
    label: str
    where: str
    answered_ms: list[float] = field(default_factory=list)
    rows: int | None = None
    timed_out: int = 0
    message: str = ""
    unbounded_ms: float | None = None
    unbounded_rows: int | None = None


def cases(calls: int) -> list[Case]:
    middle = max(100, calls // 2 // 100 * 100)  # a bench_pay call (g % 100 = 0) halfway back
    return [
        Case("payload path, alone: one match", f"payload:$.invoice=INV-{middle}"),
        Case("payload path, alone: a page", "payload:$.currency=EUR"),
        Case("payload text, alone: no match", 'payload:"no such text"'),
        Case("payload text, alone: a page", "payload:analytics"),
        Case("payload + tool: path, one match", f"tool:bench_pay payload:$.invoice=INV-{middle}"),
        Case("payload + tool: text, no match", 'tool:bench_pay payload:"no such text"'),
        Case("payload + agent: text, no match", 'agent:agent-7 payload:"no such text"'),
        Case("plain tool: (no payload)", "tool:bench_pay"),
        Case("plain: no filter", ""),
    ]


def measure(conn: Conn, case: Case, runs: int, limit: int) -> None:
    where = parse_filter(case.where)
    for n in range(runs + 1):
        t0 = time.perf_counter()
        try:
            rows = reads.jobs(conn, where, limit=limit)
        except PayloadSearchTimedOut as exc:
            if n:
                case.timed_out += 1
            case.message = str(exc)
            continue
        if n:  # the first run is not counted: it brings what it reads into the cache
            case.answered_ms.append((time.perf_counter() - t0) * 1000)
            case.rows = len(rows)


def _note(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def size(n: int) -> str:
    return f"{n / 2**30:.2f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def ms(value: float) -> str:
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="measure on this server (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls in the database (default 1,000,000)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each case, after one not counted (default 5)")
    parser.add_argument("--limit", type=int, default=500, help="the page asked for (default 500, the Calls screen's)")
    parser.add_argument("--timeout-ms", type=int, default=CONSOLE_LIMITS.statement_timeout_ms,
                        help="the session's statement timeout (default the console's and the CLI's, "
                             f"{CONSOLE_LIMITS.statement_timeout_ms:,} ms)")
    parser.add_argument("--no-unbounded", dest="unbounded", action="store_false",
                        help="do not run a case that timed out again without a statement timeout")
    args = parser.parse_args(argv)
    if args.calls < 100 or args.runs < 1 or args.limit < 1 or args.timeout_ms < 1:
        parser.error("--calls >= 100, --runs, --limit and --timeout-ms >= 1")
    limits = CONSOLE_LIMITS.model_copy(update={"statement_timeout_ms": args.timeout_ms})
    with bench_server(args.dsn) as server:
        print_header(f"leasectl payload search benchmark: payload: over {args.calls:,} calls, beside the same filters "
                     "without it", server)
        dsn = server.leasectl_database()
        try:
            t0 = time.perf_counter()
            with connect(dsn, limits=UNLIMITED) as conn:
                every = max(BATCH, args.calls // 10 // BATCH * BATCH)
                seed(conn, args.calls, on_batch=lambda done: (done % every == 0 or done == args.calls)
                     and _note(f"{done:,} calls seeded ({time.perf_counter() - t0:.0f} s)"))
                seeded = time.perf_counter() - t0
                _note("VACUUM ANALYZE")
                run(conn, "meta/bench_vacuum")
                held = run_one(conn, "bench/payload_facts")
                assert held is not None and held["calls"] == args.calls, held
            server.checkpoint()
            print(f"  data:     {held['calls']:,} finished calls, one every 2 s, seeded in {seeded:.0f} s by insert ... "
                  "select generate_series in exact mode; VACUUM ANALYZE, CHECKPOINT")
            print(f"  storage:  tool_jobs {size(held['heap_bytes'])} heap + {size(held['toast_bytes'])} TOAST "
                  f"(payloads stored out of line) + {size(held['index_bytes'])} indexes; payloads "
                  f"{held['payload_avg_bytes']:,} bytes stored and {held['payload_avg_chars']:,} characters of JSON "
                  f"text on average, {held['large_payloads']:,} over 2 kB (bench_browse's 4 kB contexts)")
            print(f"  reads:    console.db.reads.jobs (views/jobs.sql after meta/payload_access.sql), a page of "
                  f"{args.limit}, on one session with the console's limits: statement timeout "
                  f"{args.timeout_ms / 1000:g} s; {args.runs} runs of each case after one not counted; no GIN index "
                  "on payload (none exists)")
            print(f"  load:     {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) before the reads; "
                  f"{machine_facts()}")
            print()
            chosen = cases(args.calls)
            with connect(dsn, limits=limits) as conn:
                for case in chosen:
                    _note(case.label)
                    measure(conn, case, args.runs, args.limit)
            if args.unbounded:
                with connect(dsn, limits=UNLIMITED) as conn:
                    for case in chosen:
                        if case.timed_out:
                            _note(f"{case.label}: once more without a statement timeout")
                            t1 = time.perf_counter()
                            case.unbounded_rows = len(reads.jobs(conn, parse_filter(case.where), limit=args.limit))
                            case.unbounded_ms = (time.perf_counter() - t1) * 1000
            report(chosen, args)
        finally:
            server.drop_database(dsn)
    return 0


def report(chosen: list[Case], args: argparse.Namespace) -> None:
    print(f"{'case':36} {'filter':52} {'answered':>9} {'median':>9} {'max':>9} {'calls':>6}  within the "
          f"statement timeout of {args.timeout_ms / 1000:g} s?")
    message = ""
    for case in chosen:
        answered = len(case.answered_ms)
        median = ms(statistics.median(case.answered_ms)) if answered else "-"
        worst = ms(max(case.answered_ms)) if answered else "-"
        if case.timed_out and answered:
            verdict = f"{case.timed_out} of {args.runs} did not finish: said so"
        elif case.timed_out:
            verdict = "did not finish: said so"
        else:
            verdict = "yes"
        if case.unbounded_ms is not None:
            verdict += f" (unbounded: {ms(case.unbounded_ms)}, {case.unbounded_rows} calls)"
        print(f"{case.label:36} {case.where or '(none)':52} {answered:>5}/{args.runs:<3} {median:>9} {worst:>9} "
              f"{case.rows if case.rows is not None else '-':>6}  {verdict}")
        message = message or case.message
    if message:
        print(f"\nwhat a search that ran out of time says (the CLI's error, the Calls screen's list):\n  {message}")


if __name__ == "__main__":
    sys.exit(main())
