"""Benchmark: the console's costs, with their conditions printed alongside.

    python -m tests.bench.console [--dsn DSN] [--history 1000000] [--active 10000]

  triage refresh   the triage fetch (counts + attention list, one snapshot), median and p95,
                   with `history` finished calls in the table and with none: its cost must follow
                   the live calls, not the history (aim: <= 15 ms median, ratio <= 1.5)
  notify latency   a state change committed by another session, to the row changing on screen
                   (LISTEN/NOTIFY; the poll interval is set to 60 s so polling cannot explain it;
                   aim: <= 500 ms p95): 50 changes one after another (each as soon as the last
                   is on screen: a stream, where the console wakes at most every 0.2 s), and 50
                   isolated ones (0.5 s apart)
  table refresh    a 1,000-row call table reconciled in place with 10% of rows changed
                   (aim: <= 50 ms)
  memory           peak RSS of a console process that loaded every screen over this database
                   (aim: <= 150 MB)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

from console.db import reads
from console.db.connect import connect, run, run_one
from tests.bench.common import BenchServer, bench_server, percentile, print_header

BENCH_TOOL = dict(name="bench_tool", side_effect="read_only", lease_seconds=60, heartbeat_seconds=10,
                  missed_heartbeats=2, jitter_seconds=10, max_attempts=3, stage_timeout_seconds=None,
                  description="benchmark")


def seeded(server: BenchServer, history: int, active: int) -> str:
    dsn = server.leasectl_database()
    with connect(dsn, limits=_long()) as conn:
        run(conn, "admin/register_tool", **BENCH_TOOL)
        run(conn, "demo/exact_mode", on=True)
        for start in range(0, history, 100_000):
            run(conn, "meta/bench_seed_history", count=min(100_000, history - start), start=start)
        run(conn, "meta/bench_seed_active", count=active)
        run(conn, "demo/exact_mode", on=False)
        run(conn, "meta/bench_vacuum")
    return dsn


def _long():  # type: ignore[no-untyped-def]
    from console.shared.config import SessionLimits

    return SessionLimits(statement_timeout_ms=0, lock_timeout_ms=0, idle_in_transaction_ms=0)


def triage_timings(dsn: str, runs: int) -> list[float]:
    with connect(dsn) as conn:
        for _ in range(5):
            reads.triage(conn)  # warm the cache and the prepared plans
        timings = []
        for _ in range(runs):
            t0 = time.perf_counter()
            reads.triage(conn)
            timings.append((time.perf_counter() - t0) * 1000)
    return timings


# ------------------------------------------------------------------ notify latency


async def notify_latencies(dsn: str, samples: int, gap: float = 0.0) -> list[float]:
    from console.db.session import ConsoleSession
    from console.operator.tui.app import LeasectlApp
    from console.operator.tui.pictures import settle
    from console.operator.tui.widgets.calltable import CallTable

    with connect(dsn) as conn:
        targets = [r["id"] for r in conn.execute(
            "select id from tool_jobs where state = 'running' and lease_until > now() order by created_at desc, id desc "
            "limit %s", (samples,))]
    app = LeasectlApp(ConsoleSession(dsn, operator="bench"), listen=True, poll_seconds=60)
    latencies = []
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("2")
        await settle(pilot, lambda: app.freshness.listening)
        table = app.screen.query_one(CallTable)
        with connect(dsn) as conn:
            for job_id in targets:
                await asyncio.sleep(gap)
                key = str(job_id)
                await settle(pilot, lambda key=key: key in table.jobs)
                row = table.jobs[key]
                t0 = time.perf_counter()
                run_one(conn, "operator/request_cancel", job_id=job_id, seen_state=row.state,
                        seen_token=row.fencing_token, operator="bench", reason="latency probe")
                while table.jobs.get(key) is None or table.jobs[key].state != "cancel_requested":
                    await asyncio.sleep(0.002)
                    if time.perf_counter() - t0 > 10:
                        raise RuntimeError("the change never reached the screen")
                latencies.append((time.perf_counter() - t0) * 1000)
    return latencies


# ------------------------------------------------------------------ table refresh


async def table_refresh_timings(rows: int, runs: int) -> tuple[float, list[float], list[float], float]:
    """(first fill, sync times, frame times over an idle frame, the idle frame itself), in ms."""
    from textual.app import App, ComposeResult

    from console.core.models import JobSummary
    from console.operator.tui.screens.calls import COLUMNS
    from console.operator.tui.widgets.calltable import CallTable

    now = datetime.now(UTC)

    def make(i: int, state: str = "running") -> JobSummary:
        return JobSummary(id=uuid.UUID(int=i + 1), tool="web_search", side_effect="read_only", state=state,
                          owner_id=f"w-{i % 8}", fencing_token=1, attempt=1, max_attempts=3,
                          idempotency_key=f"k-{i}", created_at=now - timedelta(seconds=i),
                          heartbeat_at=now - timedelta(seconds=2), lease_until=now + timedelta(seconds=30),
                          heartbeat_seconds=5, jitter_seconds=5, health="healthy", db_now=now)

    class Harness(App[None]):
        def compose(self) -> ComposeResult:
            yield CallTable(COLUMNS, id="t")

    first = [make(i) for i in range(rows)]
    syncs: list[float] = []
    frames: list[float] = []
    async with Harness().run_test(size=(140, 45)) as pilot:
        table = pilot.app.query_one(CallTable)
        t0 = time.perf_counter()
        table.sync(first, now)
        await pilot.pause()
        first_fill = (time.perf_counter() - t0) * 1000
        idle = []
        for _ in range(5):
            t0 = time.perf_counter()
            await pilot.pause()
            idle.append((time.perf_counter() - t0) * 1000)
        baseline = statistics.median(idle)  # what a pause costs with nothing to draw
        for r in range(runs):
            changed = [make(i, "cancel_requested" if (i + r) % 10 == 0 else "running") for i in range(rows)]
            t0 = time.perf_counter()
            table.sync(changed, now)
            t1 = time.perf_counter()
            await pilot.pause()
            t2 = time.perf_counter()
            syncs.append((t1 - t0) * 1000)
            frames.append(max((t2 - t1) * 1000 - baseline, 0.0))
    return first_fill, syncs, frames, baseline


# ------------------------------------------------------------------ memory


MEMORY_PROBE = """
import asyncio, sys
from console.db.session import ConsoleSession
from console.operator.tui.app import LeasectlApp
from console.operator.tui.pictures import settle
async def main():
    app = LeasectlApp(ConsoleSession(sys.argv[1], operator="bench"), listen=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await settle(pilot)
        for key in ("2", "3", "1", "2"):
            await pilot.press(key)
            await settle(pilot)
        await pilot.pause(3)
asyncio.run(main())
for line in open("/proc/self/status"):
    if line.startswith("VmHWM"):
        print(int(line.split()[1]) // 1024)
"""


def peak_memory_mb(dsn: str) -> int:
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, dsn], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="measure on this server (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--active", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--changes", type=int, default=50, help="state changes timed for the notify latency, each way")
    args = parser.parse_args(argv)
    with bench_server(args.dsn) as server:
        print_header("leasectl console benchmark", server)
        t0 = time.perf_counter()
        big = seeded(server, args.history, args.active)
        small = seeded(server, 0, args.active)
        print(f"  data:     {args.history:,} finished calls + {args.active:,} live ones (seeded in "
              f"{time.perf_counter() - t0:.0f} s); the same {args.active:,} live calls alone")
        print()
        with_history = triage_timings(big, args.runs)
        without = triage_timings(small, args.runs)
        ratio = statistics.median(with_history) / statistics.median(without)
        print(f"triage refresh ({args.runs} runs)   with history: median {statistics.median(with_history):.1f} ms, "
              f"p95 {percentile(with_history, 95):.1f} ms | live calls only: median "
              f"{statistics.median(without):.1f} ms, p95 {percentile(without, 95):.1f} ms | ratio {ratio:.2f}")
        stream = asyncio.run(notify_latencies(big, args.changes))
        isolated = asyncio.run(notify_latencies(big, args.changes, gap=0.5))  # the next running calls
        print(f"notify latency ({args.changes} changes)     state change committed -> row changed on screen: one after "
              f"another median {statistics.median(stream):.0f} ms, p95 {percentile(stream, 95):.0f} ms | "
              f"0.5 s apart median {statistics.median(isolated):.0f} ms, p95 {percentile(isolated, 95):.0f} ms "
              f"(poll interval 60 s)")
        first_fill, syncs, frames, idle = asyncio.run(table_refresh_timings(1000, 20))
        totals = [a + b for a, b in zip(syncs, frames, strict=True)]
        print(f"table refresh (1,000 rows)      10% of rows changed, reconciled in place: median "
              f"{statistics.median(totals):.1f} ms, p95 {percentile(totals, 95):.1f} ms (sync "
              f"{statistics.median(syncs):.1f} + frame {statistics.median(frames):.1f}, over an idle frame of "
              f"{idle:.0f} ms); first fill {first_fill:.0f} ms")
        print(f"console memory                  peak RSS {peak_memory_mb(big)} MB after loading every screen")
        server.drop_database(big)
        server.drop_database(small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
