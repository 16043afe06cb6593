"""Bulk actions over a filter: one snapshot, a guard per call, one batch id, a
confirmation sized to what it touches, and as safe under races as one action."""

from __future__ import annotations

import json
import threading

import pytest
from typer.testing import CliRunner

from console.core.filters import parse_filter
from console.db import bulk
from console.operator.cli import app
from console.shared.errors import BadInput
from tests.helpers import (
    FAST,
    SLOW,
    claim,
    complete,
    events,
    job,
    outcomes_unknown,
    running_and_queued,
    wait_until,
)

TOOLS = {"search": ("read_only", SLOW), "pay": ("mutating_unverifiable", FAST)}


@pytest.fixture
def calls(db, conn):
    """Six running calls of `search` (each its own worker's) and three queued: (db, conn, running, queued)."""
    return db, conn, *running_and_queued(conn, 6, 3)


def invoke(db, *args, input=None, terminal=False, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr("console.operator.cli.common.stdin_is_terminal", lambda: terminal)
    result = CliRunner().invoke(app, [*args, "--dsn", db.dsn], input=input, env={"USER": "bulk-tester"})
    assert "Traceback" not in result.output, result.output
    return result


def batch_journal(conn):
    return [e for e in conn.execute("select * from job_events where kind like 'operator_%' order by id")]


def test_bulk_cancel_asks_for_the_count_and_journals_one_batch(calls, monkeypatch):
    db, conn, running, queued = calls
    no_terminal = invoke(db, "cancel", "--where", "tool:search", "--reason", "incident 42")
    assert no_terminal.exit_code == 2 and "no terminal" in no_terminal.output
    assert not batch_journal(conn), "no terminal and no --yes: nothing changed"
    assert "9 calls" in no_terminal.output and "queued → cancelled" in no_terminal.output
    assert "cancel requested (NOT stopped" in no_terminal.output, "what will change, per state"

    wrong = invoke(db, "cancel", "--where", "tool:search", "--reason", "incident 42", input="8\n", terminal=True,
                   monkeypatch=monkeypatch)
    assert wrong.exit_code == 2 and "not confirmed" in wrong.output and not batch_journal(conn)

    done = invoke(db, "cancel", "--where", "tool:search", "--reason", "incident 42", input="9\n", terminal=True,
                  monkeypatch=monkeypatch)
    assert done.exit_code == 0, done.output
    assert "9 applied" in done.output
    journal = batch_journal(conn)
    assert len(journal) == 9 and len({e["details"]["batch_id"] for e in journal}) == 1
    assert len({e["request_id"] for e in journal}) == 9, "each call keeps its own request id"
    assert {job(conn, r["id"])["state"] for r in running} == {"cancel_requested"}
    assert {job(conn, q["id"])["state"] for q in queued} == {"cancelled"}


def test_calls_the_action_cannot_apply_to_are_skipped_and_said_so(calls):
    db, conn, running, queued = calls
    result = invoke(db, "approve-retry", "--where", "tool:search", "--reason", "checked", "--yes")
    assert result.exit_code == 3, "nothing applied: not every call was"
    assert "9 calls will be skipped" in result.output and "only a call whose outcome is unknown" in result.output
    assert not batch_journal(conn), "skipped calls are not sent"


def test_approving_unverifiable_retries_in_bulk_asks_for_the_words(db, conn, monkeypatch):
    outcomes_unknown(conn, 3)
    count = invoke(db, "approve-retry", "--where", "state:outcome_unknown", "--reason", "bank says no capture",
                   input="3\n", terminal=True, monkeypatch=monkeypatch)
    assert count.exit_code == 2 and "approve 3 unverifiable" in count.output, "the count alone is not enough"
    words = invoke(db, "approve-retry", "--where", "state:outcome_unknown", "--reason", "bank says no capture",
                   input="approve 3 unverifiable\n", terminal=True, monkeypatch=monkeypatch)
    assert words.exit_code == 0, words.output
    assert conn.execute("select count(*) as n from tool_jobs where state = 'queued'").fetchone()["n"] == 3


@pytest.mark.parametrize("where, says", [("flavour:vanilla", "unknown filter key"), ("state:", "nothing after"),
                                          ("payment", "name its key")])
def test_a_bad_filter_is_bad_input_with_the_grammar(calls, where, says):
    db, conn, _, _ = calls
    result = invoke(db, "cancel", "--where", where, "--reason", "x", "--yes")
    assert result.exit_code == 2 and says in result.output and "filter keys" in result.output
    assert not batch_journal(conn)


def test_up_to_the_limit_a_bulk_action_is_sent_at_once_without_an_operation(calls):
    """Up to 1,000 calls nothing changes: sent at once, no bulk operation (tests/db/test_bulk_operations.py
    has what happens over it)."""
    db, conn, _, _ = calls
    result = invoke(db, "cancel", "--where", "tool:search", "--reason", "x", "--yes")
    assert result.exit_code == 0 and "9 applied" in result.output and "bulk operation" not in result.output
    assert conn.execute("select count(*) as n from bulk_operations").fetchone()["n"] == 0


def test_more_calls_than_an_operation_takes_is_bad_input(calls, monkeypatch):
    db, conn, _, _ = calls
    monkeypatch.setattr(bulk, "OPERATION_LIMIT", 5)
    result = invoke(db, "cancel", "--where", "tool:search", "--reason", "x", "--yes")
    assert result.exit_code == 2 and "more than 5 calls" in result.output and not batch_journal(conn)
    assert conn.execute("select count(*) as n from bulk_operations").fetchone()["n"] == 0


def test_one_call_or_a_filter_not_both_and_not_a_token(calls):
    db, _conn, running, _ = calls
    assert invoke(db, "cancel", str(running[0]["id"]), "--where", "tool:search", "--reason", "x").exit_code == 2
    assert invoke(db, "cancel", "--reason", "x").exit_code == 2
    assert invoke(db, "cancel", "--where", "tool:search", "--token", "1", "--reason", "x", "--yes").exit_code == 2


def test_calls_that_change_between_snapshot_and_apply_are_refused_and_journaled(calls):
    db, conn, running, queued = calls
    with db.connect() as operator:
        plan = bulk.plan("cancel", bulk.snapshot(operator, where=parse_filter("tool:search")))
        assert plan.count == 9
        # meanwhile two calls move on: one finishes, one is claimed
        complete(conn, running[0], "w-0")
        claim(conn, "w-late", ["search"])
        result = bulk.apply(operator, plan, operator="dana", reason="incident 42")
    assert result.count("applied") == 7 and result.count("refused") == 2
    refused = {o.job_id for o in result.outcomes if o.outcome == "refused"}
    assert running[0]["id"] in refused
    for o in result.outcomes:
        if o.outcome == "refused":
            assert "changed since you looked" in o.why
            journaled = [e for e in events(conn, o.job_id) if e["kind"] == "operator_cancel"]
            assert journaled[-1]["details"]["outcome"] == "refused"
            assert journaled[-1]["details"]["batch_id"] == str(result.batch_id)
    assert job(conn, running[0]["id"])["state"] == "succeeded", "nothing acted on blind"


def test_two_operators_bulk_cancel_overlapping_sets_at_once(calls):
    """Each call is cancelled once; the other operator's attempt on it is refused (and journaled)."""
    db, conn, running, queued = calls
    with db.connect() as a, db.connect() as b:
        plan_a = bulk.plan("cancel", bulk.snapshot(a, where=parse_filter("tool:search")))
        plan_b = bulk.plan("cancel", bulk.snapshot(b, where=parse_filter("state:running")))
        results = {}
        start = threading.Barrier(2)

        def go(name, connection, plan):
            start.wait()
            results[name] = bulk.apply(connection, plan, operator=name, reason="overlap")

        threads = [threading.Thread(target=go, args=("ana", a, plan_a)), threading.Thread(target=go, args=("bo", b, plan_b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    applied = [o.job_id for r in results.values() for o in r.outcomes if o.outcome == "applied"]
    assert len(applied) == len(set(applied)) == 9, "every call cancelled exactly once"
    overlap = {r["id"] for r in running}
    refused = [o.job_id for r in results.values() for o in r.outcomes if o.outcome == "refused"]
    assert sorted(refused) == sorted(overlap), "the running calls both selected: the second attempt refused"
    for call in overlap:
        outcomes = sorted(e["details"]["outcome"] for e in events(conn, call) if e["kind"] == "operator_cancel")
        assert outcomes == ["applied", "refused"]


def test_step_by_step_the_second_operator_waits_on_the_row_and_is_refused(calls):
    """Deterministic interleaving: operator B's statement blocks on the row A holds (uncommitted),
    then re-checks its guard against A's committed change (EvalPlanQual) and is refused."""
    db, conn, running, _ = calls
    target = running[1]
    with db.connect(autocommit=False) as a, db.connect() as b:
        snap_b = bulk.plan("cancel", bulk.snapshot(b, ids=[target["id"]]))
        b.execute("set lock_timeout = '30s'")
        from console.db.connect import run, run_one

        run(a, "meta/request_id", request_id="00000000-0000-4000-8000-000000000001")
        run_one(a, "operator/request_cancel", job_id=target["id"], seen_state="running", seen_token=1,
                operator="ana", reason="first")  # A holds the row, not committed
        done = {}
        thread = threading.Thread(target=lambda: done.setdefault("r", bulk.apply(b, snap_b, operator="bo",
                                                                                 reason="second")))
        thread.start()
        # B is waiting once the server says so, however late a loaded machine gets it there (a
        # fixed second may not be enough); B's lock timeout is made long enough for that
        wait_until(lambda: conn.execute("select count(*) as n from pg_locks where not granted and pid = %s",
                                        (b.info.backend_pid,)).fetchone()["n"] >= 1,
                   timeout=20, what="B to wait on the row lock A holds")
        assert thread.is_alive(), "B is blocked on the row lock A holds"
        a.commit()
        thread.join(timeout=10)
    assert done["r"].outcomes[0].outcome == "refused"
    assert job(conn, target["id"])["cancel_requested_by"] == "ana"


def test_snapshot_needs_a_selection():
    with pytest.raises(BadInput):
        bulk.snapshot(None, where=None, ids=None)  # type: ignore[arg-type]


def test_mark_terminal_in_bulk_needs_force_for_live_leases(calls):
    db, conn, running, queued = calls
    plain = bulk.plan("mark_terminal", [j for j in bulk.snapshot(conn, where=parse_filter("tool:search"))],
                      terminal_state="failed")
    assert plain.count == 3 and len(plain.skipped) == 6, "queued calls can be failed; live leases need force"
    assert "force would fence it out" in plain.skipped[0][1]
    forced = bulk.plan("mark_terminal", bulk.snapshot(conn, where=parse_filter("tool:search")),
                       terminal_state="failed", force=True)
    result = bulk.apply(conn, forced, operator="dana", reason="incident")
    assert result.all_applied and {job(conn, r["id"])["fencing_token"] for r in running} == {2}


def test_bulk_json_free_summary_and_exit_3_when_any_refused(calls, monkeypatch):
    db, conn, running, queued = calls
    complete(conn, running[0], "w-0")  # finished: a cancel is not possible → skipped
    result = invoke(db, "cancel", "--where", "tool:search", "--reason", "x", "--yes")
    assert result.exit_code == 3 and "1 call will be skipped" in result.output and "8 applied" in result.output
    assert json.loads(CliRunner().invoke(app, ["jobs", "--json", "--dsn", db.dsn]).output)
