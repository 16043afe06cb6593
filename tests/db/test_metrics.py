"""Metrics: every key of `leasectl metrics --json` computed right on a crafted history
(window edges, the split by tool, model and provider), counters that never go backwards (scrapes,
a fold, an exporter restart, pruning of folded history), the collector's cache, the database
unreachable at scrape time (HTTP 200, leasectl_up 0), and bad input."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from console.core.metrics import AcceptWaitTotals, MetricsGroup
from console.db import metrics
from console.db.connect import Conn, run, run_one
from console.operator import exporter
from console.operator.cli import app
from tests.conftest import ROOT
from tests.helpers import claim, enqueue, heartbeat, record_event, register_tool, sweep, wait_until
from tests.netproxy import DbProxy

T = datetime(2026, 7, 23, 21, 14, 0, tzinfo=UTC)  # the display clock of the crafted history
CONTRACT_KEYS = {"key", "running", "oldest_heartbeat_age_seconds", "min_lease_left_seconds", "expired_leases",
                 "renewal_failures", "reclaimed", "stale_writes_rejected", "queue_wait_seconds",
                 "start_confirm_seconds", "cancel_unheard", "outcome_unknown", "lock_timeouts", "statement_timeouts",
                 "accept_wait_seconds", "past_deadline"}


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


class Crafted:
    """Calls and history written exactly as given (triggers bypassed: exact mode, a superuser)."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        run(conn, "demo/exact_mode", on=True)

    def call(self, tool: str, state: str = "running", *, model: str | None = "m1", provider: str | None = "p1",
             **fields: Any) -> uuid.UUID:
        row: dict[str, Any] = dict(
            id=uuid.uuid4(), tool=tool, state=state, owner_id=None, lease_until=None, fencing_token=1,
            heartbeat_at=None, attempt=1, idempotency_key=f"k-{uuid.uuid4().hex}", payload=Jsonb({"n": 1}),
            result=None, error=None, agent_id=None, session_id=None, model=model, provider=provider,
            created_at=at(-600), claimed_at=None, finished_at=None, deadline_at=None, cancel_requested_at=None,
            cancel_requested_by=None, cancel_requested_reason=None, side_effect_started_at=None,
            external_request_id=None, retry_approved_by=None, retry_approved_at=None, retry_approved_reason=None,
            terminal_reason=None, completed_despite_cancel=False)
        row.update(fields)
        run_one(self.conn, "demo/insert_call", **row)
        return row["id"]

    def event(self, job_id: uuid.UUID, t: float, kind: str, *, token: int = 1, details: dict | None = None,
              **fields: Any) -> None:
        event = dict(job_id=job_id, at=at(t), kind=kind, actor="w-1", fencing_token=token, state_from=None,
                     state_to=None, owner_from=None, owner_to=None, lease_until=None, reason=None, request_id=None,
                     details=Jsonb(details or {}))
        event.update(fields)
        run_one(self.conn, "demo/insert_event", **event)

    def done(self) -> None:
        run(self.conn, "demo/exact_mode", on=False)
        run(self.conn, "meta/display_clock", clock=T.isoformat())


