"""Connections killed and servers restarted with calls in flight."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from console.worker import Worker
from tests.helpers import claim, enqueue, job, wait_until

TOOLS = {"search": ("read_only", {"lease_seconds": 1.0, "heartbeat_seconds": 0.2, "missed_heartbeats": 2,
                                  "jitter_seconds": 0.2, "max_attempts": 50})}


def terminate(conn, pid: int) -> None:
    # and wait until it has exited (PostgreSQL 14+): until then it still holds its row locks, and a
    # claim with SKIP LOCKED would pass the call by
    conn.execute("select pg_terminate_backend(%s, 10000)", (pid,))


def test_backend_killed_between_claim_and_commit_rolls_the_claim_back(db, conn):
    e = enqueue(conn, "search")
    worker_conn = db.connect(autocommit=False)
    c = claim(worker_conn, "w1")
    assert c["fencing_token"] == 1  # granted inside a transaction that never commits
    terminate(conn, worker_conn.info.backend_pid)
    wait_until(lambda: job(conn, e["id"])["state"] == "queued", what="the claim to roll back")
    assert job(conn, e["id"])["fencing_token"] == 0 and job(conn, e["id"])["owner_id"] is None
    again = claim(conn, "w2")
    assert again["id"] == e["id"] and again["fencing_token"] == 1


def test_worker_connection_killed_while_running_still_completes_once(db, conn):
    e = enqueue(conn, "search")
    hold = threading.Event()
    worker = Worker(db.dsn, "w1", lambda ctx: hold.wait(5) and {"by": "w1"})
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(worker.run_once)
        wait_until(lambda: job(conn, e["id"])["state"] == "running", what="the claim")
        def worker_pids():
            return [r["pid"] for r in conn.execute(
                "select pid from pg_stat_activity where application_name like 'leasectl-worker:w1%%' "
                "and datname = current_database()")]

        pids = wait_until(lambda: len(worker_pids()) == 2 and worker_pids(),
                          what="main and heartbeat connections")
        for pid in pids:
            terminate(conn, pid)
        hold.set()
        outcome = future.result(timeout=15)
    assert outcome.status == "succeeded"
    j = job(conn, e["id"])
    assert j["state"] == "succeeded" and j["result"] == {"by": "w1"} and j["fencing_token"] == 1


def test_server_restart_with_calls_in_flight(db, conn):
    if not db.server.can_restart:
        pytest.skip("set LEASECTL_TEST_RESTART_CMD to restart this server from the tests")
    jobs = [enqueue(conn, "search", f"restart-{i}")["id"] for i in range(60)]
    outcomes: list = []
    lock = threading.Lock()
    stop = threading.Event()

    def handler(ctx):
        ctx.sleep(0.15)
        return {"by": ctx.worker_id, "token": ctx.fencing_token}

    def run(name):
        w = Worker(db.dsn, name, handler, poll_interval=0.05)
        while not stop.is_set():
            try:
                outcome = w.run_once()
            except Exception:  # noqa: BLE001 - the server is restarting
                w.close()
                time.sleep(0.2)
                continue
            if outcome is None:
                time.sleep(0.05)
            else:
                with lock:
                    outcomes.append(outcome)

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(outcomes) >= 8, timeout=30, what="some progress before the restart")
    conn.close()
    db.server.restart()  # immediate mode: a crash, in-flight transactions are lost
    with db.connect() as check:
        def all_done():
            rows = check.execute("select count(*) filter (where state <> 'succeeded') as left "
                                 "from tool_jobs").fetchone()
            return rows["left"] == 0

        wait_until(all_done, timeout=90, interval=0.2, what="every call to finish after the restart")
        stop.set()
        for t in threads:
            t.join(timeout=30)
        finals = {j: job(check, j) for j in jobs}
    succeeded = Counter(o.job_id for o in outcomes if o.status == "succeeded")
    for job_id, final in finals.items():
        assert final["state"] == "succeeded"
        assert succeeded[job_id] == 1, f"{job_id}: {succeeded[job_id]} workers think they completed it"
        winner = next(o for o in outcomes if o.job_id == job_id and o.status == "succeeded")
        assert final["fencing_token"] == winner.fencing_token
        assert final["result"]["token"] == winner.fencing_token
