"""A lane (console/db/lane.py) on a real server: what it says after a restart and once it is back,
its read and action rules, its setup, and N lanes cut off at one instant coming back at the
instants their own jittered backoff says -- not all at once."""

from __future__ import annotations

import random
import threading
import time

import pytest

from console.db.connect import Conn, ping, run, run_one
from console.db.lane import Backoff, Lane, LaneBusy
from console.shared.errors import DatabaseUnavailable, SchemaError
from tests.netproxy import DbProxy


def backend_pid(conn: Conn) -> int:
    """Asked of the server: a round trip, which finds a dead connection dead."""
    return conn.execute("select pg_backend_pid() as pid").fetchone()["pid"]


def terminate(db, pid: int) -> None:
    with db.connect() as admin:
        admin.execute("select pg_terminate_backend(%s, 10000)", (pid,))


def test_after_a_server_restart_the_loss_is_reported_once_and_the_next_use_reconnects(db):
    if not db.server.can_restart:
        pytest.skip("set LEASECTL_TEST_RESTART_CMD to restart this server from the tests")
    lane = Lane(db.dsn, application_name="test-lane")
    try:
        before = lane.run(backend_pid)
        assert lane.state.connected and not lane.state.down
        db.server.restart()  # immediate mode: every backend gets 57P01
        with pytest.raises(DatabaseUnavailable):
            lane.run(ping)  # `run` sends once: whatever it was, it is not sent again
        down = lane.state
        assert down.down and not down.connected and down.failures == 1
        assert down.next_attempt_in is not None and down.next_attempt_in <= 0.5, down
        lane.pause()
        assert lane.run(backend_pid) != before
        back = lane.state
        assert back.connected and not back.down and back.failures == 0 and back.next_attempt_in is None
    finally:
        lane.close()


def test_a_read_runs_once_more_on_a_fresh_connection_an_action_is_sent_once(db):
    lane = Lane(db.dsn, application_name="test-lane")
    try:
        terminate(db, lane.run(backend_pid))
        sent: list[int] = []

        def read(conn: Conn) -> int:
            sent.append(1)
            return backend_pid(conn)

        lane.read(read)
        assert len(sent) == 2, "the dead connection's try, then the fresh one's"
        terminate(db, lane.run(backend_pid))
        sent.clear()
        lane.act(read)
        assert len(sent) == 1, "the ping found the connection dead before anything of the action left"
        assert lane.state.connected and lane.state.failures == 0
    finally:
        lane.close()


def test_setup_read_only_and_the_schema_check_run_on_every_new_connection(db, empty_db):
    seen: list[int] = []
    lane = Lane(db.dsn, application_name="test-lane", read_only=True, check_schema=True,
                setup=lambda conn: seen.append(backend_pid(conn)))
    try:
        first = lane.run(backend_pid)
        assert lane.run(lambda c: run_one(c, "meta/ping")) is not None
        assert lane.run(lambda c: c.execute("show default_transaction_read_only").fetchone())[
            "default_transaction_read_only"] == "on"
        terminate(db, first)
        second = lane.read(backend_pid)
        assert seen == [first, second]
    finally:
        lane.close()
    wrong = Lane(empty_db.dsn, check_schema=True)
    with pytest.raises(SchemaError):
        wrong.run(ping)
    assert not wrong.state.down, "a database that answers is not down: its schema is the trouble"


def test_a_busy_lane_makes_a_bounded_caller_wait_no_longer(db):
    lane = Lane(db.dsn, application_name="test-lane")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lane.use():
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        with pytest.raises(LaneBusy):
            lane.run(ping, wait=0.2)
        assert time.monotonic() - started < 2
    finally:
        release.set()
        thread.join()
        lane.close()


