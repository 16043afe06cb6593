"""The lease watch (migration 0020): claims skip their search for expired leases while no lease can
have run out, and still reclaim every lease that has: raised only after a sweep, lowered by
whatever makes a lease end sooner, and a lowering is never lost to a concurrent raise."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from typing import Any

import psycopg

from console.control.supervisor import tick
from console.db import sql
from console.db.connect import run, run_one
from tests import helpers as h

TOOLS = {"slow": ("read_only", h.SLOW), "fast": ("read_only", h.FAST)}


def watch(conn: Any) -> dict[str, Any]:
    # -infinity (never raised) as None: psycopg has no datetime for it
    row = conn.execute("select nullif(next_expiry, '-infinity') as next_expiry, epoch"
                       " from leasectl_lease_watch").fetchone()
    assert row is not None
    return dict(row)


def raise_watch(conn: Any) -> datetime | None:
    row = run_one(conn, "supervisor/raise_lease_watch")
    return row["next_expiry"] if row else None


def db_now(conn: Any) -> datetime:
    return conn.execute("select now() as t").fetchone()["t"]


def expired_search_ran(conn: Any, tools: list[str]) -> bool:
    """Whether claim.sql read tool_jobs for an expired lease (its plan's first scan of tool_jobs,
    which is the `expired` CTE's, ran at least once)."""
    query = sql.load("worker/claim")
    plan: dict[str, Any] = {}
    with conn.transaction():  # EXPLAIN ANALYZE runs the claim: rolled back, nothing is claimed
        plan = conn.execute("explain (analyze, format json) " + query.text,
                            query.bind({"worker_id": "w-explain", "tools": tools})).fetchone()
        raise psycopg.Rollback()
    expired = _first_cte(plan["QUERY PLAN"][0]["Plan"], "expired")
    assert expired is not None, json.dumps(plan["QUERY PLAN"])[:2000]
    return _scanned(expired)


def _first_cte(node: dict[str, Any], name: str) -> dict[str, Any] | None:
    if node.get("Subplan Name") == f"CTE {name}":
        return node
    for child in node.get("Plans", []):
        found = _first_cte(child, name)
        if found is not None:
            return found
    return None


def _scanned(node: dict[str, Any]) -> bool:
    if node.get("Relation Name") == "tool_jobs" and node.get("Actual Loops", 0) > 0:
        return True
    return any(_scanned(child) for child in node.get("Plans", []))


def only_slow_tools(conn: Any) -> None:
    """The fast tool's 1 s lease would hold the watch at now() - 1 s: leave only 60 s leases."""
    conn.execute("delete from tools where name = 'fast'")


def test_without_a_raise_every_claim_searches_as_before(conn: Any) -> None:
    assert watch(conn)["next_expiry"] is None, "never raised: -infinity"
    h.enqueue(conn, "slow")
    assert h.claim(conn, "w1") is not None
    assert expired_search_ran(conn, ["slow"])


def test_a_raised_watch_skips_the_search_until_a_lease_can_have_run_out(conn: Any) -> None:
    only_slow_tools(conn)
    running = [h.enqueue(conn, "slow") for _ in range(3)]
    for _ in running:
        assert h.claim(conn, "w1") is not None
    earliest = conn.execute("select min(lease_until) as t from tool_jobs where state = 'running'").fetchone()["t"]
    raised = raise_watch(conn)
    now = db_now(conn)
    # the earliest lease, or now + the shortest lease - 2 s, whichever is sooner
    assert raised is not None and raised <= earliest and raised >= now + timedelta(seconds=55)
    assert not expired_search_ran(conn, ["slow"]), "nothing can have expired: the claim skips the search"
    assert watch(conn)["next_expiry"] == raised


def test_a_lease_cut_short_by_hand_lowers_the_watch_and_is_reclaimed(conn: Any) -> None:
    only_slow_tools(conn)
    e = h.enqueue(conn, "slow")
    first = h.claim(conn, "w1")
    assert first is not None
    assert raise_watch(conn) is not None
    before = watch(conn)
    conn.execute("update tool_jobs set lease_until = now() - interval '1 second',"
                     " heartbeat_at = now() - interval '2 seconds' where id = %s", (e["id"],))
    after = watch(conn)
    assert after["epoch"] == before["epoch"] + 1 and after["next_expiry"] < db_now(conn)
    again = h.claim(conn, "w2", ["slow"])
    assert again is not None and again["id"] == e["id"] and again["fencing_token"] == first["fencing_token"] + 1


def test_a_short_lease_tool_holds_the_watch_at_its_lease_so_natural_expiry_is_reclaimed(conn: Any) -> None:
    e = h.enqueue(conn, "fast")
    first = h.claim(conn, "w1", ["fast"])
    assert first is not None
    raised = raise_watch(conn)
    assert raised is not None and raised <= first["lease_until"]
    h.expire_lease(conn, e["id"])
    again = h.claim(conn, "w2", ["fast"])
    assert again is not None and again["id"] == e["id"], "a lease that ran out by itself is reclaimed by a claim"


def test_a_tool_registered_after_the_raise_lowers_the_watch_to_its_lease(conn: Any) -> None:
    only_slow_tools(conn)
    assert raise_watch(conn) is not None
    assert watch(conn)["next_expiry"] > db_now(conn) + timedelta(seconds=50)
    h.register_tool(conn, "blink", "read_only", **h.FAST)
    e = h.enqueue(conn, "blink")
    assert h.claim(conn, "w1", ["blink"]) is not None
    assert watch(conn)["next_expiry"] <= db_now(conn)
    h.expire_lease(conn, e["id"])
    assert (h.claim(conn, "w2", ["blink"]) or {}).get("id") == e["id"]
    # and a lease cut on a tool that runs: its next grants are covered from the cut on
    assert raise_watch(conn) is not None
    conn.execute("update tools set lease_seconds = 20 where name = 'slow'")
    assert watch(conn)["next_expiry"] <= db_now(conn) + timedelta(seconds=18)


def test_heartbeats_and_claims_leave_the_watch_alone(conn: Any) -> None:
    only_slow_tools(conn)
    jobs = []
    for _ in range(5):
        h.enqueue(conn, "slow")
    assert raise_watch(conn) is not None
    seen = watch(conn)
    for _ in range(5):
        c = h.claim(conn, "w1")
        assert c is not None
        jobs.append(c)
    for c in jobs:
        assert h.heartbeat(conn, c, "w1") is not None
    rows = run(conn, "worker/heartbeat_many", job_ids=[c["id"] for c in jobs], worker_id="w1",
               fencing_tokens=[c["fencing_token"] for c in jobs])
    assert len(rows) == 5
    assert watch(conn) == seen, "a grant or a renewal ends no lease sooner than the watch"


def test_a_lowering_committed_during_a_raise_wins(db: Any, conn: Any) -> None:
    """Step by step: a lease is cut (the watch row lowered, not yet committed) while a raise,
    whose snapshot does not see the cut, computes its bound. The raise waits for the row, finds
    the epoch moved, and leaves the lowered watch as it is."""
    only_slow_tools(conn)
    e = h.enqueue(conn, "slow")
    assert h.claim(conn, "w1") is not None
    assert raise_watch(conn) is not None
    with db.connect() as cutter, db.connect() as raiser:
        cutter.execute("begin")
        cutter.execute("update tool_jobs set lease_until = now() - interval '1 second',"
                     " heartbeat_at = now() - interval '2 seconds' where id = %s", (e["id"],))
        answer: list[Any] = []
        pid = raiser.execute("select pg_backend_pid() as p").fetchone()["p"]
        t = threading.Thread(target=lambda: answer.append(raise_watch(raiser)))
        t.start()
        h.wait_until(lambda: conn.execute(
            "select wait_event_type = 'Lock' as waits from pg_stat_activity where pid = %s", (pid,)
        ).fetchone()["waits"], what="the raise to wait for the watch's row")
        cutter.execute("commit")
        t.join(10)
    assert answer == [None], "the raise changed nothing"
    assert watch(conn)["next_expiry"] < db_now(conn)
    assert (h.claim(conn, "w2", ["slow"]) or {}).get("id") == e["id"]


def test_the_supervisor_raises_the_watch_after_its_sweep(db: Any, conn: Any) -> None:
    only_slow_tools(conn)
    e = h.enqueue(conn, "slow")
    assert h.claim(conn, "w1") is not None
    report = tick(conn, supervisor_id="sup-test")
    assert not report.failures
    assert watch(conn)["next_expiry"] > db_now(conn) + timedelta(seconds=50)
    assert not expired_search_ran(conn, ["slow"])
    assert h.job(conn, e["id"])["state"] == "running"


def test_a_worker_login_cannot_move_the_watch(db: Any, conn: Any, logins: Any) -> None:
    with h.as_login(db, "lc_watch_worker") as worker:
        assert watch(worker)["epoch"] == 0
        for statement in ("update leasectl_lease_watch set next_expiry = 'infinity'",
                          "select leasectl_raise_lease_watch()"):
            code, _ = h.refusal(worker, statement)
            assert code == "42501", statement
    assert watch(conn)["next_expiry"] is None


LOGINS = {"lc_watch_worker": "leasectl_worker"}
