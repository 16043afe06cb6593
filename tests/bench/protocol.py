"""Benchmark: the lease protocol's throughput, against its own bare shape, its peers and the
machine's ceiling.

    python -m tests.bench.protocol [--dsn DSN] [--calls 6000] [--workers 1,2,4,8] [--repeat 5]
                                   [--no-peers] [--ceiling-seconds 5] [--before-indexes] [--notify-all]
                                   [--before-chains] [--caps] [--no-checkpoint]

For each worker count, on the same server, each run on a fresh database and right after a
CHECKPOINT (no run pays for the WAL of the one before it; --no-checkpoint to measure without):
  C           pgbench: single-row UPDATE commits/s with that many clients (the machine's ceiling)
  bare        the seed's bare shape (docs/seeds.md §000): its table with no triggers, no history, no NOTIFY,
              no row level security, the seed's claim CTE (SKIP LOCKED) and its fenced complete,
              each its own statement and commit (two commits per call), a psycopg loop with tuple
              rows and no heartbeat thread; N processes
  bare-1c     the same two fused into one statement as the reference worker fuses them (one
              commit per call)
  leasectl    the reference worker (console.worker.Worker, concurrency 1) in N processes: the
              fused complete_and_claim.sql, its heartbeat thread and connection, history by
              trigger, the state machine, the kind guard, RLS-ready statements; no-op tool
  -idx        with --before-indexes: the reference worker on databases without the history
              indexes of migrations 0007 (audit) and 0008 (metrics), alternated with the rest:
              leasectl / -idx is the write path after / before them
  -0013       with --before-chains: the reference worker (this code) on databases migrated only up
              to 0013, running the shared SQL as it was before 0014 (from git: the parent of the
              commit that added migrations/0014_chains.sql, through LEASECTL_QUERIES_DIR),
              alternated with the rest: leasectl / -0013 is the write path after / before 0014
              (chains and deadlines) and 0015 (the third trust walk)
  +caps       with --caps: the reference worker with its tool's max_running set one above the
              worker count (migration 0016): every claim counts under the cap's lock, and the cap
              never holds a worker back; caps/no = +caps / leasectl is what counting costs a claim
              (this and vs -0013 and async/pgq: the median of the rounds' own ratios, the lowest
              in brackets; each round runs both sides minutes apart)
  +notify     with --notify-all: the reference worker on databases that also NOTIFY every change of
              state, claims and completions included (as the journal did before 0009), from one
              more plpgsql row trigger and with no listener connected, alternated with the rest:
              leasectl / +notify is what announcing notable changes only saves (the extra trigger
              call included, the delivery to listeners not)
  ratio       leasectl / bare: THE figure (same server, same run, alternated --repeat times;
              medians, and the lowest round)
  pgqueuer    psycopg: N processes, one QueueManager each on a psycopg AsyncConnection, drain
              mode, batch size 10 (its default); asyncpg: its own benchmark's settings
              (tools/benchmark.py: the asyncpg driver, 5 dequeue tasks of batch size 10 in each
              process, uvloop), N processes
  procrastinate  N processes, psycopg connector, concurrency 1, no LISTEN/NOTIFY, wait=False
Then: renewals/s over 1,000 running calls, one heartbeat.sql per call against heartbeat_many.sql
batches, and the HOT share of those updates.

CPU-s/1k is machine-wide busy CPU (workers + server) per 1,000 calls, from /proc/stat; busy is
that CPU over wall time x CPUs (a cell far below 100 % is waiting, not working).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing as mp
import os
import statistics
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
from tests.bench.common import (
    BenchServer,
    CpuMeter,
    bench_server,
    machine_facts,
    pg_bin,
    queries_from,
    released_queries,
)

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

    @property
    def busy(self) -> float:
        return self.cpu / (self.wall * (os.cpu_count() or 1))


# ------------------------------------------------------------------ process plumbing


def _run_processes(server: BenchServer, target: Callable, args: tuple, workers: int) -> tuple[float, float]:
    """Start `workers` processes, let them finish importing and connecting, CHECKPOINT, then
    release them together: every timed run starts from the same point of the checkpoint cycle,
    whatever ran before it."""
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    ready = ctx.Barrier(workers + 1)
    procs = [ctx.Process(target=target, args=(*args, i, go, ready)) for i in range(workers)]
    for p in procs:
        p.start()
    ready.wait(timeout=120)
    server.checkpoint()
    meter = CpuMeter()
    go.set()
    for p in procs:
        p.join(timeout=600)
        if p.exitcode != 0:
            raise RuntimeError(f"a worker process failed (exit {p.exitcode})")
    return meter.stop()


# ------------------------------------------------------------------ bare seed shape


def _bare_worker(dsn: str, fused: bool, index: int, go, ready) -> None:
    import psycopg

    claim = sql.load("bench/bare_claim")
    complete = sql.load("bench/bare_complete_and_claim" if fused else "bench/bare_complete")
    worker_id = f"bare-{index}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        ready.wait()
        go.wait()
        shape = "bare-1c" if fused else "bare"

        def send(query, params):
            # a deadlock rolls the statement back, nothing of it committed: a worker sends it again
            # (seen once in a few hundred runs of the fused shape). Said on stderr, so a run shows
            # it; a deadlock that keeps coming back is a failure, not noise.
            for attempt in range(1, 4):
                try:
                    return conn.execute(query.text, query.bind(params)).fetchone()
                except psycopg.errors.DeadlockDetected:
                    if attempt == 3:
                        raise
                    print(f"{shape} process {index}: deadlock detected, statement sent again", file=sys.stderr)

        row = send(claim, {"worker_id": worker_id})
        while row is not None and row[0] is not None:
            job_id, _payload, token, _lease = row
            result = None  # the no-op tool
            answer = send(complete, {"job_id": job_id, "worker_id": worker_id, "fencing_token": token,
                                     "result": Jsonb(result)})
            assert answer is not None and answer[0], "the bare completion was rejected"
            row = answer[1:] if fused else send(claim, {"worker_id": worker_id})


def bench_bare(server: BenchServer, workers: int, calls: int, *, fused: bool = False) -> Result:
    """The seed's bare shape: claim, then the fenced complete, each its own transaction as the
    seed writes them (two commits per call); `fused`: the two in one statement (one commit)."""
    dsn = server.fresh_database("bench_bare")
    try:
        with connect(dsn) as conn:
            run(conn, "bench/bare_schema")
            run(conn, "bench/bare_enqueue", count=calls)
            run(conn, "meta/bench_vacuum")
        wall, cpu = _run_processes(server, _bare_worker, (dsn, fused), workers)
        with connect(dsn) as conn:
            done = run_one(conn, "bench/bare_done")
            assert done is not None and done["n"] == calls, f"bare finished {done} of {calls}"
        return Result("bare-fused" if fused else "bare", workers, calls, wall, cpu)
    finally:
        server.drop_database(dsn)


# ------------------------------------------------------------------ leasectl

# calls at once per AsyncWorker process in the benchmark (the setting)
ASYNC_CONCURRENCY = 10


def _leasectl_worker(dsn: str, queries: str | None, index: int, go, ready) -> None:
    if queries is not None:
        # before anything loads a file: the loader caches what it loaded, for the process's life
        os.environ["LEASECTL_QUERIES_DIR"] = queries
        sql.load.cache_clear()
    from console.worker import Worker

    worker = Worker(dsn, f"bench-{index}", lambda ctx: None, poll_interval=0.01)
    worker.connect()
    ready.wait()
    go.wait()
    worker.run(threading.Event(), drain=True)


def _leasectl_async_worker(dsn: str, queries: str | None, index: int, go, ready) -> None:
    from console.worker import AsyncWorker

    async def noop(ctx) -> None:
        return None

    # as issue-free settings as the reference worker's: ten calls at once, claimed ten at a time, their
    # completions committed in groups (each told only after its group's commit)
    worker = AsyncWorker(dsn, f"bench-async-{index}", noop, poll_interval=0.01, concurrency=ASYNC_CONCURRENCY,
                         claim_batch=ASYNC_CONCURRENCY)
    worker.connect()
    ready.wait()
    go.wait()
    worker.run(threading.Event(), drain=True)


def _enqueue_noop(conn, calls: int, prefix: str, payload: Callable[[int], object] = lambda i: {}) -> None:
    enqueue = sql.load("worker/enqueue")
    with conn.cursor() as cur:
        cur.executemany(enqueue.text, [enqueue.bind(dict(
            tool="noop", idempotency_key=f"{prefix}-{i}", payload=Jsonb(payload(i)), agent_id=None,
            session_id=None, deadline_at=None, model=None, provider=None)) for i in range(calls)])


def bench_leasectl(server: BenchServer, workers: int, calls: int, *, audit_indexes: bool = True,
                   notify_all: bool = False, before_chains: Path | None = None, caps: bool = False,
                   asynchronous: bool = False) -> Result:
    """The reference worker. `before_chains`: the shared SQL of the release before 0014 (a
    queries/ folder), which the workers and the setup run, on a database migrated only to 0013.
    `caps`: the tool capped at one call more than the workers run (migration 0016): every claim
    counts under the cap's lock, and the cap never holds a worker back. `asynchronous`: AsyncWorker
    (claim_many.sql, complete_many.sql) instead of Worker."""
    dsn = server.leasectl_database(target=13 if before_chains is not None else None)
    try:
        with connect(dsn) as conn, queries_from(before_chains):
            if not audit_indexes:
                run(conn, "audit/bench_drop_indexes")
            if notify_all:
                run(conn, "bench/notify_every_change")
            run(conn, "admin/register_tool", **NOOP_TOOL)
            if caps:
                run(conn, "admin/set_tool_limits", name="noop", max_running=workers + 1, max_hold_seconds=None)
            _enqueue_noop(conn, calls, "bench")
            run(conn, "meta/bench_vacuum")
        queries = None if before_chains is None else str(before_chains)
        worker = _leasectl_async_worker if asynchronous else _leasectl_worker
        wall, cpu = _run_processes(server, worker, (dsn, queries), workers)
        with connect(dsn) as conn, queries_from(before_chains):
            done = run_one(conn, "bench/leasectl_done")
            assert done is not None and done["n"] == calls, f"leasectl finished {done} of {calls}"
            # enqueued + claimed + succeeded: the history is written, not skipped
            assert done["events"] >= 3 * calls, f"history has {done['events']} rows for {calls} calls"
        name = ("leasectl" + ("" if audit_indexes else "-noidx") + ("-notify" if notify_all else "")
                + ("-0013" if before_chains is not None else "") + ("-caps" if caps else "")
                + ("-async" if asynchronous else ""))
        return Result(name, workers, calls, wall, cpu)
    finally:
        server.drop_database(dsn)


# ------------------------------------------------------------------ pgqueuer


def _asyncpg_params(dsn: str) -> dict:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    return {k: v for k, v in {"host": params.get("host"), "port": int(params["port"]) if params.get("port") else None,
                              "user": params.get("user"), "password": params.get("password"),
                              "database": params.get("dbname")}.items() if v is not None}


def _pgqueuer_worker(dsn: str, driver: str, consumers: int, batch_size: int, index: int, go, ready) -> None:
    from pgqueuer import AsyncpgDriver, PsycopgDriver, Queries, QueueManager
    from pgqueuer.domain.types import QueueExecutionMode

    async def consumer() -> None:
        if driver == "asyncpg":
            import asyncpg

            conn = await asyncpg.connect(**_asyncpg_params(dsn))
            qm = QueueManager(Queries(AsyncpgDriver(conn)))
        else:
            import psycopg

            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            qm = QueueManager(Queries(PsycopgDriver(conn)))

        @qm.entrypoint("noop")
        async def noop(job) -> None:
            return None

        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await qm.run(mode=QueueExecutionMode.drain, batch_size=batch_size, dequeue_timeout=timedelta(seconds=1))
        await conn.close()

    async def main() -> None:
        tasks = [asyncio.ensure_future(consumer()) for _ in range(consumers)]
        await asyncio.sleep(0.5)  # connected and listening before the barrier
        await asyncio.get_running_loop().run_in_executor(None, ready.wait)
        await asyncio.gather(*tasks)

    if driver == "asyncpg":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def bench_pgqueuer(server: BenchServer, workers: int, calls: int, *, driver: str, consumers: int,
                   batch_size: int = 10) -> Result:
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
        wall, cpu = _run_processes(server, _pgqueuer_worker, (dsn, driver, consumers, batch_size), workers)
        with connect(dsn) as conn:
            left = run_one(conn, "bench/pgqueuer_left")
            assert left is not None and left["n"] == 0, f"pgqueuer left {left} jobs"
        return Result(f"pgqueuer-{driver}", workers, calls, wall, cpu)
    finally:
        server.drop_database(dsn)


# ------------------------------------------------------------------ procrastinate


def _procrastinate_app(dsn: str):
    import procrastinate

    # it warns, on its log, that an App made in the __main__ module (this benchmark, run with -m)
    # cannot be found by its CLI: true and beside the point here, and it broke the table's lines
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop", queue="bench")
    def noop() -> None:
        return None

    return app, noop


def _procrastinate_worker(dsn: str, index: int, go, ready) -> None:
    app, _ = _procrastinate_app(dsn)

    async def main() -> None:
        async with app.open_async():
            await asyncio.get_running_loop().run_in_executor(None, ready.wait)
            await asyncio.get_running_loop().run_in_executor(None, go.wait)
            await app.run_worker_async(queues=["bench"], wait=False, concurrency=1, listen_notify=False,
                                       install_signal_handlers=False)

    asyncio.run(main())


def bench_procrastinate(server: BenchServer, workers: int, calls: int) -> Result:
    dsn = server.fresh_database("bench_procrastinate")
    try:
        app, noop = _procrastinate_app(dsn)

        async def setup() -> None:
            async with app.open_async():
                await app.schema_manager.apply_schema_async()
                for start in range(0, calls, 1000):
                    await noop.batch_defer_async(*[{} for _ in range(min(1000, calls - start))])

        asyncio.run(setup())
        wall, cpu = _run_processes(server, _procrastinate_worker, (dsn,), workers)
        with connect(dsn) as conn:
            done = run_one(conn, "bench/procrastinate_done")
            assert done is not None and done["n"] == calls, f"procrastinate finished {done} of {calls}"
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
        server.checkpoint()
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


def bench_heartbeats(server: BenchServer, running: int, connections: int, seconds: float,
                     *, batched: bool) -> tuple[float, float]:
    """Renewals/s over `running` claimed calls (one heartbeat.sql per call, or heartbeat_many.sql
    over each connection's share at once), and the share of HOT updates among them."""
    dsn = server.leasectl_database()
    try:
        with connect(dsn) as conn:
            run(conn, "admin/register_tool", **{**NOOP_TOOL, "lease_seconds": 600})
            _enqueue_noop(conn, running, "hb", lambda i: {"i": i})
            claims = [run_one(conn, "worker/claim", worker_id=f"w{i % connections}", tools=None)
                      for i in range(running)]
            run(conn, "meta/bench_vacuum")
            before = run_one(conn, "meta/bench_hot_stats")
        stop = threading.Event()
        counts = [0] * connections

        def beat(k: int) -> None:
            mine = [c for i, c in enumerate(claims) if i % connections == k]
            ids = [c["id"] for c in mine]
            tokens = [c["fencing_token"] for c in mine]
            with connect(dsn) as c:
                while not stop.is_set():
                    if batched:
                        rows = run(c, "worker/heartbeat_many", job_ids=ids, worker_id=f"w{k}",
                                   fencing_tokens=tokens)
                        assert len(rows) == len(ids)
                        counts[k] += len(rows)
                        continue
                    for call in mine:
                        row = run_one(c, "worker/heartbeat", job_id=call["id"], worker_id=f"w{k}",
                                      fencing_token=call["fencing_token"])
                        assert row is not None
                        counts[k] += 1
                        if stop.is_set():
                            break
                run(c, "meta/bench_flush_stats")

        threads = [threading.Thread(target=beat, args=(k,)) for k in range(connections)]
        server.checkpoint()
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


def _load() -> str:
    return "load average " + " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _median_rate(results: list[Result]) -> float:
    return statistics.median(r.rate for r in results)


def _paired(ours: list[Result], theirs: list[Result]) -> str:
    """ours / theirs round by round (the two ran minutes apart in the same round), the median of
    those ratios and the lowest in brackets: a drift of the machine's pace between rounds, which a
    ratio of the two medians takes for a difference, falls on both sides of each pair alike."""
    ratios = [o.rate / t.rate for o, t in zip(ours, theirs, strict=True)]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f})"


