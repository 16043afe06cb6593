"""8 worker processes x 2,000 calls, killed (SIGKILL) at random and restarted, sometimes under
the same worker name; once with one call at a time per process, once with several (concurrency 4:
each kill interrupts up to four calls, and their leases are renewed by one statement per beat).
Afterwards, from the workers' own journals and the database's history:

* nothing acknowledged is lost: every call succeeded, and every completion a worker was told
  about is the one the database kept (same token, same result);
* tokens strictly increase per call;
* no call ever had two owners with a valid lease: no write by token T was accepted after a claim
  of a higher token, and every change of owner happened after the previous lease had expired.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime

import pytest
from psycopg.types.json import Jsonb

from console.db import sql
from tests.conftest import ROOT
from tests.helpers import register_tool

WORKERS = int(os.environ.get("LEASECTL_STRESS_WORKERS", "8"))
CALLS_PER_WORKER = int(os.environ.get("LEASECTL_STRESS_CALLS", "2000"))


def spawn(dsn: str, worker_id: str, journal: str, concurrency: int = 1) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.procs.stress_worker", "--dsn", dsn,
                             "--worker-id", worker_id, "--journal", journal, "--concurrency", str(concurrency)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def read_journals(directory) -> list[tuple[str, str, int, datetime | None, str]]:
    lines = []
    for path in directory.iterdir():
        for raw in path.read_text().splitlines():
            parts = raw.split()
            if len(parts) != 4:
                continue  # a line cut short by SIGKILL: never acknowledged to anyone
            kind, job_id, token, when = parts
            lines.append((kind, job_id, int(token), None if when == "-" else datetime.fromisoformat(when),
                          path.stem))
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("concurrency", [1, 4])
def test_random_kills_never_give_two_owners_and_lose_nothing(db, tmp_path, concurrency):
    total = WORKERS * CALLS_PER_WORKER
    journals = tmp_path / "journals"
    journals.mkdir()
    with db.connect() as conn:
        # this test kills workers, never the server: commit durability is not what it checks, and
        # waiting for a WAL flush per commit would make it measure the disk instead
        conn.execute(f'alter database "{db.name}" set synchronous_commit = off')
        register_tool(conn, "noop", "read_only", lease_seconds=1.0, heartbeat_seconds=0.2,
                      missed_heartbeats=2, jitter_seconds=0.2, max_attempts=1000)
        enqueue = sql.load("worker/enqueue")
        with conn.cursor() as cur:
            cur.executemany(enqueue.text, [
                enqueue.bind(dict(tool="noop", idempotency_key=f"stress-{i}", payload=Jsonb({"i": i}),
                                  agent_id=None, session_id=None, deadline_at=None, model=None,
                                  provider=None))
                for i in range(total)])
        assert conn.execute("select count(*) as n from tool_jobs").fetchone()["n"] == total

        rng = random.Random(20261202)
        procs: dict[int, tuple[str, subprocess.Popen]] = {}
        generation = 0
        for slot in range(WORKERS):
            name = f"w{slot}"
            procs[slot] = (name, spawn(db.dsn, name, str(journals / f"{name}-g0"), concurrency))
        kills = 0
        deadline = time.monotonic() + 600
        try:
            while True:
                left = conn.execute("select count(*) as n from tool_jobs where state <> 'succeeded'"
                                    ).fetchone()["n"]
                if left == 0:
                    break
                assert time.monotonic() < deadline, f"{left} calls still not done"
                time.sleep(rng.uniform(0.5, 1.5))
                slot = rng.randrange(WORKERS)
                name, proc = procs[slot]
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                generation += 1
                # half the time the restarted worker reuses its logical name: only the token tells
                # the old incarnation from the new one
                new_name = name if rng.random() < 0.5 else f"w{slot}r{generation}"
                procs[slot] = (new_name, spawn(db.dsn, new_name, str(journals / f"{new_name}-g{generation}"),
                                               concurrency))
        finally:
            for _name, proc in procs.values():
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        assert kills >= 5

        finals = {str(r["id"]): r for r in conn.execute(
            "select id, state, fencing_token, owner_id, result from tool_jobs")}
        grants = defaultdict(list)
        for ev in conn.execute("select job_id, kind, fencing_token, at, owner_to, details from job_events "
                               "where kind in ('claimed', 'reclaimed') order by id"):
            grants[str(ev["job_id"])].append(ev)

    assert len(finals) == total and all(f["state"] == "succeeded" for f in finals.values())

    # tokens strictly increase per call, and every new owner came after the old lease expired
    for job_id, evs in grants.items():
        tokens = [e["fencing_token"] for e in evs]
        assert tokens == sorted(set(tokens)), (job_id, tokens)
        for e in evs:
            previous_lease = e["details"].get("previous_lease_until")
            if previous_lease:
                assert datetime.fromisoformat(previous_lease) < e["at"], (job_id, e)
        assert finals[job_id]["fencing_token"] == tokens[-1]

    journal = read_journals(journals)
    completes = defaultdict(list)
    for kind, job_id, token, when, _who in journal:
        if kind == "complete":
            completes[job_id].append((token, when))
        if kind in ("heartbeat", "complete") and when is not None:
            later_grants = [g["at"] for g in grants[job_id] if g["fencing_token"] > token]
            assert all(when < at for at in later_grants), \
                f"{kind} with token {token} accepted after a newer owner took {job_id}"

    # every acknowledged completion is the one the database kept
    for job_id, acks in completes.items():
        assert len(acks) == 1, f"{job_id} was acknowledged as completed {len(acks)} times"
        token, _when = acks[0]
        final = finals[job_id]
        assert final["fencing_token"] == token and final["result"]["token"] == token
    reclaimed = sum(1 for evs in grants.values() if len(evs) > 1)
    print(f"\nconcurrency {concurrency}: {total} calls, {kills} kills, {reclaimed} calls reclaimed after a kill, "
          f"{len(completes)} completions acknowledged in journals")
    assert reclaimed > 0, "the kills must actually have interrupted calls"
