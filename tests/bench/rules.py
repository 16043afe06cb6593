"""Benchmark: what each rule the database enforces costs a call of the reference worker (issue 25:
"the README says what each rule costs"), weighed by taking it away, in one run.

    python -m tests.bench.rules [--dsn DSN] [--calls 3000] [--rounds 4] [--only NAME,...]

Systems, each on a fresh database, one reference worker process (console.worker.Worker,
concurrency 1, no-op tool: the fused complete_and_claim.sql, one commit a call), alternated round
by round, a CHECKPOINT right before each timed run:

  leasectl          the schema as migrated, every rule in place
  -<rule>           the same with one rule taken away (queries/bench/rules_without_<rule>.sql): the
                    journal's trigger, the journal's guard, the calls' guard (the state machine),
                    the guard of settled calls, the lease bounds check, the lease watch's trigger
  -0013             with --before-chains (the default): a database migrated only to 0013, running
                    the shared SQL as it was before 0014 (from git), as tests/bench/protocol.py does

Per call, medians over the rounds: the server's CPU (the postmaster and every process it forked,
from /proc: the worker's two backends, and whatever the server did besides), the worker process's
own CPU (time.process_time, from the release to its last call), the write-ahead log written
(pg_current_wal_lsn) and the wall time. A rule's cost is `leasectl` minus `-<rule>`, server CPU,
same run. What a rule costs is not what it is worth: each refuses, for any SQL a client sends,
what the README's "The database protects the protocol" lists.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.db.connect import connect, run, run_one
from tests.bench.common import BenchServer, bench_server, machine_facts, queries_from, released_queries
from tests.bench.protocol import NOOP_TOOL, _enqueue_noop
from tests.bench.scale import local_postmaster, server_cpu

# the rules weighed, in the order printed: (name, what it is)
RULES = [
    ("journal", "the history of every change (trigger tool_jobs_journal_update: two rows a call, their guard, "
                "their WAL)"),
    ("journal_guard", "the history's guard (job_events_kind_guard: time, role, bounds, who writes which kind)"),
    ("state_machine", "the calls' guard (tool_jobs_guard_update: the state machine, the claim's and the "
                      "completion's fast paths)"),
    ("settled_guard", "the guard of settled and queued calls (tool_jobs_guard_settled: its WHEN clause)"),
    ("lease_bounds", "the lease bounds (check tool_jobs_lease_bounded: finite, within a day, the deadline, "
                     "the hold)"),
    ("lease_watch", "the lease watch's trigger (tool_jobs_lease_watch_update: its WHEN clause)"),
]


@dataclass
class Measure:
    server_us: float
    worker_us: float
    wal_bytes: float
    wall_us: float


def _worker(dsn: str, queries: str | None, go: Any, ready: Any, answer: Any) -> None:
    """One reference worker process: drains the queue, then answers its own CPU seconds."""
    if queries is not None:
        os.environ["LEASECTL_QUERIES_DIR"] = queries  # before anything loads a file
    from console.db import sql
    from console.worker import Worker

    sql.load.cache_clear()
    worker = Worker(dsn, "bench-rules", lambda ctx: None, poll_interval=0.01)
    worker.connect()
    ready.wait()
    go.wait()
    cpu0 = time.process_time()
    worker.run(threading.Event(), drain=True)
    answer.put(time.process_time() - cpu0)
    worker.close()


def _wal(server: BenchServer) -> int:
    with connect(server.dsn) as conn:
        row = run_one(conn, "bench/wal_position")
    assert row is not None
    return int(row["bytes"])


def measure(server: BenchServer, calls: int, *, without: str | None = None,
            before_chains: Path | None = None) -> Measure:
    dsn = server.leasectl_database(target=13 if before_chains is not None else None)
    try:
        with connect(dsn) as conn, queries_from(before_chains):
            if without is not None:
                run(conn, f"bench/rules_without_{without}")
            run(conn, "admin/register_tool", **NOOP_TOOL)
            _enqueue_noop(conn, calls, "rules")
            run(conn, "meta/bench_vacuum")
            postmaster = local_postmaster(conn)
        if postmaster is None:
            raise SystemExit("tests.bench.rules weighs the server's own CPU: it needs a server on this machine "
                             "(no --dsn, or a --dsn to a local server this user can read /proc of)")
        ctx = mp.get_context("spawn")
        go, ready, answer = ctx.Event(), ctx.Barrier(2), ctx.Queue()
        proc = ctx.Process(target=_worker, args=(dsn, None if before_chains is None else str(before_chains),
                                                 go, ready, answer))
        proc.start()
        ready.wait(timeout=120)
        server.checkpoint()
        wal0, cpu0, t0 = _wal(server), server_cpu(postmaster), time.perf_counter()
        go.set()
        worker_cpu = answer.get(timeout=600)
        wall = time.perf_counter() - t0
        proc.join(timeout=60)
        if proc.exitcode != 0:
            raise RuntimeError(f"the worker process failed (exit {proc.exitcode})")
        time.sleep(0.3)  # its backends gone and reaped: their CPU is then the postmaster's children's
        server_used, wal = server_cpu(postmaster) - cpu0, _wal(server) - wal0
        with connect(dsn) as conn, queries_from(before_chains):
            done = run_one(conn, "bench/leasectl_done")
        assert done is not None and done["n"] == calls, f"the worker finished {done} of {calls}"
        return Measure(server_used / calls * 1e6, worker_cpu / calls * 1e6, wal / calls, wall / calls * 1e6)
    finally:
        server.drop_database(dsn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="a server to measure on (default: a throwaway embedded PostgreSQL 18)")
    parser.add_argument("--calls", type=int, default=3000, help="no-op calls per run")
    parser.add_argument("--rounds", type=int, default=4, help="rounds, every system once in each, alternated")
    parser.add_argument("--only", help="comma-separated rules to weigh (default: all): "
                        + ", ".join(name for name, _ in RULES))
    parser.add_argument("--no-before-chains", dest="before_chains", action="store_false",
                        help="leave out the -0013 reference")
    args = parser.parse_args(argv)
    names = [name for name, _ in RULES]
    chosen = names if not args.only else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(chosen) - set(names))
    if unknown or args.calls < 1 or args.rounds < 1:
        parser.error(f"unknown rule(s): {', '.join(unknown)} (known: {', '.join(names)})" if unknown
                     else "--calls and --rounds are at least 1")

    with ExitStack() as stack:
        server = stack.enter_context(bench_server(args.dsn))
        before = None
        if args.before_chains:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="leasectl-rules-")))
            before = released_queries("0014_chains", tmp)
        systems: list[tuple[str, dict[str, Any]]] = [("leasectl", {})]
        systems += [(f"-{name}", {"without": name}) for name in chosen]
        if before is not None:
            systems.append(("-0013", {"before_chains": before}))

        print("leasectl rules benchmark: what each rule the database enforces costs a call")
        print(f"  machine:  {machine_facts()}; load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())} "
              "at start")
        print(f"  server:   PostgreSQL {server.version} ({'embedded' if server.embedded else 'external'}), "
              + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
        print(f"  workload: {args.calls} no-op calls per run, one reference worker process (concurrency 1: "
              "complete_and_claim.sql, one commit a call); a fresh database per run, a CHECKPOINT before it")
        print(f"  {args.rounds} rounds, the systems alternated; medians per call: the server's CPU (postmaster "
              "and children), the worker's, the WAL written, the wall time")
        print(flush=True)

        results: dict[str, list[Measure]] = {name: [] for name, _ in systems}
        for _ in range(args.rounds):
            for name, options in systems:
                results[name].append(measure(server, args.calls, **options))

    def median(name: str, field: str) -> float:
        return statistics.median(getattr(m, field) for m in results[name])

    full = median("leasectl", "server_us")
    what = dict(RULES)
    print(f"{'system':<16} {'server us':>9} {'worker us':>9} {'WAL B':>7} {'wall us':>8}  "
          f"{'rule costs':>10}  the rule taken away")
    print("-" * 120)
    for name, _ in systems:
        cost = "" if name in ("leasectl", "-0013") else f"{full - median(name, 'server_us'):+.0f} us"
        about = {"leasectl": "none: every rule in place", "-0013": "the schema and SQL before 0014 (reference)"}.get(
            name, what.get(name[1:], ""))
        print(f"{name:<16} {median(name, 'server_us'):>9.0f} {median(name, 'worker_us'):>9.0f} "
              f"{median(name, 'wal_bytes'):>7.0f} {median(name, 'wall_us'):>8.0f}  {cost:>10}  {about}")
    if before is not None:
        print(f"\nleasectl / -0013: server CPU {full / median('-0013', 'server_us'):.2f}x, wall "
              f"{median('leasectl', 'wall_us') / median('-0013', 'wall_us'):.2f}x a call")
    spread = [m.server_us for m in results["leasectl"]]
    print("a rule's cost: leasectl minus the system without it, server CPU a call, same run; the spread of "
          f"one system's rounds is the noise (here leasectl {min(spread):.0f}-{max(spread):.0f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
