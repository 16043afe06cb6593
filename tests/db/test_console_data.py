"""The console's data layer on a real database: reads, filters, prefixes, actions, read-only."""

from __future__ import annotations

import pytest

from console.core.filters import JobFilter
from console.core.health import HEALTH_RANK
from console.core.models import Applied, Refused
from console.core.ownership import ownership
from console.db import actions, reads
from console.db.session import ConsoleSession
from console.operator.present import action_message
from console.shared.errors import BadInput, ReadOnlySession, RowLocked
from tests.helpers import (
    FAST,
    cancel,
    claim,
    complete,
    enqueue,
    expire_lease,
    report_unknown,
    start_side_effect,
)

TOOLS = {"search": ("read_only", FAST), "pay": ("mutating_unverifiable", FAST),
         "slow": ("read_only", {"lease_seconds": 60, "heartbeat_seconds": 0.2, "missed_heartbeats": 1,
                                "jitter_seconds": 0.1})}


def test_triage_counts_and_attention_worst_first(conn):
    q = enqueue(conn, "search")
    unknown = enqueue(conn, "pay", "payment:inv-7:capture")
    late = enqueue(conn, "slow")
    expired = enqueue(conn, "search")
    c = claim(conn, "w-pay", ["pay"])
    start_side_effect(conn, c, "w-pay", "ext-1")
    report_unknown(conn, c, "w-pay")
    claim(conn, "w-slow", ["slow"])
    # the oldest queued call (q) is claimed first; the next claim takes `expired`
    assert claim(conn, "w-q", ["search"])["id"] == q["id"]
    assert claim(conn, "w-exp", ["search"])["id"] == expired["id"]
    expire_lease(conn, expired["id"])
    snap = reads.triage(conn)
    assert snap.counts.needs_human == 1 and snap.counts.expired_unswept >= 1
    assert snap.counts.running == 3 and snap.counts.queued == 0
    order = [(r.id, r.health) for r in snap.rows]
    assert order[0] == (unknown["id"], "outcome_unknown"), "worst first"
    assert (expired["id"], "lease_expired") in order
    assert (late["id"], "heartbeat_late") in order, "no heartbeat for over H + J (1s of waiting above)"
    assert snap.counts.stale_heartbeats == 1
    ranks = [HEALTH_RANK[h] for _, h in order]
    assert order.index((expired["id"], "lease_expired")) < order.index((late["id"], "heartbeat_late"))
    assert ranks == sorted(ranks) and len(set(ranks)) >= 3, f"worst first: {order}"


def test_the_python_health_ranks_are_the_databases(conn):
    """Triage sorts in SQL (leasectl_health_rank); the console and the CLI rank in Python."""
    for label, rank in HEALTH_RANK.items():
        assert conn.execute("select leasectl_health_rank(%s) as r", (label,)).fetchone()["r"] == rank, label


def test_jobs_filters_keyset_and_prefix(conn):
    made = [enqueue(conn, "search", f"report:42:stage:{i}")["id"] for i in range(7)]
    enqueue(conn, "pay", "payment:inv-9:capture")
    page1 = reads.jobs(conn, JobFilter(tool="search"), limit=3)
    page2 = reads.jobs(conn, JobFilter(tool="search"), before=(page1[-1].created_at, page1[-1].id), limit=3)
    page3 = reads.jobs(conn, JobFilter(tool="search"), before=(page2[-1].created_at, page2[-1].id), limit=3)
    seen = [r.id for r in page1 + page2 + page3]
    assert seen == list(reversed(made)), "newest first, no gaps, no repeats"
    assert {r.tool for r in reads.jobs(conn, JobFilter(key_prefix="payment:"))} == {"pay"}
    assert len(reads.jobs(conn, JobFilter(key_prefix="report:42:"))) == 7
    one = reads.jobs(conn, JobFilter(id_prefix=str(made[0])[:10]))
    assert [r.id for r in one] == [made[0]]
    assert reads.resolve(conn, str(made[0])[:12]) == made[0]
    with pytest.raises(BadInput, match="no call"):
        reads.resolve(conn, "ffffffffffff")
    with pytest.raises(BadInput, match="not a call id"):
        reads.resolve(conn, "not-hex!")


def test_ambiguous_prefix(conn):
    ids = [enqueue(conn, "search")["id"] for _ in range(40)]
    firsts = {}
    for i in ids:
        firsts.setdefault(str(i)[0], []).append(i)
    shared = next(k for k, v in firsts.items() if len(v) > 1)
    with pytest.raises(BadInput, match="ambiguous"):
        reads.resolve(conn, shared)


def test_history_timeline_and_lineage(conn):
    e = enqueue(conn, "search", "report:42:stage:1")
    enqueue(conn, "search", "report:42:stage:2")
    c1 = claim(conn, "w1")
    expire_lease(conn, e["id"])
    c2 = claim(conn, "w2")
    complete(conn, c2, "w2")
    events = reads.history(conn, e["id"])
    timeline = ownership(e["id"], events)
    assert [(t.owner_id, t.fencing_token) for t in timeline] == [("w1", c1["fencing_token"]), ("w2", 2)]
    assert (timeline[0].ended_by, timeline[0].end_kind, timeline[0].end_actor) == ("expired", "reclaimed", "w2")
    assert timeline[1].ended_by == "succeeded"
    lineage = reads.lineage(conn, e["id"])
    assert [x.idempotency_key for x in lineage] == ["report:42:stage:2"]