def _alternated(server: BenchServer, workers: int, calls: int, repeat: int, *,
                before_indexes: bool = False, notify_all: bool = False,
                before_chains: Path | None = None, caps: bool = False,
                asynchronous: bool = False) -> dict[str, list[Result]]:
    """bare, bare fused and leasectl (and leasectl without 0007's and 0008's indexes, with a
    NOTIFY for every change, and on 0013's schema with 0013's SQL), `repeat` rounds, each round in
    a rotated order."""
    systems: list[tuple[str, Callable[[], Result]]] = [
        ("bare", lambda: bench_bare(server, workers, calls)),
        ("bare-fused", lambda: bench_bare(server, workers, calls, fused=True)),
        ("leasectl", lambda: bench_leasectl(server, workers, calls)),
    ]
    if before_indexes:
        systems.append(("leasectl-noidx", lambda: bench_leasectl(server, workers, calls, audit_indexes=False)))
    if notify_all:
        systems.append(("leasectl-notify", lambda: bench_leasectl(server, workers, calls, notify_all=True)))
    if before_chains is not None:
        systems.append(("leasectl-0013", lambda: bench_leasectl(server, workers, calls, before_chains=before_chains)))
    if caps:
        systems.append(("leasectl-caps", lambda: bench_leasectl(server, workers, calls, caps=True)))
    if asynchronous:
        systems.append(("leasectl-async", lambda: bench_leasectl(server, workers, calls, asynchronous=True)))
        systems.append(("pgqueuer-asyncpg", lambda: bench_pgqueuer(server, workers, calls, driver="asyncpg",
                                                                   consumers=5)))
    results: dict[str, list[Result]] = {name: [] for name, _ in systems}
    n = len(systems)
    for r in range(repeat):
        for name, fn in systems[r % n:] + systems[:r % n]:
            results[name].append(fn())
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="measure on this server (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--calls", type=int, default=6000)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--repeat", type=int, default=5,
                        help="rounds of bare, bare fused and leasectl (and -idx, +notify, -0013) per worker count, "
                             "alternated (default 5)")
    parser.add_argument("--no-peers", action="store_true", help="skip pgqueuer and procrastinate")
    parser.add_argument("--ceiling-seconds", type=float, default=5)
    parser.add_argument("--before-indexes", action="store_true",
                        help="also run the reference worker on databases without the indexes migrations 0007 "
                             "(audit) and 0008 (metrics) add to the history: the write path before and after")
    parser.add_argument("--no-checkpoint", action="store_true",
                        help="no CHECKPOINT before the timed runs: each run meets the server's checkpoints as they "
                             "fall (how this benchmark measured before; to compare the two methods)")
    parser.add_argument("--notify-all", action="store_true",
                        help="also run the reference worker on databases that NOTIFY every change of state, claims "
                             "and completions included (as before migration 0009): what announcing everything costs")
    parser.add_argument("--before-chains", action="store_true",
                        help="also run the reference worker on databases migrated only to 0013, with the shared SQL "
                             "as it was before 0014 (from git): the write path before and after 0014 (chains and "
                             "deadlines) and 0015 (the third trust walk)")
    parser.add_argument("--caps", action="store_true",
                        help="also run the reference worker with its tool capped (max_running one above the "
                             "workers, so the cap never holds one back): what counting under the cap costs a claim")
    parser.add_argument("--async", dest="asynchronous", action="store_true",
                        help=f"also run AsyncWorker (concurrency {ASYNC_CONCURRENCY}: claim_many.sql, complete_many.sql "
                             "in groups) and pgqueuer at its best settings (asyncpg, 5 consumers, batch 10, uvloop), "
                             "both alternated with the rest: 'async/pgq' = AsyncWorker / pgqueuer, same rounds")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",")]
    with contextlib.ExitStack() as stack:
        before_chains = None
        if args.before_chains:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="leasectl-0013-")))
            try:
                before_chains = released_queries("0014_chains", tmp)
            except RuntimeError as exc:
                parser.error(f"--before-chains: {exc}")
        return _report(args, counts, before_chains)


