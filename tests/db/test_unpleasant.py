"""The unpleasant test of docs/seeds.md §000.18, with real processes.

W1 claims and sends a request to the receiver; W1 is frozen (SIGSTOP) past its lease; W2 claims
and does the work; W1 resumes. Its heartbeat and its result get nowhere, the receiver saw no
second effect from W1, and job_events tells the story. Once per side-effect class, and once more with W1 holding three
calls at once (concurrency 3).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from console.db.connect import run, run_one
from console.worker.receiver import FencedReceiver, ReceiverClient, ReceiverServer, StaleFence
from tests.conftest import ROOT
from tests.helpers import complete, enqueue, events, expire_lease, job, register_tool, sweep, wait_until


def spawn(dsn: str, worker_id: str, receiver_url: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.procs.worker_proc", "--dsn", dsn, "--worker-id", worker_id,
         "--receiver", receiver_url, *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


@pytest.fixture
def receiver_for():
    servers = []

    def make(verifiable: bool) -> tuple[FencedReceiver, str]:
        receiver = FencedReceiver(name="api", verifiable=verifiable)
        server = ReceiverServer(receiver).start()
        servers.append(server)
        return receiver, server.url

    yield make
    for s in servers:
        s.stop()


@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("side_effect", ["read_only", "mutating_verifiable", "mutating_unverifiable"])
def test_frozen_worker_wakes_after_its_lease_was_taken(db, receiver_for, side_effect, concurrency):
    """With concurrency 1, W1 holds one call; with 3, W1 holds three at once (three threads, one
    heartbeat statement for the three leases) and the freeze takes all three from it."""
    receiver, url = receiver_for(verifiable=side_effect != "mutating_unverifiable")
    objects = [f"inv-{7 + i}" for i in range(concurrency)]
    n = len(objects)
    procs: list[subprocess.Popen] = []
    try:
        with db.connect() as conn:
            register_tool(conn, "tool", side_effect, lease_seconds=1.5, heartbeat_seconds=0.3,
                          missed_heartbeats=2, jitter_seconds=0.3)
            calls = [enqueue(conn, "tool", f"{obj}:capture", {"object": obj, "work_seconds": 4}) for obj in objects]

            w1 = spawn(db.dsn, "W1", url, "--max-calls", str(n), "--concurrency", str(concurrency))
            procs.append(w1)
            wait_until(lambda: len(receiver.effects) == n or w1.poll() is not None, timeout=20,
                       what="W1's requests")
            assert w1.poll() is None, w1.communicate()[0]
            os.kill(w1.pid, signal.SIGSTOP)
            for call in calls:
                expire_lease(conn, call["id"])

            if side_effect == "mutating_unverifiable":
                assert [s["state_to"] for s in sweep(conn)] == ["outcome_unknown"] * n
                w2 = spawn(db.dsn, "W2", url, "--seconds", "1.5", "--concurrency", str(concurrency))
            else:
                w2 = spawn(db.dsn, "W2", url, "--max-calls", str(n), "--concurrency", str(concurrency))
            procs.append(w2)
            w2_out = w2.communicate(timeout=30)[0]
            assert w2.returncode == 0, w2_out

            os.kill(w1.pid, signal.SIGCONT)
            w1_out = w1.communicate(timeout=30)[0]
            assert w1.returncode == 0, w1_out
            assert len(receiver.effects) == n, "nobody did anything twice"

            for call, obj in zip(calls, objects, strict=True):
                final = job(conn, call["id"])
                history = events(conn, call["id"])
                w1_events = [(e["kind"], e["fencing_token"]) for e in history if e["actor"] == "W1"]
                assert ("heartbeat_lost", 1) in w1_events, w1_out
                assert ("result_rejected", 1) in w1_events, w1_out
                # W1's identity gets zero rows from every guarded write, whatever it tries now
                w1_view = {"id": call["id"], "fencing_token": 1}
                assert complete(conn, w1_view, "W1", {"by": "W1"}) is None
                assert run_one(conn, "worker/heartbeat", job_id=call["id"], worker_id="W1", fencing_token=1) is None
                assert run(conn, "worker/heartbeat_many", job_ids=[call["id"]], worker_id="W1",
                           fencing_tokens=[1]) == []
                assert run_one(conn, "worker/start_side_effect", job_id=call["id"], worker_id="W1",
                               fencing_token=1, external_request_id="late") is None

                w1_effects = [e for e in receiver.effects if e.sender == "W1" and e.object_id == obj]
                assert len(w1_effects) == 1 and w1_effects[0].fence == 1, "one effect from W1: before the freeze"
                assert len([e for e in receiver.effects if e.object_id == obj]) == 1, "nobody did it twice"

                if side_effect == "mutating_unverifiable":
                    assert final["state"] == "outcome_unknown", "nobody retries it: it waits for a human"
                    assert final["fencing_token"] == 1 and "W2" not in w2_out.replace("--worker-id W2", "")
                    assert final["health"] == "outcome_unknown"
                    assert not any(e["actor"] == "W2" for e in history)
                else:
                    assert final["state"] == "succeeded" and final["fencing_token"] == 2
                    assert final["result"]["by"] == "W2", "the result is the new owner's"
                    assert receiver.highest_fence(obj) == 2
                    with pytest.raises(StaleFence):  # the zombie's late request, straight to the API
                        ReceiverClient(url).submit(object_id=obj, idempotency_key=f"{obj}:late", fence=1,
                                                   operation="capture", sender="W1")
                    if side_effect == "mutating_verifiable":
                        checked = [e for e in history if e["kind"] == "side_effect_checked"]
                        assert checked and checked[0]["actor"] == "W2" and checked[0]["details"]["found"] == "done"
                        assert final["result"]["verified"] is True, "W2 checked the status instead of redoing it"

                story = [(e["kind"], e["actor"], e["fencing_token"]) for e in history]
                claimed = [s for s in story if s[0] in ("claimed", "reclaimed")]
                assert claimed[0] == ("claimed", "W1", 1)
                if side_effect != "mutating_unverifiable":
                    # reclaimed directly by W2's claim, or requeued by a sweep then claimed
                    assert claimed[-1][1:] == ("W2", 2)
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
