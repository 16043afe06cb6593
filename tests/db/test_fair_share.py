"""Fair share and bounded holds (migration 0016, docs/seeds.md §000): caps on what runs at once per
tool and per agent, priority in the claim, a hold no lease outlives, a pause, and no call for an
unknown tool. Each rule is the database's: claim.sql follows it, and a hand-written UPDATE meets
the guard."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from console.db import reads
from console.db.connect import run_one
from console.shared.errors import BadInput
from tests import helpers as h

TOOLS = {
    "capped": ("read_only", {}),
    "search": ("read_only", {}),
    "slow_vendor": ("read_only", {"lease_seconds": 30.0, "heartbeat_seconds": 5.0, "jitter_seconds": 1.0}),
}
LOGINS = {"lc_fair_worker": "leasectl_worker", "lc_fair_operator": "leasectl_operator"}


def set_limits(conn: Any, tool: str, *, max_running: int | None = None,
               max_hold_seconds: float | None = None) -> None:
    assert run_one(conn, "admin/set_tool_limits", name=tool, max_running=max_running,
                   max_hold_seconds=max_hold_seconds) is not None


def running(conn: Any, *, tool: str | None = None, agent: str | None = None) -> int:
    return conn.execute(
        "select count(*) as n from tool_jobs where state in ('running', 'cancel_requested') "
        "and (%(tool)s::text is null or tool = %(tool)s) and (%(agent)s::text is null or agent_id = %(agent)s)",
        {"tool": tool, "agent": agent}).fetchone()["n"]


def claim_and_finish_all(db: Any, total: int, tools: list[str], claimers: int,
                         sample: Any, batch: int | None = None) -> tuple[int, list[int]]:
    """`claimers` threads, each on its own connection, claim and complete until `total` calls are
    done, holding each for 10-30 ms; a sampler reads `sample(conn)` every ~2 ms meanwhile. With
    `batch`, each claims up to that many at once (claim_many.sql) and completes them in one group
    (complete_many.sql), as AsyncWorker does."""
    done: list[int] = []
    samples: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def claimer(i: int) -> None:
        try:
            with db.connect() as c:
                while len(done) < total and not stop.is_set():
                    if batch is not None:
                        many = h.claim_many(c, f"w{i}", tools, batch)
                        if many:
                            time.sleep(random.uniform(0.01, 0.03))
                            assert len(h.complete_many(c, many, f"w{i}")) == len(many)
                            done.extend([1] * len(many))
                            continue
                        time.sleep(0.002)
                        continue
                    got = h.claim(c, f"w{i}", tools)
                    if got is None:
                        time.sleep(0.002)
                        continue
                    time.sleep(random.uniform(0.01, 0.03))
                    assert h.complete(c, got, f"w{i}") is not None
                    done.append(1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            stop.set()

    def sampler() -> None:
        with db.connect() as c:
            while not stop.is_set():
                samples.append(sample(c))
                time.sleep(0.002)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(claimers)]
    watcher = threading.Thread(target=sampler)
    watcher.start()
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(timeout=max(0.1, deadline - time.monotonic()))
    stop.set()
    watcher.join(timeout=10)
    assert not errors, errors
    return len(done), samples


@pytest.mark.parametrize("batch", [None, 4], ids=["claim", "claim_many"])
def test_sixteen_claimers_never_run_more_than_the_tools_cap(db: Any, conn: Any, batch: int | None) -> None:
    set_limits(conn, "capped", max_running=3)
    for _ in range(90):
        h.enqueue(conn, "capped")
    finished, samples = claim_and_finish_all(db, 90, ["capped"], 16, lambda c: running(c, tool="capped"),
                                             batch=batch)
    assert finished == 90, "every call ran: a cap throttles, it does not starve"
    assert len(samples) > 50, "sampled throughout"
    assert max(samples) <= 3, f"never above the cap: {max(samples)} ran at once"
    assert max(samples) == 3, "the cap was reached: the claimers did race"


@pytest.mark.parametrize("batch", [None, 3], ids=["claim", "claim_many"])
def test_an_agents_cap_holds_across_its_tools(db: Any, conn: Any, batch: int | None) -> None:
    h.register_agent(conn, "planner")
    assert run_one(conn, "admin/set_agent_limit", agent_id="planner", max_running=2) is not None
    for i in range(40):
        h.enqueue(conn, "search" if i % 2 else "capped", agent_id="planner")
    for _ in range(10):  # another agent's calls are not held back by this one's cap
        h.enqueue(conn, "search")
    finished, samples = claim_and_finish_all(db, 50, ["search", "capped"], 12,
                                             lambda c: running(c, agent="planner"), batch=batch)
    assert finished == 50
    assert max(samples) <= 2, f"the agent never ran more than its cap: {max(samples)}"
    assert max(samples) == 2


def test_claimers_take_slots_side_by_side_and_a_hand_claim_past_the_cap_is_refused(db: Any, conn: Any) -> None:
    """Step by step, under a cap of 2: A claims and has not committed; B's claim does not wait for
    A, it takes the second slot; C, whose snapshot still shows a free slot, chooses the third call,
    finds no slot and claims nothing this time; once A commits, C takes other work; a claim written
    by hand is refused (LCS15); once A's call ends, its slot is free again (nothing had to free it)."""
    set_limits(conn, "capped", max_running=2)
    first, second, third = (h.enqueue(conn, "capped") for _ in range(3))
    other = h.enqueue(conn, "search")
    with db.connect() as a, db.connect() as b, db.connect() as c:
        # a wait for A's locks would last B's lock timeout, made long to tell it from a loaded
        # machine's slowness (under 1 s, the bound could fail for that alone)
        b.execute("set lock_timeout = '30s'")
        with a.transaction():
            got_a = h.claim(a, "wa", ["capped"])
            assert got_a is not None and got_a["id"] == first["id"]
            started = time.monotonic()
            got_b = h.claim(b, "wb", ["capped"])
            assert time.monotonic() - started < 20, "B did not wait for A"
            assert got_b is not None and got_b["id"] == second["id"], "B took the other slot"
            assert h.claim(c, "wc", None) is None, "no slot for the call C chose: nothing this time"
        got_c = h.claim(c, "wc", None)
        assert got_c is not None and got_c["id"] == other["id"], "the cap is full: C took the other tool's call"
        state, _ = h.refusal(conn, "update tool_jobs set state = 'running', owner_id = 'wh', "
                                   "fencing_token = fencing_token + 1, attempt = attempt + 1, "
                                   "lease_until = now() + interval '1 second', heartbeat_at = now() "
                                   "where id = %s", (third["id"],))
        assert state == "LCS15", "a claim by hand is held to the cap"
        assert h.claim(c, "wc", ["capped"]) is None, "both slots are taken"
        assert h.complete(a, got_a, "wa") is not None
        got = h.claim(c, "wc", ["capped"])
        assert got is not None and got["id"] == third["id"], "A's slot freed itself"
    assert running(conn, tool="capped") == 2


