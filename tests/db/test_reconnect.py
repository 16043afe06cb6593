"""Reconnection after an outage, for every long-lived connection (console/db/lane.py): each user
comes back through its lane after a real server restart or a network cut, and a fleet cut off at
the same instant does not come back in lock-step (the backoff is jittered)."""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager

import pytest

from console.control.supervisor import Supervisor
from console.db import reads
from console.db.session import ConsoleSession
from console.operator import exporter
from console.worker import Worker
from tests.db.test_exporter_honesty import scrape
from tests.helpers import cancel, enqueue, job, register_agent, register_tool, request_shutdown, wait_until
from tests.netproxy import DbProxy

FLEET = 6
OUTAGE = 4.5


def test_a_fleet_cut_off_at_once_does_not_reconnect_in_lock_step(db):
    """Six workers, each behind a proxy of its own (so that each attempt is known to be its), lose
    the database at the same instant. Before, every worker retried after 0.05, 0.1, 0.2, 0.4 ... s,
    the same for all: each of its attempts fell within a few milliseconds of every other worker's.
    Now each waits a random part of a window that doubles: the k-th attempts spread out."""
    proxies = [DbProxy(db.dsn) for _ in range(FLEET)]
    stop = threading.Event()
    workers = [Worker(proxy.dsn, f"fleet-{i}", lambda ctx: {"ok": True}, poll_interval=0.05)
               for i, proxy in enumerate(proxies)]
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in workers]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 15
        while not all(p.arrivals for p in proxies):  # every worker polls through its connection
            assert time.monotonic() < deadline, "the workers did not connect"
            time.sleep(0.05)
        time.sleep(0.3)
        cut = time.monotonic()
        for proxy in proxies:
            proxy.cut()
        time.sleep(OUTAGE)
        attempts = [[t - cut for t in p.arrivals if t > cut] for p in proxies]
        for proxy in proxies:
            proxy.restore()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
        for proxy in proxies:
            proxy.close()
    assert all(len(a) >= 3 for a in attempts), f"each worker tried again during the outage: {attempts}"
    spreads = [max(a[k] for a in attempts) - min(a[k] for a in attempts) for k in range(3)]
    assert spreads[2] > 0.3, f"the workers' third attempts came within {spreads[2]:.3f} s of each other"
    assert statistics.mean(spreads) > 0.2, f"the workers retried in lock-step: spreads {spreads}"
    # and none waited longer than the cap between two attempts
    for a in attempts:
        assert all(later - earlier <= 10.0 + 1.0 for earlier, later in itertools.pairwise(a)), a


# ----------------------------------------------------------------------------- each user, through its lane


@contextmanager
def running(run: Callable[[threading.Event], object]) -> Iterator[None]:
    """`run(stop)` in a thread of its own while the block runs; then stopped, and awaited."""
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=15)


def test_a_worker_cut_off_for_less_than_its_lease_keeps_its_call(db):
    """Both of the worker's lanes lose the database while a call runs; the heartbeat retries as
    its lane allows (never later than H), renews once the network is back, and the call completes
    under the token it was claimed with."""
    with db.connect() as conn:
        register_tool(conn, "slow", "read_only", lease_seconds=6, heartbeat_seconds=0.5, missed_heartbeats=2,
                      jitter_seconds=2)
        call = enqueue(conn, "slow")["id"]
        proxy = DbProxy(db.dsn)
        worker = Worker(proxy.dsn, "w-cut", lambda ctx: ctx.sleep(4) or {"ok": True}, poll_interval=0.05,
                        concurrency=2)
        with closing(proxy), running(worker.run):
            wait_until(lambda: job(conn, call)["state"] == "running", what="the claim")
            wait_until(lambda: worker.renewal_stats.renewed >= 1, what="a first renewal")
            proxy.cut()
            wait_until(lambda: worker._hb.state.down and worker._main.state.down, timeout=5,
                       what="both lanes to find the database gone")
            assert worker._hb.state.next_attempt_in is not None
            time.sleep(1.0)
            proxy.restore()
            wait_until(lambda: job(conn, call)["state"] == "succeeded", timeout=15, what="the call to complete")
            assert job(conn, call)["fencing_token"] == 1, "never lost, never reclaimed"
            wait_until(lambda: worker._main.state.connected, timeout=15, what="the claim lane back")
            assert not worker._hb.state.down and not worker._main.state.down


