"""Triage's one pass over the live calls (queries/views/triage.sql) against the rule itself: every
live call's leasectl_job_health, counted and sorted here, must be what reads.triage answers -- over
calls of every state and health, tools with different cutoffs (a heartbeat late for one tool is on
time for another; stage timeouts on some), deadlines and holds, rows right on each boundary, and
recent stale-token rejections of live and finished calls."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from console.core.health import HEALTH_RANK
from console.db import reads
from console.db.connect import Conn, run, run_one

TOOLS = {
    "quick": ("read_only", {"lease_seconds": 3, "heartbeat_seconds": 1, "missed_heartbeats": 2, "jitter_seconds": 0.5}),
    "slow": ("read_only", {"lease_seconds": 90, "heartbeat_seconds": 30, "missed_heartbeats": 2, "jitter_seconds": 20}),
    # the same cutoffs as quick: one class of heartbeat for both
    "quick_too": ("read_only", {"lease_seconds": 3, "heartbeat_seconds": 1, "missed_heartbeats": 2,
                                "jitter_seconds": 0.5}),
    "staged": ("mutating_verifiable", {"lease_seconds": 20, "heartbeat_seconds": 5, "missed_heartbeats": 2,
                                       "jitter_seconds": 5, "stage_timeout_seconds": 600}),
    "staged_long": ("mutating_unverifiable", {"lease_seconds": 40, "heartbeat_seconds": 10, "missed_heartbeats": 2,
                                              "jitter_seconds": 10, "stage_timeout_seconds": 3600}),
}
LIVE = ("running", "cancel_requested", "outcome_unknown")
REJECTIONS = ("heartbeat_lost", "result_rejected", "receiver_rejected")


def _craft(conn: Conn, t: datetime, seed: int, calls: int) -> None:
    """`calls` calls written exactly as drawn (exact mode), around the display clock `t`: their
    times on and beside every cutoff of their tool, within the lease's bounds (the table's check)."""
    rnd = random.Random(seed)
    s = timedelta(seconds=1)
    run(conn, "demo/exact_mode", on=True)
    holds: list[tuple[datetime, uuid.UUID]] = []
    ids: dict[str, list[uuid.UUID]] = {"live": [], "finished": []}
    for n in range(calls):
        tool = rnd.choice(list(TOOLS))
        settings = TOOLS[tool][1]
        late_after = settings["heartbeat_seconds"] + settings["jitter_seconds"]
        unheard_after = 2 * settings["heartbeat_seconds"] + settings["jitter_seconds"]
        stage = settings.get("stage_timeout_seconds") or 900
        state = rnd.choice(["running"] * 8 + ["cancel_requested"] * 2 + ["outcome_unknown", "queued", "succeeded",
                                                                          "failed"])
        row: dict[str, Any] = dict(
            id=uuid.uuid4(), tool=tool, state=state, owner_id=None, lease_until=None, fencing_token=1,
            heartbeat_at=None, attempt=1, idempotency_key=f"sweep-{seed}-{n}", payload=Jsonb({"n": n}),
            result=None, error=None, agent_id=None, session_id=None, model=None, provider=None,
            created_at=t - rnd.choice([30, 700, 4000, 9000]) * s, claimed_at=None, finished_at=None,
            deadline_at=None, cancel_requested_at=None, cancel_requested_by=None, cancel_requested_reason=None,
            side_effect_started_at=None, external_request_id=None, retry_approved_by=None, retry_approved_at=None,
            retry_approved_reason=None, terminal_reason=None, completed_despite_cancel=False)
        if state != "queued":
            row["claimed_at"] = t - rnd.choice([5, stage - 1, stage, stage + 1, 3599, 3600, 3601, 9000]) * s
            row["owner_id"] = f"w-{n % 7}"
        if state in ("running", "cancel_requested") or (state == "outcome_unknown" and rnd.random() < 0.5):
            lease = t + rnd.choice([60, 5, 0.001, 0, -0.5, -30]) * s
            age = rnd.choice([0, 1, 1.4, late_after, late_after + 0.001, 29, 49, 51, 200, None])
            row["lease_until"] = lease
            if age is not None:
                row["heartbeat_at"] = min(t - age * s, lease)
            if rnd.random() < 0.3:  # a deadline at or after the lease: passed or not
                row["deadline_at"] = lease + rnd.choice([0, 0.5, 100, 3600]) * s
            if rnd.random() < 0.3:  # a hold at or after the lease (and its deadline's)
                holds.append((lease + rnd.choice([0, 0.5, 100, 3600]) * s, row["id"]))
        if state == "cancel_requested":
            row["cancel_requested_at"] = t - rnd.choice([1, unheard_after, unheard_after + 1, 300]) * s
            row["cancel_requested_by"] = "alice"
        if state == "outcome_unknown" and rnd.random() < 0.7:
            row["side_effect_started_at"] = t - rnd.choice([10, 400]) * s
        if state in ("succeeded", "failed"):
            row["finished_at"] = t - rnd.choice([10, 5000]) * s
        run_one(conn, "demo/insert_call", **row)
        ids["live" if state in LIVE else "finished"].append(row["id"])
    for until, job_id in holds:
        conn.execute("update tool_jobs set hold_until = %s where id = %s", (until, job_id))
    for group, share in (("live", 0.08), ("finished", 0.15)):
        for job_id in rnd.sample(ids[group], max(1, int(len(ids[group]) * share))):
            for _ in range(rnd.choice([1, 1, 2])):  # twice: still one zombie
                ago = rnd.choice([60, 299, 301, 3000])
                run_one(conn, "demo/insert_event", job_id=job_id, at=t - ago * s, kind=rnd.choice(REJECTIONS),
                        actor="w-old", fencing_token=0, state_from=None, state_to=None, owner_from=None,
                        owner_to=None, lease_until=None, reason="stale token", request_id=None, details=None)
    run(conn, "demo/exact_mode", on=False)


def _by_the_rule(conn: Conn) -> tuple[dict[str, int], list[tuple[uuid.UUID, str]]]:
    """Every live call's health by leasectl_job_health (and every rejected call's), one by one:
    the counts and the attention list, worst first, that Triage must show."""
    rows = conn.execute("""
        with rejected as (
            select distinct job_id from job_events
            where kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected')
              and at > leasectl_now() - interval '5 minutes')
        select j.id, j.state, j.lease_until, j.deadline_at, j.hold_until, j.cancel_requested_at, j.heartbeat_at,
               j.claimed_at, j.side_effect_started_at, j.created_at, r.job_id is not null as rejected,
               leasectl_job_health(j.state, j.lease_until, j.heartbeat_at, j.cancel_requested_at, j.claimed_at,
                                   k.late_before, k.unheard_before, k.stage_before, r.job_id is not null,
                                   k.now, j.deadline_at, j.hold_until) as health,
               (select count(*) from rejected) as zombies
        from tool_jobs j
        join (select c.*, leasectl_now() as now from leasectl_tool_cutoffs(leasectl_now()) c) k on k.tool = j.tool
        left join rejected r on r.job_id = j.id
        where j.state in ('running', 'cancel_requested', 'outcome_unknown') or r.job_id is not null""").fetchall()
    live = [r for r in rows if r["state"] in LIVE]
    counts = {
        "needs_human": sum(r["state"] == "outcome_unknown" for r in live),
        "stale_heartbeats": sum(r["health"] == "heartbeat_late" for r in live),
        "expired_unswept": sum(r["health"] in ("lease_expired", "past_deadline", "past_max_hold") for r in live),
        "past_deadline": sum(r["health"] == "past_deadline" for r in live),
        "cancel_unheard": sum(r["health"] == "cancel_unheard" for r in live),
        "over_stage_timeout": sum(r["health"] == "over_stage_timeout" for r in live),
        "running": sum(r["state"] == "running" for r in live),
        "cancel_requested": sum(r["state"] == "cancel_requested" for r in live),
        "zombies": rows[0]["zombies"] if rows else 0,
    }
    since = {"lease_expired": "lease_until", "past_deadline": "deadline_at", "past_max_hold": "hold_until",
             "cancel_unheard": "cancel_requested_at", "heartbeat_late": "heartbeat_at",
             "over_stage_timeout": "claimed_at"}

    def key(r: dict[str, Any]) -> tuple[int, datetime, uuid.UUID]:
        if r["health"] == "outcome_unknown":
            at = r["side_effect_started_at"] or r["created_at"]
        else:
            at = r[since.get(r["health"], "created_at")]
        return HEALTH_RANK[r["health"]], at, r["id"]

    attention = sorted((r for r in rows if r["health"] != "healthy"), key=key)
    return counts, [(r["id"], r["health"]) for r in attention]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_triage_counts_and_rows_are_the_rule_applied_to_every_live_call(conn, seed):
    t = conn.execute("select date_trunc('second', now()) as t").fetchone()["t"]
    _craft(conn, t, seed, calls=400)
    run(conn, "meta/display_clock", clock=t.isoformat())
    counts, attention = _by_the_rule(conn)
    assert counts["running"] > 100 and len({h for _, h in attention}) >= 7, "the draw covers the labels"
    for limit in (1000, 9, 1, 0):
        snap = reads.triage(conn, limit=limit)
        got = {name: getattr(snap.counts, name) for name in counts}
        assert got == counts, f"limit {limit}"
        assert [(r.id, r.health) for r in snap.rows] == attention[:limit], f"limit {limit}: worst first, the same"
        assert snap.counts.db_now == t


def test_triage_with_no_live_call_counts_zero(conn):
    snap = reads.triage(conn)
    assert snap.rows == [] and snap.counts.running == 0 and snap.counts.needs_human == 0
