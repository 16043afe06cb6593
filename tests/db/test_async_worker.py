"""The asyncio worker (console/worker/aio.py): many calls on one event loop, heartbeats off it,
claims in batches, completions in groups told only after their commit, every rule of the call
Worker's own."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from console.worker import AsyncCallContext, AsyncWorker, ToolFailed
from tests.conftest import ROOT
from tests.db.test_worker_concurrent import Running, running_tokens, worker_connections
from tests.helpers import QUICK, cancel, enqueue, events, job, mark_terminal, wait_until

TOOLS = {"search": ("read_only", QUICK), "pay": ("mutating_unverifiable", QUICK),
         "slow": ("read_only", {"lease_seconds": 4, "heartbeat_seconds": 0.5, "missed_heartbeats": 2,
                                "jitter_seconds": 1})}


def states(conn: Any, ids: list[Any]) -> dict[Any, str]:
    return {i: job(conn, i)["state"] for i in ids}


def test_no_op_calls_complete_in_groups(db: Any, conn: Any) -> None:
    ids = [enqueue(conn, "search", payload={"i": i})["id"] for i in range(200)]

    async def handler(ctx: AsyncCallContext) -> dict:
        return {"i": ctx.payload["i"]}

    worker = AsyncWorker(db.dsn, "wa", handler, poll_interval=0.05, concurrency=20)
    assert worker.run(threading.Event(), drain=True) == 200
    assert set(states(conn, ids).values()) == {"succeeded"}
    assert {job(conn, i)["result"]["i"] for i in ids} == set(range(200))
    stats = worker.group_stats
    assert stats.results == 200
    assert stats.groups < 200 and stats.largest > 1, f"several results shared a commit: {stats}"


def test_many_sleeping_calls_share_one_loop_and_three_connections(db: Any, conn: Any) -> None:
    ids = [enqueue(conn, "slow", payload={"i": i})["id"] for i in range(300)]

    async def handler(ctx: AsyncCallContext) -> dict:
        await ctx.sleep(1.5)  # three heartbeats each
        return {"i": ctx.payload["i"]}

    worker = AsyncWorker(db.dsn, "wa", handler, poll_interval=0.05, concurrency=300)
    t0 = time.monotonic()
    run = Running(worker, max_calls=300)
    wait_until(lambda: worker.renewal_stats.statements >= 1, what="a first heartbeat")
    seen = {worker_connections(conn, "wa") for _ in range(3) if not time.sleep(0.1)}
    threads = threading.active_count()
    assert run.done(timeout=60) == 300
    assert time.monotonic() - t0 < 10, "300 calls of 1.5 s ran at once"
    assert max(seen) <= 3, "claims and writes, completions, heartbeats: one connection each, whatever the concurrency"
    assert threads < 20, f"calls are tasks, not threads ({threads} threads)"
    assert set(states(conn, ids).values()) == {"succeeded"}
    stats = worker.renewal_stats
    assert stats.lost == 0 and stats.largest_batch >= 100, stats


def test_a_handler_that_blocks_the_loop_does_not_stop_the_renewals(db: Any, conn: Any) -> None:
    """docs/seeds.md §000: the heartbeat never runs where the tool runs. One handler blocks the loop
    for longer than a lease (a synchronous call by mistake); the other calls' leases are renewed
    meanwhile by the heartbeat thread, and nothing is lost."""
    ids = [enqueue(conn, "search")["id"] for _ in range(4)]
    blocked: list[Any] = []

    async def handler(ctx: AsyncCallContext) -> dict:
        if not blocked:
            blocked.append(ctx.call.id)
            time.sleep(QUICK["lease_seconds"] * 2)  # blocks the whole loop
        await ctx.sleep(0.5)
        return {"ok": True}

    worker = AsyncWorker(db.dsn, "wa", handler, poll_interval=0.05, concurrency=4)
    assert worker.run(threading.Event(), max_calls=4) == 4
    assert set(states(conn, ids).values()) == {"succeeded"}
    stats = worker.renewal_stats
    assert stats.lost == 0, stats
    assert stats.statements >= 10, "renewed throughout the block"
    assert not [e for i in ids for e in events(conn, i) if e["kind"] == "heartbeat_lost"]


def test_each_rule_of_the_call_is_the_reference_workers(db: Any, conn: Any) -> None:
    """A failure, a cancel heard while sleeping, a lost lease (its result never written), a next
    stage: the outcomes Worker gives, from the same code."""
    fails = enqueue(conn, "search", payload={"do": "fail"})["id"]
    cancelled = enqueue(conn, "slow", payload={"do": "sleep"})["id"]
    fenced = enqueue(conn, "slow", payload={"do": "sleep"})["id"]
    staged = enqueue(conn, "search", payload={"do": "stage"})["id"]

    async def handler(ctx: AsyncCallContext) -> Any:
        what = ctx.payload["do"]
        if what == "fail":
            raise ToolFailed("vendor said no", retryable=False)
        if what == "sleep":
            await ctx.sleep(3)
            return {"slept": True}
        if what == "stage":
            return ctx.next_stage("search", f"{ctx.idempotency_key}:2", {"do": "done"}, result={"stage": 1})
        return {"last": True}

    worker = AsyncWorker(db.dsn, "wa", handler, poll_interval=0.05, concurrency=10)
    run = Running(worker, max_calls=5)
    tokens = running_tokens(conn, [cancelled, fenced])
    assert cancel(conn, cancelled, "running", tokens[cancelled])["state"] == "cancel_requested"
    mark_terminal(conn, fenced, "running", tokens[fenced], "failed", force=True, reason="fence it")
    assert run.done(timeout=30) == 5
    assert job(conn, fails)["state"] == "failed"
    assert job(conn, cancelled)["state"] == "cancelled", "heard while sleeping, confirmed"
    assert job(conn, fenced)["result"] is None and job(conn, fenced)["state"] == "failed"
    assert ("heartbeat_lost", "wa") in [(e["kind"], e["actor"]) for e in events(conn, fenced)]
    assert job(conn, staged)["result"] == {"stage": 1}
    nxt = conn.execute("select state, result from tool_jobs where parent_id = %s", (staged,)).fetchone()
    assert nxt == {"state": "succeeded", "result": {"last": True}}, "the next stage ran too"


def test_a_handler_past_its_deadline_is_cancelled_and_its_late_result_never_written(db: Any, conn: Any) -> None:
    from datetime import timedelta

    now = conn.execute("select now() as t").fetchone()["t"]
    late = enqueue(conn, "search", deadline_at=now + timedelta(seconds=1.2))["id"]
    stubborn = enqueue(conn, "search", deadline_at=now + timedelta(seconds=1.2))["id"]

    async def handler(ctx: AsyncCallContext) -> dict:
        try:
            await asyncio.sleep(4)  # ignores time_left()
        except asyncio.CancelledError:
            if ctx.call.id == stubborn:
                await asyncio.sleep(0.3)  # swallows the cancel and answers anyway, late
                return {"late": True}
            raise
        return {"never": True}

    worker = AsyncWorker(db.dsn, "wa", handler, poll_interval=0.05, concurrency=2)
    assert worker.run(threading.Event(), max_calls=2) == 2
    for i in (late, stubborn):
        assert job(conn, i)["result"] is None
        assert "deadline_passed" in [e["kind"] for e in events(conn, i)]
    wait_until(lambda: any(e["kind"] == "result_rejected" for e in events(conn, stubborn)), timeout=5,
               what="the late answer journaled")
    rejected = next(e for e in events(conn, stubborn) if e["kind"] == "result_rejected")
    assert rejected["details"]["reason"] == "deadline_passed" and rejected["details"]["written"] is False


KILLED_WORKER = """
import asyncio, os, sys, threading
from console.worker import AsyncWorker

