"""`leasectl metrics serve` under trouble: `leasectl_up` said 1 for the cache's life
after the database died, and every idle socket held a thread (1,500 idle sockets: 1,502 threads).
Now a scrape that cannot reach the database says `leasectl_up 0` whatever is cached, values served
from the cache carry their age, and idle sockets wait without a thread while a real scrape is
answered."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest

from console.operator import exporter
from tests.helpers import enqueue, register_tool, wait_until
from tests.netproxy import DbProxy


def scrape(url: str) -> dict[str, float]:
    """Every sample without labels, and leasectl_calls by `tool/state`."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        series, value = line.rsplit(" ", 1)
        samples[series] = float(value)
    return samples


@pytest.fixture
def queued(db):
    with db.connect() as conn:
        register_tool(conn, "alpha", "read_only")
        enqueue(conn, "alpha")
        yield conn


def test_up_goes_0_on_the_first_scrape_that_cannot_reach_the_database_even_with_a_cache(db, queued):
    proxy = DbProxy(db.dsn)
    running = exporter.start(proxy.dsn, "127.0.0.1:0", cache_seconds=60, fold_every=None)
    try:
        good = scrape(running.url)
        assert good["leasectl_up"] == 1 and good['leasectl_calls{state="queued",tool="alpha"}'] == 1
        proxy.cut()
        bad = scrape(running.url)  # well within the cache's 60 s
        assert bad == {"leasectl_up": 0}, "the database is gone: up 0, and nothing stale passed off as fresh"
    finally:
        running.stop()
        proxy.close()


def test_values_served_from_the_cache_say_their_age(db, queued):
    running = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=60, fold_every=None)
    try:
        fresh = scrape(running.url)
        assert fresh["leasectl_up"] == 1 and fresh["leasectl_data_age_seconds"] == 0
        time.sleep(0.3)
        cached = scrape(running.url)  # within the cache, the database alive: cached values, and their age
        assert cached["leasectl_up"] == 1 and cached['leasectl_calls{state="queued",tool="alpha"}'] == 1
        assert cached["leasectl_data_age_seconds"] >= 0.3
        assert running.collector.reads == 1, "a burst within the cache still costs one read"
    finally:
        running.stop()


def test_a_connection_killed_under_the_exporter_is_not_a_dead_database(db, queued):
    """A server restart or pg_terminate_backend kills the exporter's idle connection; the database
    itself answers: the next scrape reconnects and says up 1."""
    running = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=60, fold_every=None)
    try:
        assert scrape(running.url)["leasectl_up"] == 1
        queued.execute("select pg_terminate_backend(pid, 10000) from pg_stat_activity "
                       "where datname = current_database() and application_name = 'leasectl-exporter'")
        again = scrape(running.url)
        assert again["leasectl_up"] == 1, again
    finally:
        running.stop()


def test_idle_sockets_do_not_each_hold_a_thread_and_a_real_scrape_is_answered(db, queued):
    idle = 300
    running = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=0, fold_every=None)
    host, port = running.address
    sockets: list[socket.socket] = []
    try:
        assert scrape(running.url)["leasectl_up"] == 1
        before = threading.active_count()
        for _ in range(idle):
            sockets.append(socket.create_connection((host, port), timeout=5))  # connects, says nothing
        time.sleep(1.0)  # let the server accept them all
        grown = threading.active_count() - before
        assert grown <= 8, f"{idle} idle sockets made {grown} threads"
        started = time.monotonic()
        answer = scrape(running.url)
        assert answer["leasectl_up"] == 1 and answer['leasectl_calls{state="queued",tool="alpha"}'] == 1
        assert time.monotonic() - started < 5, "a real scrape waits behind no idle socket"
        assert threading.active_count() - before <= 8
    finally:
        for s in sockets:
            s.close()
        running.stop()


def test_a_socket_idle_for_too_long_is_closed(db):
    running = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=0, fold_every=None)
    running.server.idle_seconds = 0.5
    try:
        with socket.create_connection(running.address, timeout=10) as s:
            wait_until(lambda: s.recv(1) == b"", timeout=10, what="the server to close the idle socket")
    finally:
        running.stop()