def test_actions_applied_refused_and_journaled(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    result = actions.cancel(conn, e["id"], seen_state="running", seen_token=99, operator="alice", reason="stuck")
    assert isinstance(result, Refused) and result.now.fencing_token == c["fencing_token"]
    assert "changed since you looked" in action_message(result) and "token 1" in action_message(result)
    result = actions.cancel(conn, e["id"], seen_state="running", seen_token=1, operator="alice", reason="stuck")
    assert isinstance(result, Applied) and result.state == "cancel_requested"
    assert "NOT stopped" in action_message(result)
    with pytest.raises(BadInput, match="reason is required"):
        actions.cancel(conn, e["id"], seen_state="cancel_requested", seen_token=1, operator="a", reason="  ")


def test_mark_terminal_needs_force_for_live_lease(conn):
    e = enqueue(conn, "search")
    claim(conn, "w1")
    refused = actions.mark_terminal(conn, e["id"], seen_state="running", seen_token=1, terminal_state="failed",
                                    operator="bob", reason="hung")
    assert isinstance(refused, Refused) and "live lease" in refused.reason
    applied = actions.mark_terminal(conn, e["id"], seen_state="running", seen_token=1, terminal_state="failed",
                                    operator="bob", reason="hung", force=True)
    assert isinstance(applied, Applied) and applied.fenced and "fenced out" in action_message(applied)


def test_lock_timeout_is_distinct_and_journaled(db, conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    holder = db.connect(autocommit=False)
    holder.execute("update tool_jobs set heartbeat_at = now() where id = %s", (e["id"],))
    try:
        with db.connect() as op:
            op.execute("set lock_timeout = '200ms'")
            with pytest.raises(RowLocked, match="locked by another transaction"):
                actions.cancel(op, e["id"], seen_state="running", seen_token=c["fencing_token"],
                               operator="carol", reason="stuck")
    finally:
        holder.rollback()
        holder.close()
    failed = [r for r in conn.execute("select * from job_events where kind = 'operator_action_failed'")]
    assert failed and failed[0]["actor"] == "carol" and failed[0]["details"]["action"] == "cancel"
    assert cancel(conn, e["id"], "running", c["fencing_token"]) is not None, "nothing changed meanwhile"


def test_read_only_session_refuses_in_the_database(db, conn):
    e = enqueue(conn, "search")
    session = ConsoleSession(db.dsn, operator="alice", read_only=True)
    info = session.open()
    assert session.read_only and info.session_read_only
    with pytest.raises(ReadOnlySession, match="read-only"):
        session.act(lambda c: actions.cancel(c, e["id"], seen_state="queued", seen_token=0, operator="alice",
                                             reason="x"))
    # and even a statement sent on its read connection is refused by the server
    with pytest.raises(Exception, match="read-only|permission denied"):
        session.read(lambda c: actions.cancel(c, e["id"], seen_state="queued", seen_token=0, operator="alice",
                                              reason="x"))
    assert reads.job(conn, e["id"]).state == "queued"
    session.close()


def test_display_clock_pins_ages(db, conn):
    e = enqueue(conn, "search")
    claim(conn, "w1")
    session = ConsoleSession(db.dsn, operator="a", clock="2099-01-01T00:00:00Z")
    session.open()
    row = session.read(lambda c: reads.job(c, e["id"]))
    assert row.db_now.year == 2099 and row.health == "lease_expired"
    session.close()


def test_the_console_plans_every_run_with_its_values_and_workers_keep_generic_plans(db, conn):
    """psycopg prepares a statement from its fifth run; from the sixth prepared run PostgreSQL may
    settle on a generic plan, blind to the filter's values (audit/jobs_at.sql's went past the
    30 s timeout). A console session never takes one; a worker's fixed statements may."""
    from datetime import UTC, datetime

    from console.db import audit
    from console.db.connect import connect
    from console.shared.config import WORKER_LIMITS

    for _ in range(3):
        enqueue(conn, "search")
    claim(conn, "w-1")

    def plans(session) -> tuple[int, int]:
        row = session.execute("select sum(generic_plans)::int as g, sum(custom_plans)::int as c "
                              "from pg_prepared_statements where statement like '%job_events%' "
                              # where the history begins (audit/history_start.sql) has no parameter to plan for
                              "and statement not like '%job_events_archive%'").fetchone()
        return row["g"] or 0, row["c"] or 0

    with connect(db.dsn) as console:
        assert console.execute("show plan_cache_mode").fetchone()["plan_cache_mode"] == "force_custom_plan"
        for _ in range(15):
            assert len(audit.jobs_at(console, datetime.now(UTC))) == 3
        generic, custom = plans(console)
        assert generic == 0 and custom >= 10
    with connect(db.dsn, limits=WORKER_LIMITS) as worker:
        assert worker.execute("show plan_cache_mode").fetchone()["plan_cache_mode"] == "auto"