def test_a_retried_call_never_starts_on_a_slot_another_claimer_is_taking(db: Any, conn: Any) -> None:
    """Step by step, under a cap of 2 (migrations 0026, 0027): J ran on slot 1 and was given back to
    the queue, so its row still says slot 1, which is free. X claims M by hand, takes slot 1 and has
    not committed; a claim of J must not count slot 1 as J's (up to 0025 the slot that named J
    passed, unlocked, and J, K and M ran at once): it finds no slot this time and claims nothing;
    once X commits, nothing more starts until one ends."""
    set_limits(conn, "capped", max_running=2)
    j, k, m = (h.enqueue(conn, "capped") for _ in range(3))
    got_j = h.claim(conn, "wj", ["capped"])
    got_k = h.claim(conn, "wk", ["capped"])
    assert got_j is not None and got_j["id"] == j["id"] and got_k is not None and got_k["id"] == k["id"]
    assert h.fail(conn, got_j, "wj", retryable=True) is not None
    assert h.job(conn, j["id"])["state"] == "queued"
    assert conn.execute("select tool_slot from tool_jobs where id = %s", (j["id"],)).fetchone()["tool_slot"] == 1, \
        "J's row still names the slot it ran on"
    with db.connect() as x, x.transaction():
        x.execute("update tool_jobs set state = 'running', owner_id = 'wm', fencing_token = fencing_token + 1, "
                  "attempt = attempt + 1, lease_until = now() + interval '30 seconds', heartbeat_at = now() "
                  "where id = %s", (m["id"],))
        assert x.execute("select tool_slot from tool_jobs where id = %s", (m["id"],)).fetchone()["tool_slot"] == 1, \
            "X took the free slot for M"
        assert h.claim(conn, "wj", ["capped"]) is None, "J's old slot is X's now: no slot this time"
    assert running(conn, tool="capped") == 2
    assert h.claim(conn, "wj", ["capped"]) is None, "the cap is full"
    assert h.complete(conn, got_k, "wk") is not None
    again = h.claim(conn, "wj", ["capped"])
    assert again is not None and again["id"] == j["id"] and running(conn, tool="capped") == 2


