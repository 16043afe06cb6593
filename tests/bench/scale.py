"""Benchmark: a worker fleet at the size real agents run -- many calls running at once,
their leases renewed in batches, and the console's triage refresh meanwhile.

    python -m tests.bench.scale [--dsn DSN] [--calls 10000] [--processes 8] [--heartbeat 10]
                                [--seconds 60] [--triage-runs 40] [--claim-probes 40] [--no-ceiling]

Setup: a fresh database on the server (a throwaway embedded PostgreSQL unless --dsn), one tool
registered with heartbeat_seconds = H, lease_seconds = 3H, missed_heartbeats 2, jitter H/2, and
`calls` calls enqueued. `processes` worker processes start, each ONE console.worker.Worker with
concurrency = calls / processes (one thread per call, one claim and one heartbeat connection per
process). The tool's handler sleeps in ctx.sleep(H) slices (the lease's cancellable wait) until its
process is told to stop, so every call outlasts the measurement.

Once every call is running, over a window of `seconds`:
  renewals/s      leases renewed per second by all heartbeat threads (from each worker's
                  RenewalStats, the difference across the window), against the needed rate
                  calls / H; and heartbeat_many.sql statements per second
  smallest margin the least lease time left (database clock) at a scheduled renewal, before it
                  was renewed: RenewalStats.smallest_margin, the minimum over every process since
                  its first renewal (ramp and window; aim: never below H); as a cross-check, the
                  least lease_until - now() over the running calls, sampled in the database
  server CPU      the CPU of this server's processes (postmaster and its children, from
                  /proc/<pid>/stat, reaped children included) over the window, as a share of the
                  machine; when the server is not on this machine (--dsn elsewhere), machine-wide
                  busy from /proc/stat minus the worker processes and this one (then it includes
                  load from elsewhere). Machine-wide busy, the workers' CPU and the rest
                  ("elsewhere": other programs, another benchmark) are printed beside it
  connections     pg_stat_activity: client backends on the database, and those of the workers
                  (application_name leasectl-worker:*), sampled; the largest seen
  triage refresh  console.db.reads.triage (what the Triage screen's load() calls for a refresh),
                  `triage-runs` times spread over the window on one connection, median and p95
                  (aim: <= 50 ms median); the calls it reports needing attention
  claim           worker/claim.sql for any tool, taking the calls of a probe tool of the same sizing
                  (`claim-probes` calls each time, each completed untimed), median: with none running before the fleet starts,
                  and with every call running; then with every call running and the lease watch
                  (migration 0020) put back to -infinity, i.e. the search for an expired lease that
                  every claim made before 0020 (aim: at `calls` running <= 1.5x at none). A
                  supervisor ticks every 5 s from before the first probe to the stop, as in a
                  deployment: its sweep, then its raise of the watch.
Reference, same run: the needed rate next to the achieved one, and (unless --no-ceiling) the
server's ceiling for renewals -- heartbeat_many.sql flat out from `processes` connections over
`calls` claimed calls, after the workers stopped (tests.bench.protocol.bench_heartbeats).
Then every worker is stopped (its stop event; handlers return at their next slice and complete
through complete.sql), joined, stragglers terminated; the calls' final states are printed.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from console.db import reads, sql
from console.db.connect import Conn, connect, run
from tests.bench.common import CpuMeter, bench_server, machine_facts

TOOL = "scale_sleep"
PROBE = "scale_probe"  # claimed by this process only, to time claim.sql beside the fleet
CLK_TCK = os.sysconf("SC_CLK_TCK")


def scale_tool(heartbeat: float) -> dict[str, Any]:
    # the database refuses L <= R x H + J: 3H > 2H + H/2
    return dict(name=TOOL, side_effect="read_only", lease_seconds=3 * heartbeat, heartbeat_seconds=heartbeat,
                missed_heartbeats=2, jitter_seconds=heartbeat / 2, max_attempts=3, stage_timeout_seconds=None,
                description="scale benchmark: sleeps until its worker stops")


class SupervisorTicks:
    """`leasectl supervise` in a thread: a tick (the sweep, the raise of the lease watch) every
    `interval` seconds on its own connection; `paused()` holds it off between ticks."""

    def __init__(self, dsn: str, interval: float = 5.0) -> None:
        self.dsn = dsn
        self.interval = interval
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ticks = 0
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="bench-supervisor", daemon=True)

    def _run(self) -> None:
        from console.control.supervisor import tick

        with connect(self.dsn) as conn:
            while not self.stop.is_set():
                with self.lock:
                    try:
                        report = tick(conn, supervisor_id="bench-supervisor")
                        self.errors += report.failures
                    except Exception as exc:  # noqa: BLE001 - reported with the figures
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                    self.ticks += 1
                self.stop.wait(self.interval)

    def start(self) -> None:
        self.thread.start()
        while not self.ticks and self.thread.is_alive():
            time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def probe_tool(heartbeat: float) -> dict[str, Any]:
    return {**scale_tool(heartbeat), "name": PROBE, "description": "scale benchmark: claim probes"}


def claim_probes(conn: Conn, rounds: int) -> list[float]:
    """claim.sql, timed (ms); each call then completed, untimed."""
    timings = []
    for _ in range(rounds):
        t = time.perf_counter()
        # any tool, as a worker serving them all: its search for an expired lease reads every
        # running call (the fleet's tool has no queued call left once all of them run)
        row = run(conn, "worker/claim", worker_id="bench-probe", tools=None)
        timings.append((time.perf_counter() - t) * 1000)
        assert row, "a probe call to claim"
        run(conn, "worker/complete", job_id=row[0]["id"], worker_id="bench-probe",
            fencing_token=row[0]["fencing_token"], result=Jsonb({"probe": True}))
    return timings


# ------------------------------------------------------------------ /proc


def _proc_stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (rest[0] is the state, field 3)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def proc_cpu(pid: int, *, reaped: bool = False) -> float:
    """CPU seconds (user + system, every thread) of one process; with `reaped`, plus its waited-for
    children's."""
    rest = _proc_stat(pid)
    if rest is None:
        return 0.0
    ticks = int(rest[11]) + int(rest[12])
    if reaped:
        ticks += int(rest[13]) + int(rest[14])
    return ticks / CLK_TCK


