"""Claims and completions in batches (worker/claim_many.sql, worker/complete_many.sql): the rules
of claim.sql and complete.sql, several calls per statement and per commit. The caps under
claim_many are in tests/db/test_fair_share.py (sixteen claimers, a batch each)."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests import helpers as h

TOOLS = {
    "search": ("read_only", {}),
    "payment": ("mutating_unverifiable", {}),
}
LOGINS = {"lc_batch_worker": "leasectl_worker", "lc_batch_other": "leasectl_worker"}


def test_claim_many_takes_expired_leases_first_then_the_queue_by_priority(conn: Any) -> None:
    low = h.enqueue(conn, "search", priority=0)
    high = h.enqueue(conn, "search", priority=5)
    lapsed = h.enqueue(conn, "search")
    taken = h.claim(conn, "w-old", ["search"])
    assert taken is not None and taken["id"] == high["id"]
    h.expire_lease(conn, high["id"])
    later = h.enqueue(conn, "search", priority=9)
    got = h.claim_many(conn, "w-1", ["search"], 3)
    assert [g["id"] for g in got] == [high["id"], later["id"], low["id"]], "the expired lease first, then priority"
    assert got[0]["fencing_token"] == taken["fencing_token"] + 1 and got[0]["attempt"] == 2
    single = h.claim(conn, "w-2", ["search"])
    assert single is not None and single["id"] == lapsed["id"], "the last queued call"
    assert set(got[0]) == set(single), "the same columns as claim.sql"
    assert h.claim_many(conn, "w-1", ["search"], 3) == [], "nothing left"
    owners = conn.execute("select owner_id, count(*) as n from tool_jobs group by owner_id order by 1").fetchall()
    assert {o["owner_id"]: o["n"] for o in owners} == {"w-1": 3, "w-2": 1}
    claims = conn.execute("select count(*) as n from job_events where kind in ('claimed', 'reclaimed')").fetchone()
    assert claims["n"] == 5, "each claim journaled, as from claim.sql"


def test_claim_many_takes_no_more_than_asked_and_nothing_for_zero_or_null(conn: Any) -> None:
    for _ in range(5):
        h.enqueue(conn, "search")
    assert h.claim_many(conn, "w-1", ["search"], 0) == []
    assert h.claim_many(conn, "w-1", ["search"], None) == []
    assert h.claim_many(conn, "w-1", ["search"], -3) == []
    assert len(h.claim_many(conn, "w-1", ["search"], 2)) == 2
    assert len(h.claim_many(conn, "w-1", None, 10)) == 3, "what is left, for any tool"


def test_claim_many_keeps_the_claims_other_rules(conn: Any) -> None:
    """An unverifiable call whose request went out is not reclaimed (a human decides); a paused
    tool's calls are not started: the rules of claim.sql, not a looser copy."""
    paid = h.enqueue(conn, "payment")
    got = h.claim_many(conn, "w-1", ["payment"], 1)[0]
    assert h.start_side_effect(conn, got, "w-1", "req-1") is not None
    h.expire_lease(conn, paid["id"])
    h.enqueue(conn, "search")
    conn.execute("select leasectl_pause_tool('search', 'op', 'vendor down')")
    assert h.claim_many(conn, "w-2", None, 10) == []
    conn.execute("select leasectl_resume_tool('search', 'op', 'back')")
    assert len(h.claim_many(conn, "w-2", None, 10)) == 1


def test_complete_many_writes_each_result_under_its_own_guard(db: Any, conn: Any) -> None:
    calls = [h.enqueue(conn, "search") for _ in range(4)]
    got = h.claim_many(conn, "w-1", ["search"], 4)
    assert [g["id"] for g in got] == [c["id"] for c in calls]
    a, b, c, d = got
    h.cancel(conn, b["id"], "running", b["fencing_token"], operator="op")  # cancel_requested: still the owner's
    stale = dict(c, fencing_token=c["fencing_token"] - 1)                  # a token that is not the call's
    with db.connect() as other:
        assert h.complete(other, d, "w-1", {"first": True}) is not None     # already finished
    done = h.complete_many(conn, [a, b, stale, d], "w-1", [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}])
    assert sorted(str(r["id"]) for r in done) == sorted(str(x["id"]) for x in (a, b))
    rows = {r["id"]: r for r in conn.execute("select id, state, result, completed_despite_cancel from tool_jobs")}
    assert rows[a["id"]]["result"] == {"n": 1} and rows[a["id"]]["state"] == "succeeded"
    assert rows[b["id"]]["completed_despite_cancel"], "after a cancel request, as complete.sql records it"
    assert rows[c["id"]]["state"] == "running", "the stale token wrote nothing"
    assert rows[d["id"]]["result"] == {"first": True}, "a finished call is not written again"
    assert h.complete_many(conn, [], "w-1") == []


def test_complete_many_never_writes_another_workers_call(db: Any, conn: Any, logins: Any) -> None:
    h.enqueue(conn, "search")
    h.enqueue(conn, "search")
    with h.as_login(db, "lc_batch_worker") as mine, h.as_login(db, "lc_batch_other") as theirs:
        held = h.claim_many(mine, "lc_batch_worker", ["search"], 1)
        other = h.claim_many(theirs, "lc_batch_other", ["search"], 1)
        assert len(held) == 1 and len(other) == 1
        done = h.complete_many(mine, held + other, "lc_batch_worker")
        assert [r["id"] for r in done] == [held[0]["id"]]
        states = {r["id"]: r["state"] for r in conn.execute("select id, state from tool_jobs")}
        assert states[held[0]["id"]] == "succeeded"
        assert states[other[0]["id"]] == "running", "row level security and the guard: not its call"
        assert h.complete_many(theirs, other, "lc_batch_worker") == [], "nor under another worker's name"


def test_two_batches_never_share_a_call_step_by_step(db: Any, conn: Any) -> None:
    """A claims a batch and has not committed; B's batch does not wait for A's locks and takes the
    calls A did not; after A commits, nothing is left for either."""
    for _ in range(6):
        h.enqueue(conn, "search")
    with db.connect() as a, db.connect() as b:
        # a wait for A's locks would last B's lock timeout, made long to tell it from a loaded
        # machine's slowness (under 1 s, the bound could fail for that alone)
        b.execute("set lock_timeout = '30s'")
        with a.transaction():
            got_a = h.claim_many(a, "wa", ["search"], 4)
            started = time.monotonic()
            got_b = h.claim_many(b, "wb", ["search"], 4)
            assert time.monotonic() - started < 20, "B did not wait for A"
        assert len(got_a) == 4 and len(got_b) == 2
        assert not {g["id"] for g in got_a} & {g["id"] for g in got_b}
        assert h.claim_many(a, "wa", ["search"], 4) == [] and h.claim_many(b, "wb", ["search"], 4) == []


def test_eight_batch_claimers_at_once_claim_every_call_once(db: Any, conn: Any) -> None:
    total = 400
    for i in range(total):
        h.enqueue(conn, "search", f"k:{i}")
    claimed: list[Any] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def claimer(i: int) -> None:
        try:
            with db.connect() as c:
                start.wait()
                while True:
                    got = h.claim_many(c, f"w{i}", ["search"], 7)
                    if not got:
                        return
                    assert len(h.complete_many(c, got, f"w{i}")) == len(got)
                    with lock:
                        claimed.extend(g["id"] for g in got)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(claimed) == total and len(set(claimed)) == total, "every call once, none twice"
    counts = conn.execute("select state, count(*) as n from tool_jobs group by state").fetchall()
    assert [(r["state"], r["n"]) for r in counts] == [("succeeded", total)]