def test_the_supervisor_comes_back_through_its_lanes_after_a_cut(db):
    with db.connect() as conn:
        register_agent(conn, "planner-9")
        proxy = DbProxy(db.dsn)
        supervisor = Supervisor(proxy.dsn, supervisor_id="sup-cut", interval=0.2, sweep_interval=0.5)
        with closing(proxy), running(supervisor.run):
            wait_until(lambda: supervisor._steps.state.connected and supervisor._wakeups.state.connected,
                       what="the supervisor's connections")
            proxy.cut()
            wait_until(lambda: supervisor._wakeups.state.down, timeout=5, what="the listener to find the cut")
            time.sleep(1.0)
            proxy.restore()
            shutdown = request_shutdown(conn, "planner-9", window=1)
            assert shutdown is not None
            wait_until(lambda: conn.execute("select state from shutdowns where id = %s",
                                            (shutdown["id"],)).fetchone()["state"] == "terminated",
                       timeout=30, what="the supervisor to carry the drain out after the cut")
            assert not supervisor._steps.state.down and not supervisor._wakeups.state.down


def test_the_console_listener_comes_back_through_its_lane_after_a_cut(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only")
        ids = [enqueue(conn, "search", f"listen-{i}")["id"] for i in range(2)]
        proxy = DbProxy(db.dsn)
        session = ConsoleSession(proxy.dsn, operator="alice")
        states: list[bool] = []
        heard: list[dict] = []
        with closing(proxy), closing(session), running(lambda stop: session.listen(heard.append, stop, states.append)):
            wait_until(lambda: states == [True], what="the listener to connect")
            proxy.cut()
            wait_until(lambda: False in states, timeout=5, what="the listener to report the loss")
            assert session.listen_lane.state.down
            proxy.restore()
            wait_until(lambda: states[-1] is True, timeout=15, what="the listener to reconnect")
            cancel(conn, ids[1], "queued", 0, reason="after the cut")
            wait_until(lambda: any(str(ids[1]) in str(note) for note in heard), timeout=10,
                       what="a change announced after the cut to reach the console")


def test_after_a_server_restart_every_user_comes_back_through_its_lane(db):
    """One real restart (immediate mode: every connection dies) under a worker, the supervisor,
    the console's listener and reads, and the exporter: each reconnects by itself."""
    if not db.server.can_restart:
        pytest.skip("set LEASECTL_TEST_RESTART_CMD to restart this server from the tests")
    with db.connect() as conn:
        register_tool(conn, "search", "read_only")
        register_agent(conn, "planner-7")
    stop = threading.Event()
    worker = Worker(db.dsn, "w-restart", lambda ctx: {"ok": True}, poll_interval=0.05)
    supervisor = Supervisor(db.dsn, supervisor_id="sup-restart", interval=0.2, sweep_interval=0.5)
    session = ConsoleSession(db.dsn, operator="alice")
    states: list[bool] = []
    threads = [threading.Thread(target=worker.run, args=(stop,), daemon=True),
               threading.Thread(target=supervisor.run, args=(stop,), daemon=True),
               threading.Thread(target=session.listen, args=(lambda _note: None, stop, states.append), daemon=True)]
    running = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=0, fold_every=None)
    try:
        session.open()
        for thread in threads:
            thread.start()
        wait_until(lambda: states == [True] and worker._main.state.connected and supervisor._wakeups.state.connected,
                   what="everyone connected")
        assert scrape(running.url)["leasectl_up"] == 1
        db.server.restart()
        with db.connect() as conn:
            call = enqueue(conn, "search", "after-restart")["id"]
            shutdown = request_shutdown(conn, "planner-7", window=1)
            assert shutdown is not None
            wait_until(lambda: job(conn, call)["state"] == "succeeded", timeout=30,
                       what="the worker to claim and complete a call enqueued after the restart")
            wait_until(lambda: conn.execute("select state from shutdowns where id = %s",
                                            (shutdown["id"],)).fetchone()["state"] == "terminated",
                       timeout=30, what="the supervisor to carry out a drain requested after the restart")
        wait_until(lambda: states[-1] is True and False in states, timeout=30, what="the listener to come back")
        assert session.read(lambda c: reads.job(c, call)).state == "succeeded"
        assert scrape(running.url)["leasectl_up"] == 1, "the exporter's dead connection is not a dead database"
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
        session.close()
        running.stop()