told = open(sys.argv[2], "a", buffering=1)

def observer(kind, job_id, token, at):
    if kind == "complete":
        told.write(f"{job_id}\\n")  # what the worker reported stored: line-buffered, then the next

async def handler(ctx):
    await asyncio.sleep(0.001 * (hash(ctx.idempotency_key) % 5))
    return {"n": ctx.payload["n"]}

AsyncWorker(sys.argv[1], "wk", handler, concurrency=20, observer=observer, poll_interval=0.02).run(threading.Event())
"""


def test_a_sigkill_at_any_instant_loses_no_reported_completion(db: Any, conn: Any, tmp_path: Path) -> None:
    total = 600
    for n in range(total):
        enqueue(conn, "search", f"kill:{n}", payload={"n": n})
    script = tmp_path / "killed_worker.py"
    script.write_text(KILLED_WORKER)
    told = tmp_path / "told.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kills = 0
    told.touch()
    while kills < 8:
        before = len(told.read_text().splitlines())
        proc = subprocess.Popen([sys.executable, str(script), db.dsn, str(told)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # the clock starts at its first reported completion, not at its start: on a loaded machine
        # the interpreter's imports alone can outlast a fixed delay (CI once killed it 8 times before
        # it claimed anything)
        deadline = time.monotonic() + 60
        while len(told.read_text().splitlines()) == before and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.02 + 0.07 * kills)  # a different instant each time: claiming, running, committing
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        kills += 1
    reported = {line.strip() for line in told.read_text().splitlines() if line.strip()}
    assert len(reported) > 50, "the worker did report completions between the kills"
    succeeded = {str(r["id"]) for r in conn.execute("select id from tool_jobs where state = 'succeeded'")}
    assert reported <= succeeded, f"reported but not stored: {sorted(reported - succeeded)[:5]}"


def test_a_group_that_fails_is_sent_result_by_result_and_a_bug_there_hangs_nobody(db: Any, conn: Any) -> None:
    """The group's statement fails once with a lost connection (its fate unknown): each result is
    sent alone through complete.sql and every call succeeds. Then an unexpected error in a group:
    its calls end (left to their leases), the worker does not wait for them for ever."""
    from console.shared.errors import DatabaseUnavailable

    ids = [enqueue(conn, "search")["id"] for _ in range(6)]

    async def handler(ctx: AsyncCallContext) -> dict:
        return {"ok": True}

    worker = AsyncWorker(db.dsn, "wa", handler, poll_interval=0.05, concurrency=3, claim_batch=3)
    real = worker.complete_group
    failures: list[BaseException] = [DatabaseUnavailable("the connection broke mid-group"), RuntimeError("a bug")]

    def flaky(group: Any) -> Any:
        if failures:
            raise failures.pop(0)
        return real(group)

    worker.complete_group = flaky  # type: ignore[method-assign]
    t0 = time.monotonic()
    assert worker.run(threading.Event(), max_calls=6) <= 6
    assert time.monotonic() - t0 < 20, "nobody waited for ever"
    found = states(conn, ids)
    assert list(found.values()).count("succeeded") >= 3, found
    assert set(found.values()) <= {"succeeded", "running"}, "a call the bug hit is left to its lease, never lost"
