"""Benchmark: what the metrics cost, with their conditions printed alongside.

    python -m tests.bench.metrics [--dsn DSN] [--history 1000000] [--active 10000] [--metric-events 100000]

Three databases on one server, measured side by side in one run:
  none       the live calls alone (`active`: running, some expired, unheard, unknown), no history
  history    the same plus `history` finished calls, one history event each, over the last 30 days
             (the console benchmark's seeding: they are outside the window)
  busy       history plus `metric-events` events of the counted kinds (claims, lost heartbeats,
             stale writes, reclaims, request starts, lock and statement timeouts) over the last day,
             in time order, so the one-hour window holds ~1/24 of them
On each, after the rollup is folded as a running exporter keeps it (every 30 s):
  scrape          one GET /metrics from `leasectl metrics serve` (cache off), median and p95
                  (aim: <= 100 ms median, and <= 1.5x with history against none)
  metrics --json  the command's own work in-process (connect, schema check, the groups, JSON), median
                  and p95 (aim: <= 100 ms, <= 1.5x); a whole process (Python start included) once
  screen 7        the refresh's data call (groups and the hour's minutes, one snapshot), median and
                  p95 (aim: <= 50 ms)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request
from contextlib import redirect_stdout
from io import StringIO

from console.db import metrics
from console.db.connect import connect, run
from console.operator import exporter
from tests.bench.common import BenchServer, bench_server, percentile, print_header, timed
from tests.bench.console import _long, seeded


def with_metric_events(server: BenchServer, history: int, active: int, events: int) -> str:
    dsn = seeded(server, history, active)
    with connect(dsn, limits=_long()) as conn:
        run(conn, "demo/exact_mode", on=True)
        for start in range(0, events, 100_000):
            run(conn, "metrics/bench_seed_events", count=min(100_000, events - start))
        run(conn, "demo/exact_mode", on=False)
        run(conn, "meta/bench_vacuum")
    return dsn


def fold_everything(dsn: str) -> float:
    """Fold the whole history into the rollup (what the exporter's folder does over time); seconds."""
    t0 = time.perf_counter()
    with connect(dsn, limits=_long()) as conn:
        newest = conn.execute("select coalesce(max(id), 0) as n from job_events").fetchone()["n"]  # type: ignore[index]
        for _ in range(600):
            if metrics.fold(conn, lag_seconds=0).folded_through >= newest:
                break
            time.sleep(0.05)
    return time.perf_counter() - t0


def scrape_timings(dsn: str, runs: int) -> tuple[list[float], int]:
    running = exporter.start(dsn, "127.0.0.1:0", cache_seconds=0, fold_every=None)
    size = 0
    try:
        def once() -> None:
            nonlocal size
            with urllib.request.urlopen(running.url, timeout=30) as response:
                size = len(response.read())

        return timed(once, runs), size
    finally:
        running.stop()


def json_timings(dsn: str, runs: int) -> list[float]:
    from console.operator.cli import app

    def once() -> None:
        with redirect_stdout(StringIO()):
            try:
                app(["metrics", "--json", "--dsn", dsn], standalone_mode=False)
            except SystemExit:
                pass

    return timed(once, runs)


def process_once(dsn: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "console", "metrics", "--json", "--dsn", dsn], check=True,
                   capture_output=True)
    return (time.perf_counter() - t0) * 1000


def screen_timings(dsn: str, runs: int) -> list[float]:
    with connect(dsn) as conn:
        return timed(lambda: metrics.screen(conn), runs)


def line(label: str, values: dict[str, list[float]], aim: float, ratio_aim: float | None) -> str:
    """The figures, then the verdict at the issue's condition (`history`: 1,000,000 history events and
    10,000 live calls), and how the busier window compares."""
    parts = [f"{name}: median {statistics.median(v):.1f} ms, p95 {percentile(v, 95):.1f} ms" for name, v in values.items()]
    medians = {name: statistics.median(v) for name, v in values.items()}
    verdict = f"with history: aim <= {aim:.0f} ms {'met' if medians['history'] <= aim else 'NOT met'}"
    if ratio_aim is not None:
        ratio = medians["history"] / medians["none"]
        verdict += f"; history/none {ratio:.2f} (aim <= {ratio_aim}: {'met' if ratio <= ratio_aim else 'NOT met'})"
    if "busy" in medians:
        verdict += (f"; busy: {'within' if medians['busy'] <= aim else 'OVER'} {aim:.0f} ms, "
                    f"busy/none {medians['busy'] / medians['none']:.2f}")
    return f"{label:<16}{' | '.join(parts)}\n{'':<16}{verdict}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="measure on this server (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--active", type=int, default=10_000)
    parser.add_argument("--metric-events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args(argv)
    with bench_server(args.dsn) as server:
        print_header("leasectl metrics benchmark", server)
        t0 = time.perf_counter()
        dsns = {"none": seeded(server, 0, args.active), "history": seeded(server, args.history, args.active),
                "busy": with_metric_events(server, args.history, args.active, args.metric_events)}
        print(f"  data:     none = {args.active:,} live calls; history = the same + {args.history:,} history events "
              f"(finished calls, last 30 days); busy = history + {args.metric_events:,} counted events over the last "
              f"day, ~{args.metric_events // 24:,} in the 1 h window (seeded in {time.perf_counter() - t0:.0f} s)")
        folds = {name: fold_everything(dsn) for name, dsn in dsns.items()}
        print("  rollup:   folded as a running exporter keeps it (first fold: "
              + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in folds.items()) + ")")
        print(f"  runs:     {args.runs} of each, after 5 warm-up runs; window 1 h, by tool")
        print()
        scrapes: dict[str, list[float]] = {}
        sizes = {}
        for name, dsn in dsns.items():
            scrapes[name], sizes[name] = scrape_timings(dsn, args.runs)
        print(line("scrape", scrapes, 100, 1.5) + f" ({sizes['busy']:,} bytes of exposition)")
        print(line("metrics --json", {name: json_timings(dsn, args.runs) for name, dsn in dsns.items()}, 100, 1.5))
        print(f"{'':<16}one whole process (Python start and imports included), busy: {process_once(dsns['busy']):.0f} ms")
        print(line("screen 7", {name: screen_timings(dsn, args.runs) for name, dsn in dsns.items()}, 50, None))
        for dsn in dsns.values():
            server.drop_database(dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
