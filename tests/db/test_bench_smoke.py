"""Every benchmark still runs, at a size that takes seconds: a benchmark that rots (the console's
once asked the app for an attribute a refactor had renamed) is found by the tests, not on the day
its figures are wanted. The figures at this size mean nothing; the lines they print must be there."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

RUNS = {
    "console": (["--history", "200", "--active", "60", "--runs", "3", "--changes", "5"],
                ["triage refresh", "notify latency", "table refresh", "console memory"]),
    "audit": (["--calls", "300", "--runs", "5"],
              ["audit owner", "audit actions", "screen first page", "verify", "export to a file", "jobs --at",
               "write path"]),
    "metrics": (["--history", "2000", "--active", "50", "--metric-events", "500", "--runs", "3"],
                ["scrape", "metrics --json", "screen 7"]),
    "bulk": (["--calls", "50", "--runs", "1"], ["batched (leasectl)", "one transaction per call", "longest txn"]),
    "protocol": (["--calls", "200", "--workers", "1", "--repeat", "1", "--no-peers", "--before-indexes",
                  "--notify-all", "--before-chains", "--async", "--ceiling-seconds", "1"],
                 ["workers", "renewals:", "a CHECKPOINT right before each timed run", "+notify/s", "vs -0013",
                  "async/pgq"]),
    "rules": (["--calls", "60", "--rounds", "1", "--only", "journal,lease_bounds"],
              ["rule costs", "-journal", "-lease_bounds", "leasectl / -0013"]),
    "scale": (["--calls", "40", "--processes", "2", "--heartbeat", "1", "--seconds", "3", "--triage-runs", "3",
               "--no-ceiling", "--claim-probes", "4"],
              ["renewals/s achieved", "smallest lease margin", "triage refresh median", "claim at all running",
               "without the lease watch"]),
    "scale.async": (["--calls", "40", "--processes", "2", "--heartbeat", "1", "--seconds", "3", "--triage-runs", "3",
                     "--no-ceiling", "--async"], ["AsyncWorker(concurrency=20)", "renewals/s achieved",
                                                  "peak resident set"]),
}


@pytest.mark.parametrize("bench", sorted(RUNS))
def test_the_benchmark_runs_and_prints_its_figures(pg_server, bench):
    if pg_server.embedded is None:  # once is enough: the PostgreSQL 15 pass is about compatibility
        pytest.skip("the benchmarks are smoke-tested on the embedded server")
    args, lines = RUNS[bench]
    module = bench.split(".")[0]  # "scale.async": the scale benchmark, another way
    done = subprocess.run([sys.executable, "-m", f"tests.bench.{module}", "--dsn", pg_server.dsn, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for line in lines:
        assert line in done.stdout, (line, done.stdout[-3000:])