@pytest.fixture
def crafted(db):
    """Two tools, five kinds of live call, and a history with something of every metric, some of
    it just outside the one-hour window."""
    with db.connect() as conn:
        # H = 5, J = 5: heartbeat late after 10 s, cancel unheard after 2H + J = 15 s
        register_tool(conn, "alpha", "read_only", lease_seconds=30, heartbeat_seconds=5, missed_heartbeats=2,
                      jitter_seconds=5)
        register_tool(conn, "beta", "mutating_unverifiable", lease_seconds=30, heartbeat_seconds=5,
                      missed_heartbeats=2, jitter_seconds=5)
        c = Crafted(conn)
        live = c.call("alpha", owner_id="w-1", heartbeat_at=at(-10), lease_until=at(20), claimed_at=at(-90))
        expired = c.call("alpha", model="m2", provider="p2", owner_id="w-2", heartbeat_at=at(-40),
                         lease_until=at(-5), claimed_at=at(-100))
        c.call("alpha", "cancel_requested", owner_id="w-3", heartbeat_at=at(-2), lease_until=at(10),
               cancel_requested_at=at(-100), claimed_at=at(-200))  # unheard: asked 100 s ago
        c.call("alpha", "cancel_requested", owner_id="w-4", heartbeat_at=at(-1), lease_until=at(25),
               cancel_requested_at=at(-3), claimed_at=at(-200))  # asked 3 s ago: not yet unheard
        unknown = c.call("beta", "outcome_unknown", model="m2", provider="p2", owner_id="w-5")
        c.call("beta", "queued", model=None, provider=None, fencing_token=0, attempt=0)
        done = c.call("beta", "succeeded", model=None, provider=None, finished_at=at(-30))

        # renewal failures: inside, on the far edge (excluded: the window is (T-1h, T]), on the near edge
        c.event(live, -60, "heartbeat_lost")
        c.event(live, -3600, "heartbeat_lost")
        c.event(live, -3601, "heartbeat_lost")
        c.event(live, 0, "heartbeat_lost")
        c.event(live, -3599.5, "heartbeat_lost")
        # stale writes refused
        c.event(expired, -30, "result_rejected")
        c.event(expired, -31, "receiver_rejected")
        c.event(expired, -7200, "result_rejected")
        # reclaims: a takeover of an expired lease; a sweep requeue after the lease's end; a retryable
        # failure under a live lease (not a reclaim)
        c.event(expired, -50, "reclaimed", token=2, state_from="running", state_to="running")
        c.event(live, -70, "state_changed", state_from="running", state_to="queued",
                details={"previous_lease_until": at(-80).isoformat()})
        c.event(live, -65, "state_changed", state_from="running", state_to="queued",
                details={"previous_lease_until": at(5).isoformat()})
        # database errors by cause, from a worker and from an operator action; one with no cause
        c.event(unknown, -20, "database_error", details={"cause": "lock_timeout"})
        c.event(unknown, -21, "operator_action_failed", details={"cause": "lock_timeout", "action": "approve_retry"})
        c.event(done, -25, "operator_action_failed", details={"cause": "statement_timeout"})
        c.event(done, -26, "database_error", details={"error": "something else"})
        c.event(done, -4000, "database_error", details={"cause": "statement_timeout"})
        # queue wait: `live` was created at -600 and claimed at -590 (10 s, its first attempt);
        # `expired`, requeued at -300 and claimed again at -280 (20 s since the requeue, attempt 2);
        # `done` (no model), created at -600, claimed at -595 (5 s)
        c.event(live, -590, "claimed", details={"attempt": 1}, state_from="queued", state_to="running")
        c.event(expired, -300, "state_changed", state_from="running", state_to="queued",
                details={"previous_lease_until": at(-310).isoformat()})
        c.event(expired, -280, "claimed", token=2, details={"attempt": 2}, state_from="queued", state_to="running")
        c.event(done, -595, "claimed", details={"attempt": 1}, state_from="queued", state_to="running")
        # start confirmation: `live`'s claim (its row says claimed at -90, token 1) to its start at -85;
        # `expired`'s start under token 2, whose claim is found in the history (-280): 10 s; the old name
        c.event(live, -85, "tool_request_started", details={"external_request_id": "r-1"})
        c.event(expired, -270, "side_effect_started", token=2)
        c.done()
        yield conn


def groups(conn: Conn, by: str = "tool", window: float = 3600) -> dict[str | None, MetricsGroup]:
    report = metrics.report(conn, window_seconds=window, by=by)
    return {g.key: g for g in report.groups}


def test_every_key_on_a_crafted_history_by_tool(crafted):
    found = groups(crafted)
    assert set(found) == {"alpha", "beta"}
    a, b = found["alpha"], found["beta"]
    assert a.running == 2 and b.running == 0
    assert a.oldest_heartbeat_age_seconds == 40 and a.min_lease_left_seconds == -5
    assert b.oldest_heartbeat_age_seconds is None and b.min_lease_left_seconds is None
    assert a.expired_leases == 1 and b.expired_leases == 0
    assert a.cancel_unheard == 1
    assert (a.outcome_unknown, b.outcome_unknown) == (0, 1)
    assert a.renewal_failures == 3, "-60, 0 and -3599.5 are in the window; -3600 and -3601 are not"
    assert a.stale_writes_rejected == 2
    assert a.reclaimed == 3, "the takeover, the sweep's requeues after the lease's end (-70 and -300)"
    assert (b.lock_timeouts, b.statement_timeouts) == (2, 1)
    assert (a.lock_timeouts, a.statement_timeouts) == (0, 0)
    # alpha waited 10 s and 20 s: p50 15, p95 19.5 (linear interpolation, percentile_cont)
    assert a.queue_wait_seconds.p50 == pytest.approx(15) and a.queue_wait_seconds.p95 == pytest.approx(19.5)
    assert b.queue_wait_seconds.p50 == pytest.approx(5)
    # alpha's starts came 5 s and 10 s after their claims (the old kind counts as well)
    assert a.start_confirm_seconds.p50 == pytest.approx(7.5) and a.start_confirm_seconds.p95 == pytest.approx(9.75)
    assert b.start_confirm_seconds.p50 is None


