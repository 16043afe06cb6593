"""Benchmark: a bulk cancel of 1,000 running calls, end to end, and what it costs the rows it
touches, side by side with the two ways not to batch it.

    python -m tests.bench.bulk [--dsn DSN] [--calls 1000] [--runs 3]

Each run cancels every running call of a fresh database through the CLI's path
(console.db.bulk: one snapshot, a guarded operator statement per call, the journal per call):
  batched       BATCH_SIZE calls per transaction, a savepoint per call (what leasectl does)
  per call      one transaction per call (a WAL flush per call)
  one txn       every call in one transaction (every row lock held until the last call)
Reported: wall time end to end (snapshot + apply), the longest any row lock was held (the
longest transaction), and commits.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

from console.core.filters import parse_filter
from console.db import bulk
from console.db.connect import connect, run_one
from tests.bench.common import bench_server, machine_facts

TOOL = dict(name="bench_search", side_effect="read_only", lease_seconds=600, heartbeat_seconds=60,
            missed_heartbeats=2, jitter_seconds=30, max_attempts=3, stage_timeout_seconds=None,
            description="bulk benchmark")


def seed(dsn: str, calls: int) -> None:
    from psycopg.types.json import Jsonb

    with connect(dsn) as conn:
        run_one(conn, "admin/register_tool", **TOOL)
        for n in range(calls):
            run_one(conn, "worker/enqueue", tool="bench_search", idempotency_key=f"bulk:{n}", payload=Jsonb({"n": n}),
                    agent_id=None, session_id=None, deadline_at=None, model=None, provider=None)
        for n in range(calls):
            run_one(conn, "worker/claim", worker_id=f"w-{n % 8}", tools=["bench_search"])


@contextmanager
def batch_size(size: int) -> Iterator[None]:
    saved = bulk.BATCH_SIZE
    bulk.BATCH_SIZE = size
    try:
        yield
    finally:
        bulk.BATCH_SIZE = saved


def one_run(server, calls: int, size: int) -> tuple[float, float, int]:
    dsn = server.leasectl_database()
    try:
        seed(dsn, calls)
        longest = 0.0
        with connect(dsn) as conn, batch_size(size):
            started = time.perf_counter()
            plan = bulk.plan("cancel", bulk.snapshot(conn, where=parse_filter("state:running")))
            assert plan.count == calls, plan.count
            last = time.perf_counter()

            def progress(done: int, total: int) -> None:  # called after each commit
                nonlocal longest, last
                now = time.perf_counter()
                longest = max(longest, now - last)
                last = now

            result = bulk.apply(conn, plan, operator="bench", reason="bench", progress=progress)
            wall = time.perf_counter() - started
        assert result.count("applied") == calls, result.count("applied")
        return wall, longest, -(-calls // size)
    finally:
        server.drop_database(dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with bench_server(args.dsn) as server:
        print("leasectl bulk-action benchmark")
        print(f"  machine:  {machine_facts()}")
        print(f"  server:   PostgreSQL {server.version} ({'embedded' if server.embedded else 'given'}), "
              + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
        print(f"  workload: cancel of {args.calls:,} running calls selected by a filter, through "
              f"console.db.bulk; median of {args.runs} runs, each on a fresh database")
        print()
        print(f"{'way':<34}{'end to end':>12}{'longest txn':>14}{'commits':>9}")
        print("-" * 69)
        rows = [("batched (leasectl)", bulk.BATCH_SIZE), ("one transaction per call", 1),
                ("one transaction for all", args.calls)]
        for label, size in rows:
            walls, longest = [], []
            for _ in range(args.runs):
                wall, held, commits = one_run(server, args.calls, size)
                walls.append(wall)
                longest.append(held)
            print(f"{label + f' ({size}/txn)':<34}{statistics.median(walls):>10.2f} s"
                  f"{statistics.median(longest) * 1000:>11.0f} ms{commits:>9}")
        print()
        print("longest txn: the longest time one transaction held its row locks (between commits).")


if __name__ == "__main__":
    main()