def _report(args: argparse.Namespace, counts: list[int], before_chains: Path | None) -> int:
    with bench_server(args.dsn) as server:
        server.checkpoints = not args.no_checkpoint
        print("leasectl protocol benchmark")
        print(f"  machine:  {machine_facts()}; {_load()} at start")
        print(f"  server:   PostgreSQL {server.version} ({'embedded' if server.embedded else 'external'}), "
              + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
        if server.checkpoint():
            settled = "a CHECKPOINT right before each timed run (no run pays for an earlier run's WAL)"
        else:
            why = "--no-checkpoint" if args.no_checkpoint else "this login may not"
            settled = f"no CHECKPOINT before the runs ({why}): a run may meet a checkpoint an earlier one set off"
        print(f"  workload: {args.calls} no-op calls per run, each claimed and completed durably; one worker "
              f"process per worker; a fresh database per run; {settled}")
        print("  bare:     the seed's claim and fenced complete, each its own transaction (2 commits per call);")
        print("  bare-1c:  the same two fused in one statement (1 commit per call, as leasectl fuses them);")
        print("  leasectl: the reference worker (concurrency 1): complete_and_claim.sql (1 commit per call),")
        print("            history by trigger, state machine, kind guard, heartbeat thread and connection")
        print(f"  {args.repeat} rounds per worker count, the systems above alternated; medians; ratio = leasectl / bare "
              f"(the figure; lowest round in brackets), and leasectl / bare-1c")
        if args.before_indexes:
            print("  -idx:     the reference worker on databases without 0007's and 0008's history indexes "
                  "(alternated with the rest); 'vs -idx' = leasectl / that: the write path after / before")
        if args.notify_all:
            print("  +notify:  the reference worker on databases that also NOTIFY every change of state (claims and "
                  "completions too, as before 0009), from one more plpgsql row trigger, no listener connected; "
                  "alternated with the rest; 'vs +ntf' = leasectl / that")
        if before_chains is not None:
            print("  -0013:    the reference worker (this code) on databases migrated only to 0013, running the shared "
                  "SQL as it was before 0014 (from git), alternated with the rest; 'vs -0013' = leasectl / that: the "
                  "write path after / before 0014 (chains, deadlines) and 0015 (third trust walk)")
        if args.caps:
            print("  +caps:    the reference worker with tools.max_running set one above the worker count (every "
                  "claim counted under the cap's lock; the cap never holds a worker back), alternated with the rest; "
                  "'caps/no' = that / leasectl, round by round (median of the rounds' ratios, lowest in brackets)")
        if args.asynchronous:
            print(f"  async:    AsyncWorker(concurrency={ASYNC_CONCURRENCY}) per process: claim_many.sql, async no-op "
                  "handlers, complete_many.sql in groups, each completion durable before its handler is told; "
                  "pgq-apg: pgqueuer, asyncpg, 5 consumers per process, batch 10, uvloop; both alternated with "
                  "the rest; 'async/pgq' = that ratio, round by round (median, lowest)")
        if not args.no_peers:
            print("  pgqueuer: psycopg, 1 consumer per process, batch 10 (its default) | asyncpg, 5 consumers per "
                  "process, batch 10, uvloop (its tools/benchmark.py); drain mode; it buffers completions")
            print("  procrastinate: psycopg connector, concurrency 1, no LISTEN/NOTIFY; busy = machine CPU share")
        print()
        header = (f"{'workers':>7}  {'C':>6}  {'bare/s':>7}  {'bare-1c/s':>9}  {'leasectl/s':>10}  "
                  f"{'ratio':>11}  {'vs 1c':>5}  {'CPU-s/1k':>8}  {'bare':>5}  {'1c':>5}")
        if args.before_indexes:
            header += f"  {'-idx/s':>7}  {'vs -idx':>7}"
        if args.notify_all:
            header += f"  {'+notify/s':>9}  {'vs +ntf':>7}"
        if before_chains is not None:
            header += f"  {'-0013/s':>7}  {'vs -0013':>11}"
        if args.caps:
            header += f"  {'+caps/s':>7}  {'caps/no':>11}"
        if args.asynchronous:
            header += f"  {'async/s':>7}  {'pgq-apg/s':>9}  {'async/pgq':>11}"
        if not args.no_peers:
            header += (f"  {'pgq-psy/s':>9}  {'busy':>4}  {'pgq-apg/s':>9}  {'busy':>4}  {'procr./s':>8}  "
                       f"{'busy':>4}")
        print(header)
        print("-" * len(header))
        for w in counts:
            ceiling = bench_ceiling(server, w, args.ceiling_seconds)
            res = _alternated(server, w, args.calls, args.repeat, before_indexes=args.before_indexes,
                              notify_all=args.notify_all, before_chains=before_chains, caps=args.caps,
                              asynchronous=args.asynchronous)
            bare, fused, ours = res["bare"], res["bare-fused"], res["leasectl"]
            ratios = [o.rate / b.rate for o, b in zip(ours, bare, strict=True)]
            cells = [f"{w:>7}", f"{ceiling:>6.0f}", f"{_median_rate(bare):>7.0f}", f"{_median_rate(fused):>9.0f}",
                     f"{_median_rate(ours):>10.0f}",
                     f"{_median_rate(ours) / _median_rate(bare):>4.2f} ({min(ratios):.2f})",
                     f"{_median_rate(ours) / _median_rate(fused):>5.2f}",
                     f"{statistics.median(r.cpu_per_1k for r in ours):>8.2f}",
                     f"{statistics.median(r.cpu_per_1k for r in bare):>5.2f}",
                     f"{statistics.median(r.cpu_per_1k for r in fused):>5.2f}"]
            if args.before_indexes:
                before = res["leasectl-noidx"]
                cells += [f"{_median_rate(before):>7.0f}", f"{_median_rate(ours) / _median_rate(before):>7.2f}"]
            if args.notify_all:
                loud = res["leasectl-notify"]
                cells += [f"{_median_rate(loud):>9.0f}", f"{_median_rate(ours) / _median_rate(loud):>7.2f}"]
            if before_chains is not None:
                old = res["leasectl-0013"]
                cells += [f"{_median_rate(old):>7.0f}", f"{_paired(ours, old):>11}"]
            if args.caps:
                capped = res["leasectl-caps"]
                cells += [f"{_median_rate(capped):>7.0f}", f"{_paired(capped, ours):>11}"]
            if args.asynchronous:
                fast, peer = res["leasectl-async"], res["pgqueuer-asyncpg"]
                cells += [f"{_median_rate(fast):>7.0f}", f"{_median_rate(peer):>9.0f}", f"{_paired(fast, peer):>11}"]
            if not args.no_peers:
                psy = bench_pgqueuer(server, w, args.calls, driver="psycopg", consumers=1)
                apg = bench_pgqueuer(server, w, args.calls, driver="asyncpg", consumers=5)
                pro = bench_procrastinate(server, w, args.calls)
                cells += [f"{psy.rate:>9.0f}", f"{psy.busy:>4.0%}", f"{apg.rate:>9.0f}", f"{apg.busy:>4.0%}",
                          f"{pro.rate:>8.0f}", f"{pro.busy:>4.0%}"]
            print("  ".join(cells), flush=True)
        print()
        for batched in (False, True):
            rate, hot = bench_heartbeats(server, running=1000, connections=4, seconds=5, batched=batched)
            how = "heartbeat_many.sql, 250 leases per statement" if batched else "heartbeat.sql, one per lease"
            print(f"renewals: {rate:>7,.0f}/s over 1,000 running calls (4 connections, 5 s, {how}); "
                  f"HOT updates: {hot:.1%}")
        print(f"  ({_load()} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