def test_the_split_by_model_and_provider(crafted):
    by_model = groups(crafted, "model")
    assert set(by_model) == {"m1", "m2", None}
    m1, m2, none = by_model["m1"], by_model["m2"], by_model[None]
    assert (m1.running, m2.running) == (1, 1)
    assert (m1.expired_leases, m2.expired_leases) == (0, 1)
    assert m1.renewal_failures == 3 and m2.renewal_failures == 0
    assert m2.stale_writes_rejected == 2 and m2.outcome_unknown == 1
    assert (m1.reclaimed, m2.reclaimed) == (1, 2)
    assert m1.queue_wait_seconds.p50 == pytest.approx(10) and m2.queue_wait_seconds.p50 == pytest.approx(20)
    assert none.queue_wait_seconds.p50 == pytest.approx(5) and none.statement_timeouts == 1
    assert m2.lock_timeouts == 2
    by_provider = groups(crafted, "provider")
    assert set(by_provider) == {"p1", "p2", None}
    assert by_provider["p2"].outcome_unknown == 1 and by_provider["p1"].cancel_unheard == 1


def test_a_shorter_window_counts_less(crafted):
    short = groups(crafted, window=45)["alpha"]
    assert short.renewal_failures == 1, "only the one at the window's near edge (0)"
    assert short.stale_writes_rejected == 2 and short.reclaimed == 0
    assert short.queue_wait_seconds.p50 is None
    assert short.running == 2, "live values do not depend on the window"


def test_cli_json_has_exactly_the_contract_keys(crafted, db):
    result = CliRunner().invoke(app, ["metrics", "--json", "--window", "1h", "--by", "model", "--dsn", db.dsn],
                                env={"PGOPTIONS": f"-c leasectl.clock={T.isoformat()}"})
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == {"window_seconds", "by", "at", "groups"}
    assert data["window_seconds"] == 3600 and data["by"] == "model" and data["at"].startswith("2026-07-23T21:14:00")
    for group in data["groups"]:
        assert set(group) == CONTRACT_KEYS
        assert set(group["queue_wait_seconds"]) == {"p50", "p95"} == set(group["start_confirm_seconds"])
        assert set(group["accept_wait_seconds"]) == {"p50", "p95"}
    assert {g["key"] for g in data["groups"]} == {"m1", "m2", None}


