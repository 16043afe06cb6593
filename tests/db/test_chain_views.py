"""What the operator sees of chains and deadlines (migration 0014; docs/seeds.md §000 stages,
§004 deadlines): `leasectl show --json` carries a call's chain, priority, acceptance, trace and
check; the lists carry chain, stage and priority; a running call past its deadline has lease
health `past_deadline` in every view (one call, the lists, Triage and its counts, the past);
metrics gain accept wait, past_deadline and the grouping by service, and the exporter
`leasectl_accept_wait_seconds`, `leasectl_past_deadline_calls` and the label `service`."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from datetime import datetime, timedelta

import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from console.core.filters import parse_filter
from console.core.health import HEALTH_RANK
from console.core.metrics import AcceptWaitTotals
from console.db import metrics, reads
from console.db.audit import jobs_at
from console.db.connect import Conn, run_one
from console.operator import exporter
from console.operator.cli import app
from tests.helpers import SLOW, claim, wait_until

TRACE = "0af7651916cd43dd8448eb211c80319c"
TOOLS = {"search": ("read_only", {**SLOW, "service": "bing"}),
         "erp": ("mutating_verifiable", {**SLOW, "service": "acme-erp"}),
         "late": ("read_only", {**SLOW, "service": "bing"}),
         "plain": ("read_only", SLOW)}  # no service named


def enqueue_with(conn: Conn, tool: str, **chain: object) -> str:
    """worker/enqueue.sql with its chain parameters (parent_id, priority, accepted_at, trace_id)."""
    row = run_one(conn, "worker/enqueue", tool=tool, idempotency_key=f"k-{uuid.uuid4().hex}",
                  payload=Jsonb({"n": 1}), agent_id=None, session_id=None,
                  deadline_at=chain.pop("deadline_at", None), model=chain.pop("model", None),
                  provider=chain.pop("provider", None), **chain)
    assert row is not None
    return str(row["id"])


def db_now(conn: Conn) -> datetime:
    found: datetime = conn.execute("select now() as t").fetchone()["t"]
    return found


def past_deadline_call(conn: Conn, worker: str = "w-late") -> str:
    """A `late` call claimed with 1.5 s left, then running past its deadline (nobody sweeps it)."""
    late = enqueue_with(conn, "late", deadline_at=db_now(conn) + timedelta(seconds=1.5))
    assert str(claim(conn, worker, ["late"])["id"]) == late
    wait_until(lambda: conn.execute("select now() > deadline_at as past from tool_jobs where id = %s",
                                    (late,)).fetchone()["past"], what="the deadline to pass")
    return late


def cli(db, *args: str) -> object:
    result = CliRunner().invoke(app, [*args, "--dsn", db.dsn])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ----------------------------------------------------------------------------- show --json, the lists


def test_show_json_carries_the_chain_priority_acceptance_trace_and_check(db, conn):
    accepted = db_now(conn) - timedelta(seconds=30)
    parent = enqueue_with(conn, "search", priority=3, trace_id=TRACE, accepted_at=accepted)
    claim(conn, "w-1", ["search"])
    child = enqueue_with(conn, "search", parent_id=parent)
    erp = enqueue_with(conn, "erp")
    held = claim(conn, "w-2", ["erp"])
    assert run_one(conn, "worker/record_check", job_id=erp, worker_id="w-2", fencing_token=held["fencing_token"],
                   found="not_done", details=Jsonb({"status": 404})) is not None

    shown = cli(db, "show", parent, "--json")
    assert (shown["parent_id"], shown["chain_id"], shown["stage"], shown["priority"], shown["trace_id"]) == \
        (None, parent, 0, 3, TRACE)
    assert datetime.fromisoformat(shown["accepted_at"]) == accepted and shown["check"] is None
    made = cli(db, "show", child[:13], "--json")
    assert (made["parent_id"], made["chain_id"], made["stage"], made["priority"], made["trace_id"]) == \
        (parent, parent, 1, 0, TRACE)  # its parent's trace (migration 0024)
    assert datetime.fromisoformat(made["accepted_at"]) == datetime.fromisoformat(made["created_at"])
    checked = cli(db, "show", erp, "--json")["check"]
    assert set(checked) == {"found", "checked_at", "token"}
    assert (checked["found"], checked["token"]) == ("not_done", held["fencing_token"])
    assert datetime.fromisoformat(checked["checked_at"]) <= db_now(conn)

    listed = {r["id"]: r for r in cli(db, "jobs", "--json")}
    assert {i: (r["chain_id"], r["stage"], r["priority"]) for i, r in listed.items()} == {
        parent: (parent, 0, 3), child: (parent, 1, 0), erp: (erp, 0, 0)}
    rows = {str(j.id): j for j in reads.jobs(conn)}
    assert rows[child].parent_id is not None and str(rows[child].parent_id) == parent
    assert rows[parent].trace_id == TRACE and rows[parent].accepted_at == accepted

    words = CliRunner().invoke(app, ["show", child, "--dsn", db.dsn], env={"COLUMNS": "160"})
    assert words.exit_code == 0 and f"stage 1 of chain {parent[:8]}, made by {parent[:8]}" in words.output
    words = CliRunner().invoke(app, ["show", erp, "--dsn", db.dsn], env={"COLUMNS": "160"})
    assert "the service said not_done" in words.output


# ----------------------------------------------------------------------------- past_deadline


def test_a_call_running_past_its_deadline_is_past_deadline_in_every_view(db, conn):
    enqueue_with(conn, "search")
    claim(conn, "w-1", ["search"])  # running, healthy
    late = past_deadline_call(conn)

    one = reads.job(conn, uuid.UUID(late))
    assert one is not None and one.health == "past_deadline" and one.state == "running"
    listed = {str(j.id): j.health for j in reads.jobs(conn)}
    assert listed[late] == "past_deadline" and list(listed.values()).count("healthy") == 1
    snapshot = reads.triage(conn)
    assert [(str(r.id), r.health) for r in snapshot.rows] == [(late, "past_deadline")]
    assert snapshot.counts.past_deadline == 1
    assert snapshot.counts.expired_unswept == 1, "its lease ended with the deadline and nobody swept it"
    assert HEALTH_RANK["past_deadline"] == conn.execute(
        "select leasectl_health_rank('past_deadline') as r").fetchone()["r"]
    then = {str(j.id): j.health for j in jobs_at(conn, db_now(conn))}
    assert then[late] == "past_deadline", "the past says it too"
    assert [r["id"] for r in cli(db, "jobs", "--where", "health:past_deadline", "--json")] == [late]
    assert [r["id"] for r in cli(db, "jobs", "--health", "past_deadline", "--json")] == [late]
    assert parse_filter("past_deadline").matches(one)


# ----------------------------------------------------------------------------- metrics


def _claimed_after_waiting(conn: Conn, tool: str, waited: float, worker: str) -> str:
    call = enqueue_with(conn, tool, accepted_at=db_now(conn) - timedelta(seconds=waited), model="m1",
                        provider="p1")
    assert str(claim(conn, worker, [tool])["id"]) == call
    return call


def test_metrics_have_accept_wait_past_deadline_and_the_service_grouping(db, conn):
    _claimed_after_waiting(conn, "search", 20, "w-1")
    _claimed_after_waiting(conn, "erp", 100, "w-2")
    _claimed_after_waiting(conn, "erp", 200, "w-3")
    enqueue_with(conn, "plain")
    claim(conn, "w-4", ["plain"])
    past_deadline_call(conn)

    by_tool = {g.key: g for g in metrics.report(conn, window_seconds=3600, by="tool").groups}
    assert by_tool["search"].accept_wait_seconds.p50 == pytest.approx(20, abs=2)
    assert by_tool["erp"].accept_wait_seconds.p50 == pytest.approx(150, abs=2)
    assert by_tool["erp"].accept_wait_seconds.p95 == pytest.approx(195, abs=2)
    assert by_tool["search"].queue_wait_seconds.p50 < 2, "queue wait counts from the enqueue, not the acceptance"
    assert (by_tool["late"].past_deadline, by_tool["search"].past_deadline) == (1, 0)

    by_service = {g.key: g for g in metrics.report(conn, window_seconds=3600, by="service").groups}
    assert set(by_service) == {"bing", "acme-erp", None}
    assert (by_service["bing"].running, by_service["acme-erp"].running, by_service[None].running) == (2, 2, 1)
    assert by_service["bing"].past_deadline == 1 and by_service["acme-erp"].past_deadline == 0
    assert by_service["acme-erp"].accept_wait_seconds.p50 == pytest.approx(150, abs=2)

    data = cli(db, "metrics", "--by", "service", "--json")
    assert data["by"] == "service"
    groups = {g["key"]: g for g in data["groups"]}
    assert groups["bing"]["past_deadline"] == 1
    assert groups["acme-erp"]["accept_wait_seconds"]["p50"] == pytest.approx(150, abs=2)
    table = CliRunner().invoke(app, ["metrics", "--by", "service", "--dsn", db.dsn], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "acme-erp" in table.output and "accept wait" in table.output


def _fold_everything(conn: Conn) -> None:
    newest = conn.execute("select coalesce(max(id), 0) as n from job_events").fetchone()["n"]
    wait_until(lambda: metrics.fold(conn, lag_seconds=0).folded_through >= newest, timeout=60,
               what="the fold to catch up")


def _accept(scrape) -> dict[str, tuple[int, float]]:
    """tool -> (claims counted, seconds summed) of the accept-wait histogram."""
    found: dict[str, tuple[int, float]] = {}
    for row in scrape.totals:
        if row.metric == "accept_wait":
            n, seconds = found.get(row.tool, (0, 0.0))
            found[row.tool] = (n + row.n, seconds + row.seconds)
    return found


def test_the_exporter_folds_accept_wait_by_the_rollups_watermark(conn):
    _claimed_after_waiting(conn, "search", 20, "w-1")
    kept = AcceptWaitTotals()
    first = _accept(metrics.scrape(conn, kept))
    assert kept.through == 0 and first["search"][0] == 1 and first["search"][1] == pytest.approx(20, abs=2)
    _fold_everything(conn)
    assert _accept(metrics.scrape(conn, kept)) == first and kept.through > 0, "folded: kept, not read again"
    _claimed_after_waiting(conn, "erp", 100, "w-2")
    tail = _accept(metrics.scrape(conn, kept))
    assert tail["search"] == first["search"] and tail["erp"][0] == 1, "the tail after the watermark counts"
    assert _accept(metrics.scrape(conn)) == tail, "a new exporter reads the same totals"
    kept.through = 10**12  # a watermark ahead of the database's (another database behind the DSN)
    assert _accept(metrics.scrape(conn, kept)) == tail, "counted again from the start"


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


def _value(text: str, name: str, **labels: str) -> float:
    found = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line.split("{")[0] == name and all(f'{k}="{v}"' in line for k, v in labels.items())]
    assert found, f"no {name} {labels} in:\n{text}"
    return sum(found)


def test_the_exporter_serves_accept_wait_past_deadline_and_the_service_label(db, conn):
    _claimed_after_waiting(conn, "search", 20, "w-1")
    past_deadline_call(conn)
    first = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=0, fold_every=0.05, fold_lag=0)
    try:
        one = _scrape(first.url)
        newest = conn.execute("select max(id) as n from job_events").fetchone()["n"]
        wait_until(lambda: conn.execute("select folded_through from leasectl_metric_folds").fetchone()
                   ["folded_through"] >= newest, timeout=60, what="the exporter's fold")
        two = _scrape(first.url)
        _claimed_after_waiting(conn, "erp", 100, "w-2")
        time.sleep(0.2)
        three = _scrape(first.url)
    finally:
        first.stop()
    again = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=0, fold_every=None)
    try:
        four = _scrape(again.url)
    finally:
        again.stop()
    search = {"tool": "search", "model": "m1", "provider": "p1", "service": "bing"}
    counts = [_value(t, "leasectl_accept_wait_seconds_count", **search) for t in (one, two, three, four)]
    assert counts == [1, 1, 1, 1], "counted once, before and after the fold, and after a restart"
    assert _value(two, "leasectl_accept_wait_seconds_sum", **search) == pytest.approx(20, abs=2)
    assert _value(two, "leasectl_accept_wait_seconds_bucket", le="30.0", **search) == 1
    assert _value(two, "leasectl_accept_wait_seconds_bucket", le="10.0", **search) == 0
    assert [_value(t, "leasectl_accept_wait_seconds_count", tool="erp", service="acme-erp") for t in (three, four)] \
        == [1, 1]
    assert _value(one, "leasectl_past_deadline_calls", tool="late", service="bing") == 1
    assert _value(one, "leasectl_past_deadline_calls", tool="search") == 0
    assert _value(one, "leasectl_queue_wait_seconds_count", tool="search", service="bing") == 1
    assert "# TYPE leasectl_accept_wait_seconds histogram" in one
    assert "# TYPE leasectl_past_deadline_calls gauge" in one
