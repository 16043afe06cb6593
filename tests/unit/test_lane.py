"""The one reconnection policy (console/db/lane.py), without a database: full jitter over a window
that doubles from the base to the cap, deterministic with a seeded random source; and what a
lane says about itself while the database cannot be reached."""

from __future__ import annotations

import random
import socket
import threading
from datetime import UTC, datetime

import pytest

from console.db.connect import ping
from console.db.lane import (
    RECONNECT_BASE_SECONDS,
    RECONNECT_CAP_SECONDS,
    Backoff,
    Lane,
    reconnect_delay,
    reconnect_window,
)
from console.shared.errors import DatabaseUnavailable, SchemaError


def test_the_window_doubles_from_the_base_up_to_the_cap():
    assert RECONNECT_BASE_SECONDS == 0.5 and RECONNECT_CAP_SECONDS == 10.0  # the README says so
    assert [reconnect_window(n) for n in range(8)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert reconnect_window(100_000) == 10.0, "no overflow however long the outage"
    assert [reconnect_window(n, base=1.0, cap=3.0) for n in range(1, 5)] == [1.0, 2.0, 3.0, 3.0]


def test_growth_and_cap_with_the_top_of_every_window():
    backoff = Backoff(rand=lambda: 1.0)
    assert [backoff.failed() for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_a_seeded_source_gives_the_same_delays_and_each_lies_in_its_window():
    first = Backoff(rand=random.Random(42).random)
    again = Backoff(rand=random.Random(42).random)
    delays = [first.failed() for _ in range(12)]
    assert delays == [again.failed() for _ in range(12)], "deterministic with a seeded random"
    for n, delay in enumerate(delays, start=1):
        assert 0.0 <= delay <= reconnect_window(n), (n, delay)
    assert delays != [reconnect_window(n) for n in range(1, 13)], "jittered, not the bare doubling"


def test_full_jitter_covers_the_whole_window():
    rng = random.Random(7)
    for failures in (1, 3, 6, 40):
        window = reconnect_window(failures)
        draws = [reconnect_delay(failures, rand=rng.random) for _ in range(5_000)]
        assert min(draws) >= 0.0 and max(draws) <= window
        assert min(draws) < 0.02 * window and max(draws) > 0.98 * window, "from (almost) 0 to the window"
        assert sum(draws) / len(draws) == pytest.approx(window / 2, rel=0.05), "uniform: the mean is half"
    assert reconnect_delay(0, rand=rng.random) == 0.0, "no failure, no wait"


def test_two_default_sources_draw_different_delays():
    """Two lanes (two processes) made alike still wait differently: each backoff has its own source."""
    a, b = Backoff(), Backoff()
    assert [a.failed() for _ in range(5)] != [b.failed() for _ in range(5)]


def test_a_success_starts_the_count_over():
    backoff = Backoff(rand=lambda: 1.0)
    for _ in range(6):
        backoff.failed()
    assert backoff.failures == 6 and backoff.window == 10.0
    backoff.succeeded()
    assert backoff.failures == 0 and backoff.window == 0.0
    assert backoff.failed() == 0.5, "the first failure after a success waits at most the base again"


# ----------------------------------------------------------------------------- a lane that cannot connect


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refused_dsn() -> str:
    """A port where nothing listens: connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"host=127.0.0.1 port={port} dbname=nobody user=nobody connect_timeout=2"


@pytest.fixture
def lane():
    clock = FakeClock()
    draws = iter([0.5, 0.25, 1.0, 0.0])
    wall = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)
    lane = Lane(refused_dsn(), application_name="test-lane", backoff=Backoff(rand=lambda: next(draws)),
                clock=clock, wall_clock=lambda: wall)
    lane.fake_clock = clock  # type: ignore[attr-defined]
    yield lane
    lane.close()


def test_a_lane_that_cannot_connect_says_since_when_and_when_it_tries_again(lane):
    clock = lane.fake_clock
    fresh = lane.state
    assert not fresh.connected and not fresh.down and fresh.next_attempt_in is None and fresh.failures == 0
    assert lane.retry_in() is None and lane.pause() is False, "nothing to wait for before a failure"

    with pytest.raises(DatabaseUnavailable):
        lane.run(ping)
    down = lane.state
    assert down.down and not down.connected and down.failures == 1
    assert down.down_since == datetime(2026, 12, 3, 2, 13, tzinfo=UTC)
    assert down.next_attempt_in == pytest.approx(0.25), "half of the first window (0.5 s)"
    assert "cannot connect" in (down.last_error or "")

    clock.now += 0.1
    assert lane.retry_in() == pytest.approx(0.15), "counts down on the lane's clock"
    with pytest.raises(DatabaseUnavailable):
        lane.run(ping)  # a caller is never held back: it connects when asked
    again = lane.state
    assert again.failures == 2 and again.next_attempt_in == pytest.approx(0.25), "a quarter of 1 s"
    assert again.down_since == down.down_since, "the outage dates from its first failure"

    with pytest.raises(DatabaseUnavailable):
        lane.read(ping)  # never connected: nothing reused, so no second try
    assert lane.state.failures == 3 and lane.state.next_attempt_in == pytest.approx(2.0)

    clock.now += 5
    assert lane.retry_in() == 0.0, "due"
    stop = threading.Event()
    stop.set()
    assert lane.pause(stop) is True, "a set stop ends the pause"


def test_a_user_may_give_up_on_a_connection_and_wait_like_after_a_loss(lane):
    lane.drop(failure=SchemaError("the schema changed under us"))
    state = lane.state
    assert state.down and state.failures == 1 and state.last_error == "the schema changed under us"
    lane.close()
    assert lane.state.failures == 1, "closing is not a success"


def test_a_callable_dsn_is_asked_at_each_connection():
    asked: list[str] = []
    dsn = refused_dsn()

    def where() -> str:
        asked.append(dsn)
        return dsn

    lane = Lane(where, backoff=Backoff(rand=lambda: 0.0))
    for _ in range(2):
        with pytest.raises(DatabaseUnavailable):
            lane.run(ping)
    assert len(asked) == 2