def test_cli_table_names_every_group(crafted, db):
    result = CliRunner().invoke(app, ["metrics", "--dsn", db.dsn], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "alpha" in result.output and "beta" in result.output and "lock" in result.output


@pytest.mark.parametrize(("args", "words"), [
    (["metrics", "--by", "agent"], "--by 'agent': use tool, model, provider or service"),
    (["metrics", "--window", "soon"], "is not a duration"),
    (["metrics", "--window", "0s"], "must be more than zero"),
    (["metrics", "--window", "5m", "serve"], "not of `leasectl metrics serve`"),
    (["metrics", "serve", "--listen", "nowhere"], "is not HOST:PORT"),
    (["metrics", "serve", "--listen", "127.0.0.1:99999"], "the port must be a number"),
])
def test_bad_input_exits_2_with_a_message(db, args, words):
    result = CliRunner().invoke(app, [*args, "--dsn", db.dsn])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


def test_a_port_in_use_is_bad_input_with_a_clear_message(db):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        result = subprocess.run([sys.executable, "-m", "console", "metrics", "serve", "--listen", f"127.0.0.1:{port}",
                                 "--dsn", db.dsn], capture_output=True, text=True, timeout=60, cwd=ROOT)
    finally:
        held.close()
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "in use" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


# ----------------------------------------------------------------------------- counters and the rollup


def totals(conn: Conn, accept: AcceptWaitTotals | None = None) -> dict[tuple[str, str], int]:
    """metric, tool -> count (counters under +Inf; histograms summed over buckets); `accept`: the
    accept-wait histogram as an exporter folds it (a new one: as a restarted exporter)."""
    found: dict[tuple[str, str], int] = {}
    for row in metrics.scrape(conn, accept).totals:
        found[(row.metric, row.tool)] = found.get((row.metric, row.tool), 0) + row.n
    return found


def fold_now(conn: Conn) -> None:
    """Folds without lag until everything is folded: the first proposes a watermark, a later one
    folds up to it (once no transaction anywhere on the server that began before the proposal runs:
    other tests' transactions hold it back for a moment)."""
    newest = conn.execute("select coalesce(max(id), 0) as n from job_events").fetchone()["n"]
    wait_until(lambda: metrics.fold(conn, lag_seconds=0).folded_through >= newest, timeout=60,
               what="the fold to catch up")


def test_folding_moves_counts_without_changing_them_and_totals_only_grow(crafted):
    before = totals(crafted)
    assert before[("renewal_failures", "alpha")] == 5, "totals are over the whole history, not a window"
    assert before[("statement_timeouts", "beta")] == 2
    fold_now(crafted)
    state = crafted.execute("select folded_through, (select max(id) from job_events) as newest "
                            "from leasectl_metric_folds").fetchone()
    assert state["folded_through"] == state["newest"], "everything was folded"
    assert totals(crafted) == before
    job = crafted.execute("select id from tool_jobs where tool = 'alpha' and state = 'running' limit 1").fetchone()
    c = Crafted(crafted)
    c.event(job["id"], -1, "heartbeat_lost")
    c.done()
    after = totals(crafted)
    assert after[("renewal_failures", "alpha")] == 6, "the tail after the watermark is counted"
    with pytest.raises(psycopg.Error, match="only grow"):
        crafted.execute("update leasectl_metric_totals set n = n - 1")
    with pytest.raises(psycopg.Error, match="only grow"):
        crafted.execute("delete from leasectl_metric_totals")


def test_pruning_folded_history_keeps_the_counters(crafted):
    """job_events refuses DELETE; a pruning job (owner, triggers off) that folds first and deletes
    only what was folded leaves every counter of the rollup where it was. Accept wait is folded by
    the exporter (AcceptWaitTotals, not in the rollup): one that read up to the watermark keeps it;
    an exporter started after the pruning no longer finds the pruned claims."""
    kept = AcceptWaitTotals()
    before = totals(crafted, kept)
    assert before[("accept_wait", "alpha")] == 2
    fold_now(crafted)
    assert totals(crafted, kept) == before and kept.through > 0
    run(crafted, "demo/exact_mode", on=True)  # the only way past the append-only trigger
    crafted.execute("delete from job_events where id <= (select folded_through from leasectl_metric_folds)")
    run(crafted, "demo/exact_mode", on=False)
    assert crafted.execute("select count(*) as n from job_events").fetchone()["n"] == 0
    assert totals(crafted, kept) == before
    restarted = totals(crafted)
    assert {k: n for k, n in restarted.items() if k[0] != "accept_wait"} == \
        {k: n for k, n in before.items() if k[0] != "accept_wait"}


def test_a_fold_waits_for_transactions_that_may_still_write_below_its_watermark(db):
    with db.connect() as conn, db.connect() as other:
        register_tool(conn, "alpha", "read_only")
        enqueue(conn, "alpha")
        other.execute("begin")
        other.execute("select txid_current()")  # in flight before the proposal: it could still write
        metrics.fold(conn, lag_seconds=0)  # proposes a watermark
        enqueue(conn, "alpha")
        held = metrics.fold(conn, lag_seconds=0)
        other.execute("rollback")
        fold_now(conn)
        free = conn.execute("select folded_through from leasectl_metric_folds").fetchone()
    assert held.folded_through == 0, "nothing is folded while a transaction older than the proposal runs"
    assert free["folded_through"] > 0


def _scrape_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    found = False
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, value = line.rsplit(" ", 1)
        if series.split("{")[0] != name:
            continue
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
            found = True
    assert found, f"no {name} {labels} in:\n{text}"
    return total


def test_counters_are_monotonic_across_scrapes_and_an_exporter_restart(db):
    with db.connect() as conn:
        register_tool(conn, "alpha", "read_only", lease_seconds=1.0, heartbeat_seconds=0.25, missed_heartbeats=2,
                      jitter_seconds=0.25)
        e = enqueue(conn, "alpha", model="m1", provider="p1")
        job = claim(conn, "w-1")
        record_event(conn, job, "heartbeat_lost", "w-1")
        first = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=0, fold_every=0.05, fold_lag=0)
        try:
            one = _scrape_text(first.url)
            record_event(conn, job, "heartbeat_lost", "w-1")
            time.sleep(0.3)  # folds run meanwhile
            two = _scrape_text(first.url)
        finally:
            first.stop()
        assert first.folder is not None and first.folder.folds > 0
        record_event(conn, job, "heartbeat_lost", "w-1")
        second = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=0, fold_every=None)
        try:
            three = _scrape_text(second.url)
        finally:
            second.stop()
    values = [_sample(t, "leasectl_renewal_failures_total", tool="alpha", model="m1", provider="p1")
              for t in (one, two, three)]
    assert values == [1, 2, 3]
    waits = [_sample(t, "leasectl_queue_wait_seconds_count", tool="alpha") for t in (one, two, three)]
    assert waits == [1, 1, 1] and e["id"]


