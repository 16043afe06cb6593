"""The history benchmark (tests/bench/history.py: job_events partitioned by month against one table,
issue 29) still runs, at a size that takes seconds: two databases, one migrated to 0020 and one to
the newest, the same tiny history in both, the reads and the alternated writes of two short rounds.
The figures at this size mean nothing; the lines they print must be there, and the two databases
must have answered alike (the benchmark asserts it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, Server

pytestmark = pytest.mark.slow

ARGS = ["--events", "3000", "--rounds", "2", "--seconds", "1", "--slice", "0.5", "--runs", "5", "--workers", "2"]
LINES = ["unpartitioned (0020)", "partitioned (0021)", "write path (calls/s)", "aim >= 0.95", "audit owner",
         "with the archive check", "audit actions --operator --since", "database size", "job_events with indexes",
         "0 rows in job_events_default", "the same on both: yes"]


def test_the_history_benchmark_runs_and_prints_its_figures(pg_server: Server) -> None:
    if pg_server.embedded is None:  # once is enough: the PostgreSQL 15 pass is about compatibility
        pytest.skip("the benchmarks are smoke-tested on the embedded server")
    done = subprocess.run([sys.executable, "-m", "tests.bench.history", "--dsn", pg_server.dsn, *ARGS],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for line in LINES:
        assert line in done.stdout, (line, done.stdout[-3000:])


def test_the_conversion_benchmark_runs_and_times_0021_alone(pg_server: Server) -> None:
    """tests/bench/conversion.py (the README's lock time of 0021 over 1M events): it crashed once a
    migration after 0021 existed (it applied every pending file and timed them all)."""
    if pg_server.embedded is None:
        pytest.skip("the benchmarks are smoke-tested on the embedded server")
    done = subprocess.run([sys.executable, "-m", "tests.bench.conversion", "--dsn", pg_server.dsn, "--events", "3000"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "0021 applied in" in done.stdout and "events kept" in done.stdout
