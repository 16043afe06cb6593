"""Benchmark: a bulk cancel of 1,000 running calls, end to end, and what it costs the rows it
touches, side by side with the two ways not to batch it; and, in the same run, a bulk cancel of ten
times as many (10,000) as a bulk operation (migration 0023).

    python -m tests.bench.bulk [--dsn DSN] [--calls 1000] [--operation-calls 10000] [--runs 3]
    make bench-bulk ARGS='--operation-calls 10000'

Each run cancels every running call of a fresh database through the CLI's path
(console.db.bulk: one snapshot, a guarded operator statement per call, the journal per call):
  batched       BATCH_SIZE calls per transaction, a savepoint per call (what leasectl does up to
                1,000 calls)
  per call      one transaction per call (a WAL flush per call)
  one txn       every call in one transaction (every row lock held until the last call)
  operation     over 1,000 calls: the snapshot read page by page in one repeatable-read
                transaction, the plan frozen in bulk_operation_calls in one statement, then worked
                in batches of BATCH_SIZE by one foreground worker (`leasectl cancel --where ...`),
                each call's outcome recorded in its batch's transaction
Reported: wall time end to end (snapshot + apply; for the operation, snapshot + freeze + every
batch), the longest any row lock was held (the longest transaction that held calls' row locks:
between commits; for the operation, its longest batch), commits, and calls per second end to end.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

from console.core.filters import parse_filter
from console.db import bulk
from console.db.connect import connect, run, run_one
from tests.bench.common import bench_server, machine_facts

TOOL = dict(name="bench_search", side_effect="read_only", lease_seconds=600, heartbeat_seconds=60,
            missed_heartbeats=2, jitter_seconds=30, max_attempts=3, stage_timeout_seconds=None,
            description="bulk benchmark")


def seed(dsn: str, calls: int) -> None:
    """`calls` running calls of one tool, claimed by 8 workers (each claim its own fencing token)."""
    with connect(dsn) as conn:
        run_one(conn, "admin/register_tool", **TOOL)
        for chunk in range(0, calls, 10_000):  # each statement within the session's statement timeout
            run(conn, "bulk/bench_enqueue", tool="bench_search", prefix=f"b{chunk}", count=min(10_000, calls - chunk))
        claimed = 0
        while claimed < calls:
            got = run(conn, "worker/claim_many", worker_id=f"w-{claimed % 8}", tools=["bench_search"],
                      max_calls=min(500, calls - claimed))
            assert got, "every seeded call is claimed"
            claimed += len(got)


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
            # the CLI's snapshot (console/operator/cli/calls.py), up to 1,000 calls as over
            plan = bulk.plan("cancel", bulk.selection(conn, where=parse_filter("state:running")))
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


def operation_run(server, calls: int) -> dict[str, float]:
    """One bulk operation over `calls` running calls of a fresh database, as `leasectl cancel --where
    ... --yes` works one in the foreground: its phases, its longest batch, its commits."""
    dsn = server.leasectl_database()
    try:
        seed(dsn, calls)
        server.checkpoint()
        batches: list[float] = []
        with connect(dsn) as conn:
            started = time.perf_counter()
            plan = bulk.plan("cancel", bulk.selection(conn, where=parse_filter("state:running")))
            assert plan.count == calls and plan.is_operation == (calls > bulk.LIMIT), plan.count
            planned = time.perf_counter()
            op = bulk.start(conn, plan, operator="bench", reason="bench", filter_text="state:running")
            frozen = time.perf_counter()
            ended = bulk.work(conn, op.id, worker="bench", on_batch=lambda _n, held: batches.append(held))
            wall = time.perf_counter() - started
        assert ended.state == "finished" and ended.applied == calls, ended
        return {"wall": wall, "snapshot": planned - started, "freeze": frozen - planned,
                "work": wall - (frozen - started), "longest": max(batches), "commits": len(batches) + 1}
    finally:
        server.drop_database(dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--operation-calls", type=int, default=None,
                        help="calls of the bulk operation measured beside (default: 10 x --calls); 0: none")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    operation_calls = 10 * args.calls if args.operation_calls is None else args.operation_calls
    with bench_server(args.dsn) as server:
        print("leasectl bulk-action benchmark")
        print(f"  machine:  {machine_facts()}")
        print(f"  server:   PostgreSQL {server.version} ({'embedded' if server.embedded else 'given'}), "
              + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
        print(f"  workload: cancel of {args.calls:,} running calls selected by a filter, through "
              f"console.db.bulk; median of {args.runs} runs, each on a fresh database")
        if operation_calls:
            print(f"            and of {operation_calls:,} as a bulk operation (one foreground worker), in the same run")
        print()
        print(f"{'way':<36}{'calls':>7}{'end to end':>12}{'longest txn':>14}{'commits':>9}{'calls/s':>9}")
        print("-" * 87)
        rows = [("batched (leasectl)", bulk.BATCH_SIZE), ("one transaction per call", 1),
                ("one transaction for all", args.calls)]
        for label, size in rows:
            walls, longest = [], []
            for _ in range(args.runs):
                wall, held, commits = one_run(server, args.calls, size)
                walls.append(wall)
                longest.append(held)
            wall = statistics.median(walls)
            print(f"{label + f' ({size}/txn)':<36}{args.calls:>7,}{wall:>10.2f} s"
                  f"{statistics.median(longest) * 1000:>11.0f} ms{commits:>9}{args.calls / wall:>9,.0f}")
        if operation_calls:
            runs = [operation_run(server, operation_calls) for _ in range(args.runs)]
            figures = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            print(f"{f'bulk operation ({bulk.BATCH_SIZE}/txn)':<36}{operation_calls:>7,}{figures['wall']:>10.2f} s"
                  f"{figures['longest'] * 1000:>11.0f} ms{figures['commits']:>9.0f}"
                  f"{operation_calls / figures['wall']:>9,.0f}")
            print(f"  of which: snapshot and plan {figures['snapshot']:.2f} s, freeze (one statement) "
                  f"{figures['freeze']:.2f} s, batches {figures['work']:.2f} s "
                  f"({operation_calls / figures['work']:,.0f} calls/s)")
        print()
        print("longest txn: the longest time one transaction held its row locks (between commits; for the "
              "operation, its longest batch: the freeze locks no call).")


if __name__ == "__main__":
    main()