def test_the_collector_never_reports_less_than_before():
    from console.core.metrics import Scrape, TotalRow

    def row(n: int, tool: str) -> TotalRow:
        return TotalRow(metric="reclaims", tool=tool, model="", provider="", le=float("inf"), n=n, seconds=0,
                        buckets=[1.0])

    answers = iter([Scrape(live=[], totals=[row(5, "a")]), Scrape(live=[], totals=[row(3, "a")])])
    collector = exporter.LeasectlCollector(lambda: next(answers), cache_seconds=0)
    first = {s.name: s.value for f in collector.collect() for s in f.samples if s.name == "leasectl_reclaims_total"}
    second = {s.name: s.value for f in collector.collect() for s in f.samples if s.name == "leasectl_reclaims_total"}
    assert first == second == {"leasectl_reclaims_total": 5}


def test_a_clamped_histogram_stays_cumulative_when_a_bucket_is_new():
    """Each sample is held at its highest; a bucket with no past (the bounds changed between scrapes
    while history was pruned) must still not stand below the bucket under it, and +Inf is _count."""
    from console.core.metrics import Scrape, TotalRow

    def row(n: int, le: float, bounds: list[float]) -> TotalRow:
        return TotalRow(metric="queue_wait", tool="a", model="", provider="", le=le, n=n, seconds=0.5 * n,
                        buckets=bounds)

    answers = iter([Scrape(live=[], totals=[row(5, 1.0, [1.0, 5.0])]),
                    Scrape(live=[], totals=[row(1, 1.0, [1.0, 2.0, 5.0])])])
    collector = exporter.LeasectlCollector(lambda: next(answers), cache_seconds=0)

    def histogram() -> tuple[list[tuple[float, float]], float]:
        family = next(f for f in collector.collect() if f.name == "leasectl_queue_wait_seconds")
        buckets = sorted((float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket"))
        count = next(s.value for s in family.samples if s.name.endswith("_count"))
        return buckets, count

    first, first_count = histogram()
    second, second_count = histogram()
    assert first == [(1.0, 5), (5.0, 5), (float("inf"), 5)] and first_count == 5
    values = [v for _, v in second]
    assert [le for le, _ in second] == [1.0, 2.0, 5.0, float("inf")]
    assert values == sorted(values), second  # never falls as le rises
    assert values[0] >= 5 and second[-1][1] == second_count >= first_count


# ----------------------------------------------------------------------------- the cache and the unreachable database


def test_a_burst_of_scrapes_within_the_cache_costs_one_read(db):
    with db.connect() as conn:
        register_tool(conn, "alpha", "read_only")
    running = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=30, fold_every=None)
    reads = 0
    inner = running.collector._read

    def counted():
        nonlocal reads
        reads += 1
        return inner()

    running.collector._read = counted
    try:
        pages = [_scrape_text(running.url) for _ in range(8)]
    finally:
        running.stop()
    assert reads == 1 and running.collector.reads == 1
    # the same values every time; only their age (leasectl_data_age_seconds) grows
    same = {"\n".join(line for line in page.splitlines() if not line.startswith("leasectl_data_age_seconds "))
            for page in pages}
    assert len(same) == 1


def test_the_cache_expires():
    now = [0.0]
    reads = []

    def read():
        from console.core.metrics import Scrape

        reads.append(now[0])
        return Scrape(live=[], totals=[])

    collector = exporter.LeasectlCollector(read, cache_seconds=3, clock=lambda: now[0])
    for t in (0.0, 1.0, 2.9, 3.0, 3.5, 7.0):
        now[0] = t
        list(collector.collect())
    assert reads == [0.0, 3.0, 7.0]


def test_registering_the_collector_does_not_read():
    def read():
        raise AssertionError("registration must not query")

    registry = exporter.make_registry(exporter.LeasectlCollector(read))
    assert registry is not None


def test_database_unreachable_at_scrape_time_says_up_0(db):
    with db.connect() as conn:
        register_tool(conn, "alpha", "read_only")
        enqueue(conn, "alpha")
    proxy = DbProxy(db.dsn)
    running = exporter.start(proxy.dsn, "127.0.0.1:0", cache_seconds=0, fold_every=None)
    try:
        good = _scrape_text(running.url)
        proxy.cut()
        bad = _scrape_text(running.url)  # 200, not 503: Prometheus' own `up` stays 1
        proxy.restore()
        again = _scrape_text(running.url)
    finally:
        running.stop()
        proxy.close()
    assert _sample(good, "leasectl_up") == 1 and _sample(good, "leasectl_calls", tool="alpha", state="queued") == 1
    assert _sample(bad, "leasectl_up") == 0
    assert [line for line in bad.splitlines() if not line.startswith("#")] == ["leasectl_up 0.0"]
    assert _sample(again, "leasectl_up") == 1


def test_a_database_that_never_answered_is_up_0_too():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    running = exporter.start(f"postgresql://nobody@127.0.0.1:{port}/none?connect_timeout=2", "127.0.0.1:0",
                             cache_seconds=0, fold_every=None)
    try:
        text = _scrape_text(running.url)
    finally:
        running.stop()
    assert _sample(text, "leasectl_up") == 0


def test_the_live_gauges_follow_the_protocol(db):
    """Real workers' writes (no crafted rows): a lost lease swept back to the queue is a reclaim,
    the gauges count the queue and the running calls."""
    with db.connect() as conn:
        register_tool(conn, "alpha", "read_only", lease_seconds=1.0, heartbeat_seconds=0.25, missed_heartbeats=2,
                      jitter_seconds=0.25)
        enqueue(conn, "alpha", model="m1")
        enqueue(conn, "alpha", model="m1")
        job = claim(conn, "w-1")
        assert heartbeat(conn, job, "w-1") is not None
        time.sleep(1.2)
        assert heartbeat(conn, job, "w-1") is None  # the lease ran out: zero rows
        record_event(conn, job, "heartbeat_lost", "w-1")
        found = groups(conn)["alpha"]
        assert found.expired_leases == 1 and found.renewal_failures == 1
        sweep(conn)
        found = groups(conn)["alpha"]
        assert found.reclaimed == 1 and found.expired_leases == 0 and found.running == 0
        scraped = metrics.scrape(conn)
    queued = sum(r.calls for r in scraped.live if r.state == "queued")
    assert queued == 2


def test_the_exporter_and_the_metrics_cli_import_without_textual():
    code = ("import sys, console.operator.exporter, console.operator.cli.metrics, console.db.metrics; "
            "bad = [m for m in sys.modules if m.split('.')[0] == 'textual']; print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_metric_sql_lives_in_python():
    """The metrics' SQL is in queries/metrics/ (each file with its header), none in the modules."""
    for module in ("console/db/metrics.py", "console/operator/exporter.py", "console/operator/cli/metrics.py",
                   "console/core/metrics.py", "console/operator/present/metrics.py"):
        source = (ROOT / module).read_text().lower()
        for word in ("select ", "insert into", "update tool_jobs", " from job_events"):
            assert word not in source, f"{module} holds SQL ({word!r})"
