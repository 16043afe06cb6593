"""How long migration 0021 holds job_events (issue 29): a database at migration 0020 with N events
of history (the audit benchmark's calls, ten events each, spread over the months before now), then
0021 applied and timed. The conversion copies every row under the table's lock, so its time is the
time writers wait. `python -m tests.bench.conversion --events 1000000` (make bench-history runs it
beside tests/bench/history.py)."""

from __future__ import annotations

import argparse
import time

from console.db.connect import connect, run
from console.db.migrate import migrate
from console.shared.config import SessionLimits
from tests.bench.common import bench_server, print_header
from tests.db.history import TOOL, seed_calls

UNLIMITED = SessionLimits(statement_timeout_ms=0, lock_timeout_ms=0, idle_in_transaction_ms=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--dsn", default=None, help="a server to use instead of the embedded one")
    args = parser.parse_args()
    calls = max(args.events // 10, 1)
    with bench_server(args.dsn) as server:
        print_header("migration 0021: job_events converted to monthly partitions", server)
        dsn = server.leasectl_database(target=20)
        with connect(dsn, limits=UNLIMITED) as conn:
            run(conn, "admin/register_tool", **TOOL)
            base = conn.execute("select now() - %s * interval '25 seconds' - interval '1 hour' as b",
                                (calls,)).fetchone()["b"]
            t0 = time.perf_counter()
            seed_calls(conn, calls, base)  # before 0021: into the one table
            run(conn, "meta/bench_vacuum")
            seeded = time.perf_counter() - t0
            facts = conn.execute("select count(*) as n, pg_total_relation_size('job_events') as bytes, "
                                 "min(at) as first, max(at) as last from job_events").fetchone()
            print(f"history: {facts['n']:,} events, {facts['bytes'] / 2**20:,.0f} MiB with its indexes, "
                  f"{facts['first']:%Y-%m-%d} .. {facts['last']:%Y-%m-%d} (seeded in {seeded:.0f} s)")
            t0 = time.perf_counter()
            report = migrate(conn, target=21)  # 0021 alone: what is timed is its lock, not the later files
            held = time.perf_counter() - t0
            parts = conn.execute("select count(*) as n from pg_inherits where inhparent = 'job_events'::regclass"
                                 ).fetchone()["n"]
            after = conn.execute("select count(*) as n from job_events").fetchone()["n"]
        assert report.applied == ["0021_job_events_partitioned"] and after == facts["n"]
        print(f"0021 applied in {held:.1f} s ({facts['n'] / held:,.0f} events/s): job_events locked against "
              f"writers that long; {parts} partitions, {after:,} events kept")


if __name__ == "__main__":
    main()
