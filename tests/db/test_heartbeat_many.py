"""worker/heartbeat_many.sql: every lease a worker process holds, renewed in one statement
(docs/contract.md §4), each under exactly heartbeat.sql's guard: a lease this worker
lost is simply missing from the answer, whatever happens to the others."""

from __future__ import annotations

from typing import Any

from console.db import sql
from console.db.connect import Conn, run
from tests import helpers as h

A, B = "lc_hbm_a", "lc_hbm_b"
LOGINS = {A: "leasectl_worker", B: "leasectl_worker"}
TOOLS = {"search": ("read_only", h.SLOW_30), "quick": ("read_only", h.FAST)}


def many(conn: Conn, calls: list[dict], worker: str, tokens: list[int] | None = None) -> list[dict]:
    return run(conn, "worker/heartbeat_many", job_ids=[c["id"] for c in calls], worker_id=worker,
               fencing_tokens=tokens if tokens is not None else [c["fencing_token"] for c in calls])


def lease_of(conn: Conn, job_id: Any) -> Any:
    return conn.execute("select lease_until from tool_jobs where id = %s", (job_id,)).fetchone()["lease_until"]


def test_the_contract_parameters_and_columns(conn):
    assert set(sql.load("worker/heartbeat_many").params) == {"job_ids", "worker_id", "fencing_tokens"}
    h.enqueue(conn, "search")
    c = h.claim(conn, "w1")
    single = h.heartbeat(conn, c, "w1")
    rows = many(conn, [c], "w1")
    assert len(rows) == 1 and set(rows[0]) == set(single) | {"id"}, "the columns of heartbeat.sql plus id"
    assert rows[0]["id"] == c["id"] and rows[0]["cancel_requested"] is False


def test_renews_each_lease_still_held_and_leaves_out_each_lost_one(conn):
    for i in range(7):
        h.enqueue(conn, "quick" if i == 3 else "search", f"k-{i}")
    held = h.claim(conn, "w1")
    fenced = h.claim(conn, "w1")
    stale = h.claim(conn, "w1")
    expired = h.claim(conn, "w1", ["quick"])
    finished = h.claim(conn, "w1")
    other = h.claim(conn, "w2")
    also_held = h.claim(conn, "w1")
    h.mark_terminal(conn, fenced["id"], "running", fenced["fencing_token"], "failed", force=True)
    assert h.complete(conn, finished, "w1") is not None
    h.expire_lease(conn, expired["id"])
    before = {c["id"]: lease_of(conn, c["id"]) for c in (held, other, also_held, expired)}
    calls = [held, fenced, stale, expired, finished, other, also_held]
    tokens = [c["fencing_token"] + (1 if c is stale else 0) for c in calls]
    rows = many(conn, calls, "w1", tokens)
    assert {r["id"] for r in rows} == {held["id"], also_held["id"]}, \
        "missing: fenced by an operator, a token not held, an expired lease, a finished call, another's call"
    for r in rows:
        assert r["lease_until"] > before[r["id"]], "renewed"
    assert lease_of(conn, other["id"]) == before[other["id"]], "another worker's lease is not touched"
    assert lease_of(conn, expired["id"]) == before[expired["id"]], "an expired lease is not revived"
    assert many(conn, [], "w1") == []


def test_a_cancel_request_comes_back_with_its_own_call_only(conn):
    e1, _ = h.enqueue(conn, "search"), h.enqueue(conn, "search")
    c1, c2 = h.claim(conn, "w1"), h.claim(conn, "w1")
    assert h.cancel(conn, e1["id"], "running", c1["fencing_token"])["state"] == "cancel_requested"
    rows = {r["id"]: r for r in many(conn, [c1, c2], "w1")}
    assert rows[c1["id"]]["cancel_requested"] is True and rows[c1["id"]]["state"] == "cancel_requested"
    assert rows[c2["id"]]["cancel_requested"] is False and rows[c2["id"]]["state"] == "running"