def test_a_cap_set_over_running_calls_counts_them(conn: Any) -> None:
    calls = [h.enqueue(conn, "capped") for _ in range(4)]
    held = [h.claim(conn, f"w{i}", ["capped"]) for i in range(3)]
    set_limits(conn, "capped", max_running=2)
    assert h.claim(conn, "w9", ["capped"]) is None, "three run, the cap is two: nothing starts"
    for i, got in enumerate(held[:2]):
        assert got is not None and h.complete(conn, got, f"w{i}") is not None
    again = h.claim(conn, "w9", ["capped"])
    assert again is not None and again["id"] == calls[3]["id"], "one runs now: one more may start"
    assert h.claim(conn, "w8", ["capped"]) is None


def test_a_cap_lowered_below_the_running_calls_starts_nothing_until_they_are_under_it(conn: Any) -> None:
    """Three run on slots 1-3 and the cap goes down to 2: the call on slot 3 is above the cap
    (migration 0027 counts the tool's calls while one runs there), so the slot that ends first
    starts nothing while two still run."""
    set_limits(conn, "capped", max_running=3)
    calls = [h.enqueue(conn, "capped") for _ in range(5)]
    held = [h.claim(conn, f"w{i}", ["capped"]) for i in range(3)]
    assert all(held) and running(conn, tool="capped") == 3
    set_limits(conn, "capped", max_running=2)
    assert held[0] is not None and h.complete(conn, held[0], "w0") is not None
    assert h.claim(conn, "w9", ["capped"]) is None, "two run, the cap is two"
    assert running(conn, tool="capped") == 2
    assert held[2] is not None and h.complete(conn, held[2], "w2") is not None
    again = h.claim(conn, "w9", ["capped"])
    assert again is not None and again["id"] == calls[3]["id"], "one runs: one more may start"
    assert h.claim(conn, "w8", ["capped"]) is None
    assert running(conn, tool="capped") == 2


def test_sixteen_claimers_hold_a_cap_set_over_calls_that_run_without_slots(db: Any, conn: Any) -> None:
    """Two calls run with no slot when a cap of 3 is set over them (they were claimed before it):
    until they end the tool's claims are counted one at a time, and 16 claimers racing meanwhile
    never start more than the one call the cap has room for."""
    lone = [h.enqueue(conn, "capped") for _ in range(2)]
    running_before = [h.claim(conn, f"old{i}", ["capped"]) for i in range(2)]
    assert [r["id"] for r in running_before if r] == [c["id"] for c in lone]
    set_limits(conn, "capped", max_running=3)
    for _ in range(30):
        h.enqueue(conn, "capped")
    # (the two may be reclaimed and finished by the claimers once their leases run out: a reclaim
    # keeps the slot a call has, none)
    finished, samples = claim_and_finish_all(db, 30, ["capped"], 16, lambda c: running(c, tool="capped"))
    assert finished >= 30
    assert max(samples) <= 3, f"never above the cap: {max(samples)} ran at once"


def test_a_calls_slot_is_written_by_its_claim_and_nothing_else(db: Any, conn: Any, logins: Any) -> None:
    """Two running calls on one slot would let a third start past the cap: the slots are the
    guard's to write. A worker login has no privilege on the columns; the schema's owner, which
    has, meets the guard (LCS05)."""
    set_limits(conn, "capped", max_running=2)
    for _ in range(2):
        h.enqueue(conn, "capped")
    with h.as_login(db, "lc_fair_worker") as worker:
        first = h.claim(worker, "lc_fair_worker", ["capped"])
        assert first is not None
        slot = worker.execute("select tool_slot from tool_jobs where id = %s", (first["id"],)).fetchone()["tool_slot"]
        assert slot == 1
        state, _ = h.refusal(worker, "update tool_jobs set tool_slot = 2 where id = %s", (first["id"],))
        assert state == "42501", "a worker login may not even name the column"
    for column in ("tool_slot", "agent_slot"):
        state, _ = h.refusal(conn, f"update tool_jobs set {column} = 7 where id = %s", (first["id"],))
        assert state == "LCS05", column
    second = h.claim(conn, "w2", ["capped"])
    assert second is not None
    assert conn.execute("select tool_slot from tool_jobs where id = %s", (second["id"],)).fetchone()["tool_slot"] == 2


