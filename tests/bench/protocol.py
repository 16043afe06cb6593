"""Benchmark: the lease protocol's throughput, side by side with peers and the machine's ceiling.

    python -m tests.bench.protocol [--dsn DSN] [--calls 4000] [--workers 1,2,4,8]

For each worker count, on the same server, each on a fresh database:
  C           pgbench: single-row UPDATE commits/s with that many clients (the machine's ceiling;
              a leasectl call costs two commits, claim and complete, so C/2 is the bound)
  leasectl    the reference worker (console.worker) in N processes: claim.sql, heartbeat thread,
              complete.sql, no-op tool
  pgqueuer    N processes, psycopg async driver, drain mode, batch size 10 (its default)
  procrastinate  N processes, psycopg connector, concurrency 1, no LISTEN/NOTIFY, wait=False
Then: heartbeats/s for 1,000 running calls and the HOT share of those updates.

CPU-s/1k is machine-wide busy CPU (workers + server) per 1,000 calls, from /proc/stat.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from psycopg.types.json import Jsonb

from console.db import sql
from console.db.connect import connect, run, run_one
from tests.bench.common import BenchServer, CpuMeter, bench_server, machine_facts, pg_bin

NOOP_TOOL = dict(name="noop", side_effect="read_only", lease_seconds=30, heartbeat_seconds=10,
                 missed_heartbeats=2, jitter_seconds=5, max_attempts=3, stage_timeout_seconds=None,
                 description="benchmark no-op")


@dataclass
class Result:
    system: str
    workers: int
    calls: int
    wall: float
    cpu: float

    @property
    def rate(self) -> float:
        return self.calls / self.wall

    @property
    def cpu_per_1k(self) -> float:
        return self.cpu / self.calls * 1000


# ------------------------------------------------------------------ process plumbing


def _run_processes(target: Callable, dsn: str, workers: int, calls: int) -> tuple[float, float]:
    """Start `workers` processes, let them finish importing, then release them together."""
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    ready = ctx.Barrier(workers + 1)
    procs = [ctx.Process(target=target, args=(dsn, i, go, ready, calls)) for i in range(workers)]
    for p in procs:
        p.start()
    ready.wait(timeout=120)
    meter = CpuMeter()
    go.set()
    for p in procs:
        p.join(timeout=600)
        if p.exitcode != 0:
            raise RuntimeError(f"a worker process failed (exit {p.exitcode})")
    return meter.stop()


# ------------------------------------------------------------------ leasectl


def _leasectl_worker(dsn: str, index: int, go, ready, calls: int) -> None:
    from console.worker import Worker

    worker = Worker(dsn, f"bench-{index}", lambda ctx: None, poll_interval=0.01)
    worker._main_conn()
    ready.wait()
    go.wait()
    worker.run(threading.Event(), drain=True)


def bench_leasectl(server: BenchServer, workers: int, calls: int) -> Result:
    dsn = server.leasectl_database()
    try:
        with connect(dsn) as conn:
            run(conn, "admin/register_tool", **NOOP_TOOL)
            enqueue = sql.load("worker/enqueue")
            with conn.cursor() as cur:
                cur.executemany(enqueue.text, [enqueue.bind(dict(
                    tool="noop", idempotency_key=f"bench-{i}", payload=Jsonb({}), agent_id=None,
                    session_id=None, deadline_at=None, model=None, provider=None)) for i in range(calls)])
            conn.execute("vacuum analyze tool_jobs")
        wall, cpu = _run_processes(_leasectl_worker, dsn, workers, calls)
        with connect(dsn) as conn:
            done = conn.execute("select count(*) as n from tool_jobs where state = 'succeeded'").fetchone()
            assert done is not None and done["n"] == calls, f"leasectl finished {done} of {calls}"
        return Result("leasectl", workers, calls, wall, cpu)
    finally:
        server.drop_database(dsn)


# ------------------------------------------------------------------ pgqueuer


def _pgqueuer_worker(dsn: str, index: int, go, ready, calls: int) -> None:
    import psycopg
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.domain.types import QueueExecutionMode

    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        qm = QueueManager(Queries(PsycopgDriver(conn)))

        @qm.entrypoint("noop")
        async def noop(job) -> None:
            return None

        await asyncio.get_running_loop().run_in_executor(None, ready.wait)
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await qm.run(mode=QueueExecutionMode.drain, batch_size=10, dequeue_timeout=timedelta(seconds=1))
        await conn.close()

    asyncio.run(main())


def bench_pgqueuer(server: BenchServer, workers: int, calls: int) -> Result:
    import psycopg
    from pgqueuer import PsycopgDriver, Queries

    dsn = server.fresh_database("bench_pgqueuer")
    try:
        async def setup() -> None:
            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            queries = Queries(PsycopgDriver(conn))
            await queries.install()
            await queries.enqueue(["noop"] * calls, [None] * calls, [0] * calls)
            await conn.close()

        asyncio.run(setup())
        wall, cpu = _run_processes(_pgqueuer_worker, dsn, workers, calls)
        with psycopg.connect(dsn) as conn:
            left = conn.execute("select count(*) from pgqueuer").fetchone()[0]  # type: ignore[index]
            assert left == 0, f"pgqueuer left {left} jobs"
        return Result("pgqueuer", workers, calls, wall, cpu)
    finally:
        server.drop_database(dsn)


# ------------------------------------------------------------------ procrastinate


def _procrastinate_app(dsn: str):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop", queue="bench")
    def noop() -> None:
        return None

    return app, noop


def _procrastinate_worker(dsn: str, index: int, go, ready, calls: int) -> None:
    app, _ = _procrastinate_app(dsn)

    async def main() -> None:
        async with app.open_async():
            await asyncio.get_running_loop().run_in_executor(None, ready.wait)
            await asyncio.get_running_loop().run_in_executor(None, go.wait)
            await app.run_worker_async(queues=["bench"], wait=False, concurrency=1, listen_notify=False,
                                       install_signal_handlers=False)

    asyncio.run(main())


def bench_procrastinate(server: BenchServer, workers: int, calls: int) -> Result:
    import psycopg

    dsn = server.fresh_database("bench_procrastinate")
    try:
        app, noop = _procrastinate_app(dsn)

        async def setup() -> None:
            async with app.open_async():
                await app.schema_manager.apply_schema_async()
                for start in range(0, calls, 1000):
                    await noop.batch_defer_async(*[{} for _ in range(min(1000, calls - start))])

        asyncio.run(setup())
        wall, cpu = _run_processes(_procrastinate_worker, dsn, workers, calls)
        with psycopg.connect(dsn) as conn:
            done = conn.execute("select count(*) from procrastinate_jobs where status = 'succeeded'"
                                ).fetchone()[0]  # type: ignore[index]
            assert done == calls, f"procrastinate finished {done} of {calls}"
        return Result("procrastinate", workers, calls, wall, cpu)
    finally:
        server.drop_database(dsn)


# ------------------------------------------------------------------ ceiling


def bench_ceiling(server: BenchServer, clients: int, seconds: float) -> float:
    """pgbench: single-row UPDATE commits/s on this server with `clients` connections."""
    dsn = server.fresh_database("bench_ceiling")
    try:
        with connect(dsn) as conn:
            run(conn, "meta/bench_ceiling_table")
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
            script.write((Path(__file__).parent / "ceiling.pgbench").read_text())
        out = subprocess.run([pg_bin("pgbench"), "-n", "-f", script.name, "-c", str(clients),
                              "-j", str(min(clients, 2)), "-T", str(int(seconds)), dsn],
                             check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("tps ="):
                return float(line.split()[2])
        raise RuntimeError(f"no tps in pgbench output:\n{out}")
    finally:
        server.drop_database(dsn)


# ------------------------------------------------------------------ heartbeats


def bench_heartbeats(server: BenchServer, running: int, connections: int, seconds: float) -> tuple[float, float]:
    """heartbeats/s over `running` claimed calls, and the share of HOT updates among them."""
    dsn = server.leasectl_database()
    try:
        with connect(dsn) as conn:
            run(conn, "admin/register_tool", **{**NOOP_TOOL, "lease_seconds": 600})
            enqueue = sql.load("worker/enqueue")
            with conn.cursor() as cur:
                cur.executemany(enqueue.text, [enqueue.bind(dict(
                    tool="noop", idempotency_key=f"hb-{i}", payload=Jsonb({"i": i}), agent_id=None,
                    session_id=None, deadline_at=None, model=None, provider=None)) for i in range(running)])
            claims = [run_one(conn, "worker/claim", worker_id=f"w{i % connections}", tools=None)
                      for i in range(running)]
            conn.execute("vacuum analyze tool_jobs")
            before = run_one(conn, "meta/bench_hot_stats")
        stop = threading.Event()
        counts = [0] * connections

        def beat(k: int) -> None:
            mine = [c for i, c in enumerate(claims) if i % connections == k]
            with connect(dsn) as c:
                while not stop.is_set():
                    for call in mine:
                        row = run_one(c, "worker/heartbeat", job_id=call["id"], worker_id=f"w{k}",
                                      fencing_token=call["fencing_token"])
                        assert row is not None
                        counts[k] += 1
                        if stop.is_set():
                            break
                run(c, "meta/bench_flush_stats")

        threads = [threading.Thread(target=beat, args=(k,)) for k in range(connections)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        time.sleep(1.0)
        with connect(dsn) as conn:
            after = run_one(conn, "meta/bench_hot_stats")
        assert before is not None and after is not None
        updates = after["n_tup_upd"] - before["n_tup_upd"]
        hot = after["n_tup_hot_upd"] - before["n_tup_hot_upd"]
        return sum(counts) / wall, (hot / updates if updates else 0.0)
    finally:
        server.drop_database(dsn)


# ------------------------------------------------------------------ report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="measure on this server (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--no-peers", action="store_true", help="skip pgqueuer and procrastinate")
    parser.add_argument("--ceiling-seconds", type=float, default=5)
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",")]
    with bench_server(args.dsn) as server:
        print("leasectl protocol benchmark")
        print(f"  machine:  {machine_facts()}")
        print(f"  server:   PostgreSQL {server.version} ({'embedded' if server.embedded else 'external'}), "
              + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
        print(f"  workload: {args.calls} no-op calls per run, each claimed and completed; worker processes")
        print()
        header = (f"{'workers':>7}  {'C commits/s':>11}  {'C/2':>6}  {'leasectl/s':>10}  {'CPU-s/1k':>8}  "
                  f"{'pgqueuer/s':>10}  {'CPU-s/1k':>8}  {'procrastinate/s':>16}  {'CPU-s/1k':>8}")
        print(header)
        print("-" * len(header))
        for w in counts:
            ceiling = bench_ceiling(server, w, args.ceiling_seconds)
            ours = bench_leasectl(server, w, args.calls)
            cells = [f"{w:>7}", f"{ceiling:>11.0f}", f"{ceiling / 2:>6.0f}",
                     f"{ours.rate:>10.0f}", f"{ours.cpu_per_1k:>8.2f}"]
            if not args.no_peers:
                pgq = bench_pgqueuer(server, w, args.calls)
                pro = bench_procrastinate(server, w, args.calls)
                cells += [f"{pgq.rate:>10.0f}", f"{pgq.cpu_per_1k:>8.2f}",
                          f"{pro.rate:>16.0f}", f"{pro.cpu_per_1k:>8.2f}"]
            print("  ".join(cells), flush=True)
        print()
        rate, hot = bench_heartbeats(server, running=1000, connections=4, seconds=5)
        print(f"heartbeats: {rate:,.0f}/s over 1,000 running calls (4 connections, 5 s); "
              f"HOT updates: {hot:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