def test_lanes_cut_off_at_one_instant_come_back_at_the_instants_their_backoff_says(db):
    """Eight lanes lose the database together. Each retries when its own backoff says (seeded
    here, so the schedule is known): the k-th attempts of the lanes fall at different instants,
    and each attempt comes no earlier than its schedule, after a wait no longer than its delay.
    The waits are checked as the lanes ask for them: on a loaded machine the attempts themselves
    can come a second late, and closer together, for that alone."""
    lanes_n, tries = 8, 4
    proxy = DbProxy(db.dsn)
    seeds = [random.Random(i) for i in range(lanes_n)]
    lanes = [Lane(proxy.dsn, application_name=f"test-lane-{i}", backoff=Backoff(rand=seeds[i].random))
             for i in range(lanes_n)]
    # the same draws, to know the schedule: attempt k comes after the delays of failures 1..k
    schedules = []
    for i in range(lanes_n):
        rng = random.Random(i)
        at, schedule = 0.0, [0.0]
        for failures in range(1, tries):
            at += rng.random() * min(10.0, 0.5 * 2 ** (failures - 1))
            schedule.append(at)
        schedules.append(schedule)
    attempts: list[list[float]] = [[] for _ in lanes]
    asked: list[list[float]] = [[] for _ in lanes]  # the wait each pause asked for (0: due already)
    stop = threading.Event()

    class Told(threading.Event):
        """`stop` as lane i sees it: what it asks to wait is written down."""

        def __init__(self, i: int) -> None:
            super().__init__()
            self.i = i

        def wait(self, timeout: float | None = None) -> bool:
            asked[self.i].append(-1.0 if timeout is None else timeout)
            return stop.wait(timeout)

        def is_set(self) -> bool:
            return stop.is_set()

    def retry(i: int) -> None:
        told = Told(i)
        while not stop.is_set() and len(attempts[i]) < tries:
            attempts[i].append(time.monotonic())
            try:
                lanes[i].run(ping)
            except DatabaseUnavailable:
                before = len(asked[i])
                lanes[i].pause(told)
                if len(asked[i]) == before:
                    asked[i].append(0.0)

    try:
        for lane in lanes:
            lane.connect()
        proxy.cut()
        start = time.monotonic()
        threads = [threading.Thread(target=retry, args=(i,)) for i in range(lanes_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        stop.set()
        proxy.close()
        for lane in lanes:
            lane.close()
    for i in range(lanes_n):
        assert len(attempts[i]) == tries
        for k in range(1, tries):
            late = attempts[i][k] - start - schedules[i][k]
            assert late >= -0.01, f"lane {i} tried {-late:.3f} s before its backoff allowed"
            delay = schedules[i][k] - schedules[i][k - 1]
            # counted from its failure, the wait asked is the delay drawn, less the moments since
            assert 0 <= asked[i][k - 1] <= delay + 0.001, f"lane {i} asked {asked[i][k - 1]:.3f} s, its delay {delay:.3f} s"
            assert late < 10.0, f"lane {i} tried {late:.3f} s after its backoff allowed"
    for k in range(1, tries):
        planned = [s[k] for s in schedules]
        assert max(planned) - min(planned) > 0.3, "the seeds chosen spread the lanes"  # the test's own check
    # so the attempts were jittered: each lane waited no less (late >= 0) and asked no more than its
    # own draw, and the draws differ; lanes in lock-step would be early or ask too much


def test_a_listen_setup_is_made_again_after_a_loss(db):
    lane = Lane(db.dsn, application_name="test-lane-listen", setup=lambda conn: run(conn, "meta/listen"))
    try:
        terminate(db, lane.run(backend_pid))
        with pytest.raises(DatabaseUnavailable):
            lane.run(lambda conn: list(conn.notifies(timeout=0.5, stop_after=1)))
        assert lane.state.down
        listening = lane.run(lambda conn: conn.execute(
            "select count(*) as n from pg_listening_channels() c where c = 'leasectl_jobs'").fetchone()["n"])
        assert listening == 1, "the new connection LISTENs again"
    finally:
        lane.close()