def test_the_queue_is_taken_by_priority_then_age_and_an_expired_lease_first(conn: Any) -> None:
    old_low = h.enqueue(conn, "search", priority=0)
    high = h.enqueue(conn, "search", priority=5)
    later_high = h.enqueue(conn, "search", priority=5)
    urgent = h.enqueue(conn, "search", priority=9)
    order = [h.claim(conn, f"w{i}", ["search"]) for i in range(4)]
    assert [o["id"] for o in order if o] == [urgent["id"], high["id"], later_high["id"], old_low["id"]]
    for i, o in enumerate(order[:3]):
        assert o is not None and h.complete(conn, o, f"w{i}") is not None
    # reclaimable expired leases come before any priority
    h.expire_lease(conn, old_low["id"])
    h.enqueue(conn, "search", priority=9)
    again = h.claim(conn, "w9", ["search"])
    assert again is not None and again["id"] == old_low["id"]


def test_a_paused_tools_calls_wait_and_running_ones_go_on(db: Any, conn: Any, logins: Any) -> None:
    held = h.enqueue(conn, "search")
    got = h.claim(conn, "w1", ["search"])
    assert got is not None and got["id"] == held["id"]
    waiting = h.enqueue(conn, "search")
    with h.as_login(db, "lc_fair_operator") as operator:
        paused = run_one(operator, "operator/pause_tool", tool="search", paused_by="alice", reason="vendor 5xx")
    assert paused is not None and paused["paused_by"] == "alice"
    assert h.claim(conn, "w2", ["search"]) is None, "a paused tool's call is not started"
    assert h.heartbeat(conn, got, "w1") is not None, "a running call goes on"
    assert h.complete(conn, got, "w1") is not None
    # by hand too, for any login
    state, _ = h.refusal(conn, "update tool_jobs set state = 'running', owner_id = 'w3', fencing_token = 1, "
                               "attempt = 1, lease_until = now() + interval '1 second', heartbeat_at = now() "
                               "where id = %s", (waiting["id"],))
    assert state == "LCS15"
    journal = conn.execute("select kind, actor, reason, details ->> 'tool' as tool from fleet_events "
                           "where kind like 'tool_%' order by id").fetchall()
    assert journal == [{"kind": "tool_paused", "actor": "alice", "reason": "vendor 5xx", "tool": "search"}]
    with h.as_login(db, "lc_fair_worker") as worker:
        state, _ = h.refusal(worker, "select * from leasectl_resume_tool('search', 'lc_fair_worker', 'mine')")
        assert state == "42501", "a worker does not resume a tool"
    with h.as_login(db, "lc_fair_operator") as operator:
        assert run_one(operator, "operator/resume_tool", tool="search", resumed_by="bob", reason="vendor ok")
        assert run_one(operator, "operator/resume_tool", tool="search", resumed_by="bob", reason="again") is None
    again = h.claim(conn, "w2", ["search"])
    assert again is not None and again["id"] == waiting["id"]


def test_no_lease_outlives_the_hold_and_a_call_past_it_is_labelled_then_reclaimed(conn: Any) -> None:
    set_limits(conn, "slow_vendor", max_hold_seconds=1.5)
    e = h.enqueue(conn, "slow_vendor")
    got = h.claim(conn, "w1", ["slow_vendor"])
    assert got is not None
    row = conn.execute("select * from tool_jobs where id = %s", (e["id"],)).fetchone()
    hold = (row["hold_until"] - row["claimed_at"]).total_seconds()
    assert hold == pytest.approx(1.5, abs=0.01) and row["lease_until"] <= row["hold_until"], "a 30 s lease, cut"
    beat = h.heartbeat(conn, got, "w1")
    assert beat is not None and beat["lease_until"] <= row["hold_until"], "a heartbeat does not pass the hold"
    # by hand: a lease past the hold is refused (the lease's check), and the hold is the guard's
    assert h.refusal(conn, "update tool_jobs set lease_until = hold_until + interval '1 second' where id = %s",
                     (e["id"],)) == ("23514", "tool_jobs_lease_bounded")
    assert h.refusal(conn, "update tool_jobs set hold_until = hold_until + interval '1 hour' where id = %s",
                     (e["id"],))[0] == "LCS05"
    h.wait_until(lambda: conn.execute("select hold_until < now() as past from tool_jobs where id = %s",
                                      (e["id"],)).fetchone()["past"], timeout=10, what="the hold to run out")
    assert h.heartbeat(conn, got, "w1") is None, "the lease ended with the hold"
    summary = reads.jobs(conn, ids=[e["id"]])[0]
    assert summary.health == "past_max_hold"
    assert any(r.id == e["id"] and r.health == "past_max_hold" for r in reads.triage(conn).rows)
    # the ordinary rules for an expired lease: reclaimed, with a new hold
    again = h.claim(conn, "w2", ["slow_vendor"])
    assert again is not None and again["id"] == e["id"] and again["fencing_token"] == got["fencing_token"] + 1
    assert conn.execute("select hold_until from tool_jobs where id = %s",
                        (e["id"],)).fetchone()["hold_until"] > row["hold_until"]