def server_cpu(postmaster: int) -> float:
    """CPU seconds of a postmaster and every process it forked (live ones from their own stat,
    finished ones from the postmaster's cutime/cstime)."""
    total = proc_cpu(postmaster, reaped=True)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            rest = _proc_stat(entry.name)
            if rest is not None and int(rest[1]) == postmaster:
                total += (int(rest[11]) + int(rest[12])) / CLK_TCK
    return total


def local_postmaster(conn: Conn) -> int | None:
    """The postmaster of this server if it runs on this machine: the parent of our own backend,
    both named postgres, and the backend's command line naming our database."""
    row = conn.execute("select pg_backend_pid() as pid, current_database() as db").fetchone()
    assert row is not None
    try:
        comm = Path(f"/proc/{row['pid']}/comm").read_text().strip()
        cmdline = Path(f"/proc/{row['pid']}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None
    rest = _proc_stat(row["pid"])
    if comm != "postgres" or row["db"] not in cmdline or rest is None:
        return None
    parent = int(rest[1])
    try:
        if Path(f"/proc/{parent}/comm").read_text().strip() != "postgres":
            return None
    except OSError:
        return None
    return parent


def loadavg() -> str:
    return " / ".join(Path("/proc/loadavg").read_text().split()[:3])


# ------------------------------------------------------------------ the worker processes

_stop_calls = threading.Event()  # in a worker process: the handlers return at their next slice
_running_lock = threading.Lock()
_running = 0


def _sleeping_tool(slice_seconds: float):  # type: ignore[no-untyped-def]
    from console.worker import CallContext

    def handler(ctx: CallContext) -> dict[str, Any]:
        global _running
        with _running_lock:
            _running += 1
        started = time.monotonic()
        try:
            while not _stop_calls.is_set():
                ctx.sleep(slice_seconds)  # wakes at once (and raises) on a lost lease or a cancel
        finally:
            with _running_lock:
                _running -= 1
        return {"slept": round(time.monotonic() - started, 3)}

    return handler


def _async_sleeping_tool(slice_seconds: float):  # type: ignore[no-untyped-def]
    from console.worker import AsyncCallContext

    async def handler(ctx: AsyncCallContext) -> dict[str, Any]:
        global _running
        _running += 1  # the loop's thread only
        started = time.monotonic()
        try:
            while not _stop_calls.is_set():
                await ctx.sleep(slice_seconds)  # wakes at once (and raises) on a lost lease or a cancel
        finally:
            _running -= 1
        return {"slept": round(time.monotonic() - started, 3)}

    return handler


def _worker_process(dsn: str, index: int, concurrency: int, heartbeat: float, pipe: Connection,
                    asynchronous: bool = False) -> None:
    """One worker process: one Worker(concurrency=N), or one AsyncWorker, told what to do over
    `pipe`: "go" starts it, "stats" answers its figures, "stop" stops it and answers the last ones."""
    import resource

    from console.worker import AsyncWorker, Worker

    confirmed: dict[Any, datetime] = {}  # job -> the database time its lease was last granted or renewed
    renewals: list[tuple[Any, datetime, float]] = []  # (job, database time, seconds since the one before)

    def observe(kind: str, job_id: Any, _token: int, at: datetime | None) -> None:
        # called by the worker after each guarded write, from the thread that made it
        if at is None:
            return
        if kind == "heartbeat":
            last = confirmed.get(job_id)
            if last is not None:
                renewals.append((job_id, at, (at - last).total_seconds()))
            confirmed[job_id] = at
        elif kind == "claim":
            confirmed[job_id] = at

    if asynchronous:
        # claims of up to 500 a statement: the ramp is what a batch buys here
        worker: Worker = AsyncWorker(dsn, f"scale-{index}", {TOOL: _async_sleeping_tool(heartbeat)},
                                     concurrency=concurrency, claim_batch=500, poll_interval=0.2, observer=observe)
    else:
        worker = Worker(dsn, f"scale-{index}", {TOOL: _sleeping_tool(heartbeat)}, concurrency=concurrency,
                        poll_interval=0.2, observer=observe)
    stop = threading.Event()
    outcome: dict[str, Any] = {"done": None, "error": None}

    def work() -> None:
        try:
            outcome["done"] = worker.run(stop)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, not lost in a thread
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    def figures() -> dict[str, Any]:
        times = os.times()
        return {"stats": asdict(worker.renewal_stats), "running": _running, "threads": threading.active_count(),
                "cpu": times.user + times.system, "done": outcome["done"], "error": outcome["error"],
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

    runner = threading.Thread(target=work, name="worker-run")
    try:
        worker.connect()
        pipe.send("ready")
        while True:
            try:
                command = pipe.recv()
            except EOFError:  # the parent is gone: stop as if told to
                command = "stop"
            if command == "go":
                runner.start()
            elif command == "stats":
                pipe.send(figures())
            elif isinstance(command, tuple) and command[0] == "renewals":
                pipe.send(window_figures(list(renewals), set(confirmed), command[1], command[2]))
            elif command == "stop":
                stop.set()
                _stop_calls.set()
                if runner.is_alive():
                    runner.join(timeout=3 * heartbeat + 60)
                try:
                    pipe.send({**figures(), "joined": not runner.is_alive()})
                except (BrokenPipeError, OSError):
                    pass
                return
    finally:
        stop.set()
        _stop_calls.set()


def window_figures(renewals: list[tuple[Any, datetime, float]], jobs: set[Any], start: datetime,
                   end: datetime) -> dict[str, Any]:
    """The renewals of one process between `start` and `end` (database clock): how many, the rate
    (each lease's 1 / mean interval, summed: whole intervals, not a count cut at the window's
    edges), the longest interval, and the leases with no renewal in the window."""
    per_lease: dict[Any, list[float]] = {}
    for job, at, interval in renewals:
        if start <= at < end:
            per_lease.setdefault(job, []).append(interval)
    intervals = [i for values in per_lease.values() for i in values]
    beats = sorted({at for _, at, _ in renewals if start <= at < end})  # now() of each heartbeat statement
    return {"beats": beats, "count": len(intervals), "intervals": len(intervals), "interval_sum": sum(intervals),
            "rate": sum(len(v) / sum(v) for v in per_lease.values() if sum(v) > 0),
            "longest": max(intervals, default=0.0), "unrenewed": len(jobs - set(per_lease))}


@dataclass
class Fleet:
    procs: list[Any] = field(default_factory=list)
    pipes: list[Connection] = field(default_factory=list)

    def ask(self, command: Any, timeout: float) -> list[dict[str, Any]]:
        for pipe in self.pipes:
            pipe.send(command)
        answers = []
        for i, pipe in enumerate(self.pipes):
            if not pipe.poll(timeout):
                raise RuntimeError(f"worker process {i} did not answer {command!r} within {timeout:.0f} s")
            answers.append(pipe.recv())
        return answers

    def cpu(self) -> float:
        return sum(proc_cpu(p.pid) for p in self.procs if p.pid is not None)

    def stop(self, timeout: float) -> tuple[list[dict[str, Any]], list[str]]:
        """Stop every process (its stop event), join, terminate (then kill) any straggler."""
        answers: list[dict[str, Any]] = []
        trouble: list[str] = []
        for i, pipe in enumerate(self.pipes):
            try:
                pipe.send("stop")
            except (BrokenPipeError, OSError):
                trouble.append(f"process {i}: pipe already closed")
        deadline = time.monotonic() + timeout
        for i, pipe in enumerate(self.pipes):
            try:
                if pipe.poll(max(0.1, deadline - time.monotonic())):
                    answers.append(pipe.recv())
                else:
                    trouble.append(f"process {i}: no answer to stop within {timeout:.0f} s")
            except (EOFError, OSError):
                trouble.append(f"process {i}: exited without answering stop")
        for i, p in enumerate(self.procs):
            p.join(timeout=max(1.0, deadline - time.monotonic()))
            if p.is_alive():
                trouble.append(f"process {i} (pid {p.pid}) still alive: terminated")
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
            if p.exitcode not in (0, None) and not any(f"process {i} " in t for t in trouble):
                trouble.append(f"process {i} exited with {p.exitcode}")
        for pipe in self.pipes:
            pipe.close()
        return answers, trouble


def start_fleet(dsn: str, processes: int, concurrency: int, heartbeat: float, asynchronous: bool = False) -> Fleet:
    ctx = mp.get_context("spawn")
    fleet = Fleet()
    for i in range(processes):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker_process, args=(dsn, i, concurrency, heartbeat, child, asynchronous), daemon=True,
                        name=f"scale-worker-{i}")
        p.start()
        child.close()
        fleet.procs.append(p)
        fleet.pipes.append(parent)
    for i, pipe in enumerate(fleet.pipes):
        if not pipe.poll(120) or pipe.recv() != "ready":
            raise RuntimeError(f"worker process {i} did not get ready")
    for pipe in fleet.pipes:
        pipe.send("go")
    return fleet


# ------------------------------------------------------------------ the database side


def enqueue(conn: Conn, calls: int, tool: str = TOOL) -> None:
    query = sql.load("worker/enqueue")
    with conn.cursor() as cur:
        cur.executemany(query.text, [query.bind(dict(
            tool=tool, idempotency_key=f"{tool}-{i}", payload=Jsonb({"i": i}), agent_id=None, session_id=None,
            deadline_at=None, model=None, provider=None)) for i in range(calls)])


def running_count(conn: Conn) -> int:
    row = conn.execute("select count(*) as n from tool_jobs where state = 'running'").fetchone()
    return int(row["n"]) if row else 0


def sample(conn: Conn) -> dict[str, Any]:
    """Connections now, and the least lease time left over the running calls."""
    row = conn.execute(
        "select (select count(*) from pg_stat_activity where datname = current_database() "
        "        and backend_type = 'client backend') as clients, "
        "       (select count(*) from pg_stat_activity where datname = current_database() "
        "        and application_name like 'leasectl-worker:%') as workers, "
        "       (select extract(epoch from min(lease_until) - now()) from tool_jobs "
        "        where state = 'running') as least_left").fetchone()
    assert row is not None
    return dict(row)


def state_counts(conn: Conn) -> dict[str, int]:
    return {r["state"]: int(r["n"]) for r in
            conn.execute("select state, count(*) as n from tool_jobs group by state order by state")}


def db_now(conn: Conn) -> datetime:
    row = conn.execute("select now() as now").fetchone()
    assert row is not None
    return row["now"]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# ------------------------------------------------------------------ report


def _sum(answers: list[dict[str, Any]], key: str) -> int:
    return sum(int(a["stats"][key]) for a in answers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="measure on this server (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--calls", type=int, default=10_000, help="calls running at once (default 10000)")
    parser.add_argument("--processes", type=int, default=8, help="worker processes, one Worker each (default 8)")
    parser.add_argument("--heartbeat", type=float, default=10, help="H, the tool's heartbeat_seconds (default 10)")
    parser.add_argument("--seconds", type=float, default=60, help="the measurement window (default 60)")
    parser.add_argument("--triage-runs", type=int, default=40, help="triage refreshes over the window (default 40)")
    parser.add_argument("--claim-probes", type=int, default=40,
                        help="claims of the probe tool timed at none and at every call running (default 40)")
    parser.add_argument("--ramp-timeout", type=float, default=600, help="longest wait for every call to run")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the renewal ceiling after the run")
    parser.add_argument("--async", dest="asynchronous", action="store_true",
                        help="AsyncWorker processes (the calls are tasks on one event loop, claimed 500 a statement) "
                             "instead of Worker (a thread per call)")
    args = parser.parse_args(argv)
    h = args.heartbeat
    concurrency = math.ceil(args.calls / args.processes)
    cores = os.cpu_count() or 1
    load_before = loadavg()

    with bench_server(args.dsn) as server:
        dsn = server.leasectl_database()
        fleet: Fleet | None = None
        try:
            with connect(dsn) as conn:
                run(conn, "admin/register_tool", **scale_tool(h))
                run(conn, "admin/register_tool", **probe_tool(h))
                # the claim at none: only the probe's calls in the queue
                enqueue(conn, 3 * args.claim_probes + 5, PROBE)
                run(conn, "meta/bench_vacuum")
                supervisor = SupervisorTicks(dsn)
                supervisor.start()
                claim_probes(conn, 5)  # warm the plan and the cache
                claims_at_none = claim_probes(conn, args.claim_probes)
                t0 = time.perf_counter()
                enqueue(conn, args.calls)
                enqueued_in = time.perf_counter() - t0
                run(conn, "meta/bench_vacuum")
                postmaster = local_postmaster(conn)

            print("leasectl scale benchmark: calls running at once, leases renewed in batches")
            print(f"  machine:  {machine_facts()}")
            print(f"  load:     load average {load_before} at start -- load from elsewhere (another benchmark) "
                  f"may exist; see 'elsewhere' below")
            print(f"  server:   PostgreSQL {server.version} ({'embedded' if server.embedded else 'external'}), "
                  + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
            print(f"  workload: {args.calls} calls of a tool that sleeps (ctx.sleep({h:g}) slices until stopped), "
                  f"H = {h:g} s, lease {3 * h:g} s; {args.processes} worker processes x 1 "
                  f"{'AsyncWorker' if args.asynchronous else 'Worker'}(concurrency="
                  f"{concurrency}); {args.calls} enqueued in {enqueued_in:.1f} s")
            print(flush=True)

            fleet = start_fleet(dsn, args.processes, concurrency, h, args.asynchronous)
            ramp0 = time.perf_counter()
            with connect(dsn) as probe, connect(dsn) as triage_conn:
                running = 0
                while time.perf_counter() - ramp0 < args.ramp_timeout:
                    running = running_count(probe)
                    if running >= args.calls:
                        break
                    time.sleep(0.5)
                ramp = time.perf_counter() - ramp0
                print(f"ramp: {running} of {args.calls} calls running after {ramp:.1f} s"
                      + ("" if running >= args.calls else "  ** NOT ALL RUNNING: the window measures fewer **"),
                      flush=True)
                for _ in range(5):
                    reads.triage(triage_conn)  # warm the cache and the plans, as bench/console.py does
                claims_at_all = claim_probes(probe, args.claim_probes)
                with supervisor.lock:  # no raise meanwhile: every claim searches, as before 0020
                    run(probe, "meta/bench_lower_lease_watch")
                    claims_unwatched = claim_probes(probe, args.claim_probes)

                # ---- the window
                before = fleet.ask("stats", 30)
                meter = CpuMeter()
                w0 = time.perf_counter()
                db_start = db_now(probe)
                srv0 = server_cpu(postmaster) if postmaster else 0.0
                fleet0 = fleet.cpu()
                self0 = proc_cpu(os.getpid())
                timings: list[float] = []
                triage_at: list[float] = []
                attention: list[int] = []
                counted_running: list[int] = []
                samples: list[dict[str, Any]] = []
                step = args.seconds / max(1, args.triage_runs)
                for k in range(args.triage_runs):
                    pause = w0 + k * step - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
                    t = time.perf_counter()
                    triage_at.append(t)
                    snap = reads.triage(triage_conn)
                    timings.append((time.perf_counter() - t) * 1000)
                    attention.append(len(snap.rows))
                    counted_running.append(snap.counts.running)
                    samples.append(sample(probe))
                pause = w0 + args.seconds - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                db_end = db_now(probe)
                wall, busy = meter.stop()
                srv = (server_cpu(postmaster) - srv0) if postmaster else None
                workers_cpu = fleet.cpu() - fleet0
                self_cpu = proc_cpu(os.getpid()) - self0
                after = fleet.ask("stats", 30)
                window = fleet.ask(("renewals", db_start, db_end), 60)
                samples.append(sample(probe))
                still_running = running_count(probe)

            # ---- stop everything
            supervisor.close()
            stop_t0 = time.perf_counter()
            final, trouble = fleet.stop(timeout=3 * h + 90)
            stopped_in = time.perf_counter() - stop_t0
            fleet = None
            with connect(dsn) as conn:
                states = state_counts(conn)

            ceiling: tuple[float, float] | None = None
            if not args.no_ceiling:
                from tests.bench.protocol import bench_heartbeats

                ceiling = bench_heartbeats(server, running=args.calls, connections=args.processes, seconds=5,
                                           batched=True)

            # ---- figures
            needed = args.calls / h
            db_window = (db_end - db_start).total_seconds()
            renewed = _sum(after, "renewed") - _sum(before, "renewed")
            statements = _sum(after, "statements") - _sum(before, "statements")
            achieved = sum(w["rate"] for w in window)
            in_window = sum(w["count"] for w in window)
            longest = max(w["longest"] for w in window)
            mean_interval = sum(w["interval_sum"] for w in window) / max(1, sum(w["intervals"] for w in window))
            unrenewed = sum(w["unrenewed"] for w in window)
            # did a triage refresh overlap a heartbeat statement? (its start within 1 s before the
            # refresh began, or during it; times on the database clock, the refresh's mapped from ours)
            beats = sorted(b for w in window for b in w["beats"])
            overlapped = []
            for at, ms in zip(triage_at, timings, strict=True):
                begin = db_start + timedelta(seconds=at - w0)
                finish = begin + timedelta(milliseconds=ms)
                overlapped.append(any(begin - timedelta(seconds=1) <= b <= finish for b in beats))
            with_beat = [ms for ms, o in zip(timings, overlapped, strict=True) if o]
            without_beat = [ms for ms, o in zip(timings, overlapped, strict=True) if not o]
            slow = [o for ms, o in zip(timings, overlapped, strict=True) if ms > 50]
            margins = [a["stats"]["smallest_margin"] for a in after if a["stats"]["smallest_margin"] is not None]
            least_margin = min(margins) if margins else None
            lost = _sum(after, "lost")
            failed = _sum(after, "failed_statements")
            largest = max(int(a["stats"]["largest_batch"]) for a in after)
            least_left = [s["least_left"] for s in samples if s["least_left"] is not None]
            clients = max(int(s["clients"]) for s in samples)
            worker_conns = max(int(s["workers"]) for s in samples)
            threads = sum(int(a["threads"]) for a in after)
            memory = ", ".join(f"{a.get('rss_mb', 0):.0f}" for a in after)
            per_process = 3 if args.asynchronous else 2  # AsyncWorker: a connection for completions too
            if srv is None:
                srv_how = "machine-wide busy (/proc/stat) minus the workers' and this process' CPU (server not local)"
                srv = busy - workers_cpu - self_cpu
            else:
                srv_how = f"postmaster {postmaster} and its children, /proc/<pid>/stat"
            elsewhere = busy - srv - workers_cpu - self_cpu
            capacity = wall * cores
            load_after = loadavg()

            def share(cpu: float) -> str:
                return f"{cpu / capacity:6.1%} of the machine ({cpu / wall:.2f} cores)"

            print()
            print("conditions")
            print(f"  PostgreSQL {server.version}; {cores} cores; synchronous_commit="
                  f"{server.settings['synchronous_commit']}, fsync={server.settings['fsync']}")
            print(f"  calls {args.calls}; processes {args.processes} (concurrency {concurrency} each, "
                  f"{threads} threads in all); H {h:g} s, lease {3 * h:g} s")
            print(f"  memory: peak resident set of each worker process, MB: {memory}")
            print(f"  connections: {worker_conns} of the workers (aim <= {per_process * args.processes}), {clients} client "
                  f"backends on the database in all (this benchmark's 2 included), largest seen in "
                  f"{len(samples)} samples")
            print(f"  window {wall:.1f} s, after a ramp of {ramp:.1f} s; load average {load_before} before, "
                  f"{load_after} after (1 / 5 / 15 min; load from elsewhere may exist)")
            print()
            rows = [
                ("renewals/s achieved", f"{achieved:,.0f}",
                 "sum over leases of 1 / (its mean renewal interval in the window), database clock"),
                ("renewals/s in the window", f"{in_window / db_window:,.0f}",
                 f"{in_window:,} renewals in {db_window:.1f} s (db clock; a count, off by up to one beat "
                 f"per process); RenewalStats: {renewed:,}"),
                ("renewal interval", f"{mean_interval:.2f} s",
                 f"mean; longest {longest:.2f} s; {unrenewed} leases not renewed in the window; H = {h:g} s"),
                ("renewals/s needed", f"{needed:,.0f}", f"calls / H = {args.calls} / {h:g}"),
                ("achieved / needed", f"{achieved / needed:.2f}",
                 "aim >= 1.0 (above 1: the cohort renews leases due within H/2 early)"),
            ]
            if ceiling is not None:
                rows += [("ceiling renewals/s", f"{ceiling[0]:,.0f}",
                          f"heartbeat_many.sql flat out, {args.processes} connections x "
                          f"{args.calls // args.processes} leases, 5 s, after the run; HOT {ceiling[1]:.0%}"),
                         ("needed / ceiling", f"{needed / ceiling[0]:.1%}",
                          "the share of the server's renewal capacity this fleet needs")]
            rows += [
                ("heartbeat statements/s", f"{statements / wall:.2f}",
                 f"{statements} in the window; largest batch {largest} leases; "
                 f"{args.processes / h:.2f}/s if each process sent one per H"),
                ("smallest lease margin", f"{least_margin:.2f} s" if least_margin is not None else "none",
                 f"at a scheduled renewal, RenewalStats, since the first renewal; aim >= H = {h:g} s"),
                ("least lease left (db)", f"{min(least_left):.2f} s" if least_left else "none",
                 f"min(lease_until - now()) over running calls, {len(least_left)} samples"),
                ("leases lost", f"{lost}", f"{failed} heartbeat statements failed (since start)"),
                ("server CPU", share(srv), srv_how),
                ("workers' CPU", share(workers_cpu), f"{args.processes} worker processes, /proc/<pid>/stat"),
                ("this process' CPU", share(self_cpu), "triage refreshes and sampling"),
                ("machine busy", share(busy), "/proc/stat, everything"),
                ("elsewhere", share(elsewhere), "machine busy minus the above: other programs (another benchmark)"),
                ("server CPU-ms / 1k renewals", f"{srv / max(renewed, 1) * 1e6:.1f}",
                 "server CPU in the window (triage included) per 1,000 renewals"),
                ("triage refresh median", f"{statistics.median(timings):.1f} ms",
                 f"reads.triage, {len(timings)} runs over the window; aim <= 50 ms"),
                ("triage refresh p95", f"{percentile(timings, 95):.1f} ms", f"max {max(timings):.1f} ms"),
                ("triage beside a beat", f"{statistics.median(with_beat):.1f} ms" if with_beat else "none",
                 f"median of the {len(with_beat)} refreshes a heartbeat statement began within 1 s before or "
                 f"during; the other {len(without_beat)}: "
                 + (f"{statistics.median(without_beat):.1f} ms" if without_beat else "none")
                 + f"; of the {len(slow)} over 50 ms, {sum(slow)} beside a beat"),
                ("claim at none running", f"{statistics.median(claims_at_none):.2f} ms",
                 f"worker/claim.sql, probe tool, median of {len(claims_at_none)}; p95 "
                 f"{percentile(claims_at_none, 95):.2f} ms"),
                ("claim at all running", f"{statistics.median(claims_at_all):.2f} ms",
                 f"{running:,} running, median of {len(claims_at_all)}; p95 {percentile(claims_at_all, 95):.2f} ms; "
                 f"{statistics.median(claims_at_all) / statistics.median(claims_at_none):.2f}x at none (aim <= 1.5x)"),
                ("  without the lease watch", f"{statistics.median(claims_unwatched):.2f} ms",
                 f"the search every claim made before 0020, {len(claims_unwatched)} claims: "
                 f"{statistics.median(claims_unwatched) / statistics.median(claims_at_none):.2f}x at none"),
                ("supervisor", f"{supervisor.ticks} ticks",
                 "every 5 s, sweep and raise of the lease watch"
                 + (f"; errors: {'; '.join(supervisor.errors[:3])}" if supervisor.errors else "")),
                ("triage: running / attention", f"{min(counted_running)}..{max(counted_running)} / "
                 f"{max(attention)}", "calls counted running; most calls listed as needing attention"),
            ]
            width = max(len(r[0]) for r in rows)
            vwidth = max(len(r[1]) for r in rows)
            print(f"{'figure':<{width}}  {'value':>{vwidth}}  conditions")
            print("-" * (width + vwidth + 60))
            for name, value, note in rows:
                print(f"{name:<{width}}  {value:>{vwidth}}  {note}")
            print()
            done = sum(int(a["done"] or 0) for a in final)
            errors = [a["error"] for a in final if a.get("error")]
            print(f"stop: {len(final)} of {args.processes} processes answered, in {stopped_in:.1f} s; "
                  f"{done} calls taken to an outcome; running before stop {still_running}; final states "
                  + ", ".join(f"{k} {v}" for k, v in states.items()))
            for line in trouble + errors:
                print(f"  trouble: {line}")
            verdicts = []
            if least_margin is not None and least_margin < h:
                verdicts.append(f"smallest margin {least_margin:.2f} s < H")
            if achieved < 0.98 * needed:  # 2 %: TICK over a window of several beats
                verdicts.append("renewals below the needed rate")
            if statistics.median(timings) > 50:
                verdicts.append("triage median above 50 ms")
            if worker_conns > per_process * args.processes:
                verdicts.append(f"more than {per_process} connections per process")
            if lost:
                verdicts.append(f"{lost} leases lost")
            if statistics.median(claims_at_all) > 1.5 * statistics.median(claims_at_none):
                verdicts.append("claim at all running above 1.5x the claim at none")
            print("aims: " + ("all met" if not verdicts else "NOT MET: " + "; ".join(verdicts)))
        finally:
            if fleet is not None:  # an error on the way: never leave processes behind
                _, trouble = fleet.stop(timeout=3 * h + 30)
                for line in trouble:
                    print(f"  cleanup: {line}", file=sys.stderr)
            try:
                server.drop_database(dsn)
            except Exception as exc:  # noqa: BLE001 - cleanup; the figures are already printed
                print(f"  cleanup: could not drop the database: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