def test_renewals_stay_hot_and_journal_nothing(db, conn):
    calls = []
    for i in range(20):
        h.enqueue(conn, "search", f"hot-{i}")
        calls.append(h.claim(conn, "w1"))
    conn.execute("vacuum tool_jobs")
    conn.execute("select pg_stat_force_next_flush()")
    before = h.tool_jobs_updates(conn)
    count = sum(len(h.events(conn, c["id"])) for c in calls)
    with db.connect() as beater:
        for _ in range(10):
            assert len(many(beater, calls, "w1")) == 20
        beater.execute("select pg_stat_force_next_flush()")
    updates, hot = h.tool_jobs_updates(conn, since=before)
    # HOT needs room on the page, and room comes back by pruning, which waits for the server's
    # oldest snapshot: on a busy shared server (the test tiers run four at once) some renewals
    # find no room, and since 0014's chain columns a row is ~50 bytes wider, so fewer new
    # versions fit before a prune (measured 45 % here under four parallel tiers, 100 % alone). An
    # index over a column a renewal moves makes every one of them non-HOT (0 %), so a quarter is a
    # bound that still cannot pass with such an index; the share itself is the protocol
    # benchmark's figure, not a test's.
    assert updates >= 200 and hot / updates >= 0.25, (updates, hot)
    definitions = [r["d"] for r in conn.execute(  # columns, expressions and partial predicates alike
        "select pg_get_indexdef(indexrelid) as d from pg_index where indrelid = 'tool_jobs'::regclass").fetchall()]
    assert definitions and not [d for d in definitions if "lease_until" in d or "heartbeat_at" in d], \
        "no index covers what a renewal moves"
    assert sum(len(h.events(conn, c["id"])) for c in calls) == count, "a renewal journals nothing"


def test_a_worker_login_renews_only_its_own_calls(db, logins, conn):
    with h.as_login(db, A) as a, h.as_login(db, B) as b:
        for i in range(3):
            h.enqueue(a, "search", f"rls-{i}")
        mine = h.claim(a, A)
        my_other_name = h.claim(a, f"{A}:w-2")
        theirs = h.claim(b, B)
        their_lease = lease_of(conn, theirs["id"])
        # every id sent in A's own name: only the call A holds as A comes back
        assert {r["id"] for r in many(a, [mine, my_other_name, theirs], A)} == {mine["id"]}
        assert {r["id"] for r in many(a, [my_other_name], f"{A}:w-2")} == {my_other_name["id"]}
        # A naming B as the worker: row level security lets it touch nothing of B's
        assert many(a, [theirs], B) == []
        assert lease_of(conn, theirs["id"]) == their_lease, "B's lease was not extended by A"
        assert {r["id"] for r in many(b, [theirs, mine], B)} == {theirs["id"]}


# ------------------------------------------------------------------ step by step


def test_step_a_renewal_waits_for_an_operators_fence_and_leaves_that_call_out(db, conn):
    e1, _e2 = h.enqueue(conn, "search"), h.enqueue(conn, "search")
    c1, c2 = h.claim(conn, "w1"), h.claim(conn, "w1")
    operator = db.connect(autocommit=False)
    assert h.mark_terminal(operator, e1["id"], "running", c1["fencing_token"], "failed", force=True) is not None
    beat = h.Step(db, lambda c: many(c, [c1, c2], "w1")).start_and_wait_blocked(conn)
    operator.commit()
    operator.close()
    rows = beat.finish()
    assert [r["id"] for r in rows] == [c2["id"]], "the re-checked guard leaves the fenced call out"


def test_step_a_renewal_waits_for_a_cancel_and_hears_it(db, conn):
    e1, _e2 = h.enqueue(conn, "search"), h.enqueue(conn, "search")
    c1, c2 = h.claim(conn, "w1"), h.claim(conn, "w1")
    operator = db.connect(autocommit=False)
    h.cancel(operator, e1["id"], "running", c1["fencing_token"])
    beat = h.Step(db, lambda c: many(c, [c1, c2], "w1")).start_and_wait_blocked(conn)
    operator.commit()
    operator.close()
    rows = {r["id"]: r for r in beat.finish()}
    assert set(rows) == {c1["id"], c2["id"]}
    assert rows[c1["id"]]["cancel_requested"] is True and rows[c2["id"]]["cancel_requested"] is False