def test_an_unknown_tool_is_refused_at_enqueue_unless_auto_registration_is_allowed(conn: Any) -> None:
    with pytest.raises(BadInput, match="unknown tool never_registered"):
        h.enqueue(conn, "never_registered")
    assert conn.execute("select count(*) as n from tools where name = 'never_registered'").fetchone()["n"] == 0
    conn.execute("update leasectl_settings set value = 'true' where name = 'tools.allow_auto_register'")
    made = h.enqueue(conn, "never_registered")
    assert made["tool"] == "never_registered"
    tool = conn.execute("select side_effect, auto_registered from tools where name = 'never_registered'").fetchone()
    assert tool == {"side_effect": "mutating_unverifiable", "auto_registered": True}


def test_settings_and_limits_are_the_owners_to_write(db: Any, conn: Any, logins: Any) -> None:
    with h.as_login(db, "lc_fair_worker") as worker:
        assert h.refusal(worker, "update leasectl_settings set value = 'true'")[0] == "42501"
        assert h.refusal(worker, "update tools set max_running = null, paused_at = null")[0] == "42501"
    with h.as_login(db, "lc_fair_operator") as operator:
        assert h.refusal(operator, "update tools set max_running = 1000")[0] == "42501"


def test_the_fused_completion_hands_its_slot_to_the_next_call(conn: Any) -> None:
    """worker/complete_and_claim.sql under a cap of 2 with two calls running: the completion ends
    one, and the claim in the same statement takes the slot it freed (no extra round trip)."""
    from psycopg.types.json import Jsonb

    set_limits(conn, "capped", max_running=3)
    calls = [h.enqueue(conn, "capped") for _ in range(4)]
    held = [h.claim(conn, f"w{i}", ["capped"]) for i in range(3)]
    assert all(held)
    row = run_one(conn, "worker/complete_and_claim", job_id=held[0]["id"], worker_id="w0",
                  fencing_token=held[0]["fencing_token"], result=Jsonb({"ok": True}), tools=["capped"])
    assert row is not None and row["completed"] and row["id"] == calls[3]["id"], "the freed slot was taken"
    assert running(conn, tool="capped") == 3
    # a rejected completion frees nothing: the cap stays full
    h.enqueue(conn, "capped")
    stale = run_one(conn, "worker/complete_and_claim", job_id=held[1]["id"], worker_id="w1",
                    fencing_token=held[1]["fencing_token"] - 1, result=Jsonb({}), tools=["capped"])
    assert stale is not None and not stale["completed"] and stale["id"] is None
    assert running(conn, tool="capped") == 3


def test_pause_resume_and_tools_from_the_command_line(db: Any, conn: Any) -> None:
    invoke = h.cli_invoker(db.dsn, "alice")
    set_limits(conn, "capped", max_running=3, max_hold_seconds=600)
    h.enqueue(conn, "search")
    paused = invoke("pause", "search", "--reason", "vendor 5xx storm, INC-2231")
    assert paused.exit_code == 0 and "tool search is paused" in paused.output
    again = invoke("pause", "search", "--reason", "again")
    assert again.exit_code == 3 and "already paused" in again.output and "alice" in again.output
    assert invoke("pause", "nope", "--reason", "x").exit_code == 2, "an unknown tool is bad input"
    assert invoke("pause", "search", "--reason", "  ").exit_code == 2, "a reason is required"
    listed = h.js(invoke("tools", "--json"))
    first = listed[0]
    assert first["name"] == "search" and first["paused_by"] == "alice" and first["queued"] == 1, "paused first"
    capped = next(t for t in listed if t["name"] == "capped")
    assert capped["max_running"] == 3 and capped["max_hold_seconds"] == 600
    assert [t.name for t in reads.triage(conn).paused_tools] == ["search"], "Triage names it"
    actions = h.js(invoke("audit", "actions", "--action", "pause", "--json"))
    assert [(a["action"], a["operator"], a["details"]["tool"]) for a in actions] == [("pause", "alice", "search")]
    resumed = invoke("resume", "search")
    assert resumed.exit_code == 0 and "vendor 5xx storm" in resumed.output, "says which pause it ended"
    assert invoke("resume", "search").exit_code == 3
    assert reads.triage(conn).paused_tools == []
