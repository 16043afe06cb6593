"""One guard for every change of a call (migrations/0015_trust_third_walk.sql): the claim and the
completion every call makes run one plpgsql guard each, a heartbeat none, and the bounds that
moved from check constraints into the guards still refuse with SQLSTATE 23514. Since
migrations/0029_fewer_parses.sql the row's bounds are one check that calls a function
(leasectl_tool_jobs_bounded), run for every row written, a heartbeat's too, and the journal's guard
runs for each journal row (its WHEN clause, parsed again per row, cost more than the call)."""

from __future__ import annotations

from console.db.connect import Conn
from tests.helpers import SLOW, as_login, claim, complete, enqueue, heartbeat, refusal, register_tool

W, SUPERVISOR = "lc_guard_w1", "lc_guard_sup"
LOGINS = {W: "leasectl_worker", SUPERVISOR: "leasectl_supervisor"}
TOOLS = {"search": ("read_only", SLOW)}


def functions_called(conn: Conn, step) -> dict[str, int]:
    """The plpgsql functions `step` ran, with how many calls: counted by the server
    (track_functions), so nothing about the guard is taken on trust. The session's counts not yet
    handed to the statistics include earlier transactions': the answer is the difference."""
    counted = "select funcname, calls from pg_stat_xact_user_functions"
    with conn.transaction():
        conn.execute("set local track_functions = 'pl'")
        before = {r["funcname"]: r["calls"] for r in conn.execute(counted).fetchall()}
        step()
        after = {r["funcname"]: r["calls"] for r in conn.execute(counted).fetchall()}
    return {name: calls - before.get(name, 0) for name, calls in after.items() if calls != before.get(name, 0)}


def test_a_claim_and_a_completion_run_one_guard_each_and_a_heartbeat_none(conn):
    enqueue(conn, "search")
    held: dict = {}

    def take() -> None:
        held.update(claim(conn, "w-1", ["search"]) or {})

    # the guard and the journal, the journal row's guard, and the row's bounds (a check)
    each = {"leasectl_tool_jobs_guard": 1, "leasectl_tool_jobs_journal": 1, "leasectl_job_events_kind_guard": 1,
            "leasectl_tool_jobs_bounded": 1}
    assert functions_called(conn, take) == each
    assert held, "the call was claimed"
    assert functions_called(conn, lambda: heartbeat(conn, held, "w-1")) == {"leasectl_tool_jobs_bounded": 1}, \
        "a heartbeat fires no trigger: only the row's bounds are judged"
    done = functions_called(conn, lambda: complete(conn, held, "w-1", {"ok": True}))
    assert done == each
    row = conn.execute("select state, finished_at >= claimed_at as dated from tool_jobs where id = %s",
                       (held["id"],)).fetchone()
    assert row["state"] == "succeeded" and row["dated"]



def test_a_malformed_trace_id_is_refused_at_enqueue(conn):
    refused = refusal(conn, "insert into tool_jobs (idempotency_key, payload, tool, trace_id) "
                             "values ('t-1', '{}', 'search', 'not-a-trace')")
    assert refused == ("23514", "tool_jobs_trace_id_check")
    assert refusal(conn, "insert into tool_jobs (idempotency_key, payload, tool, trace_id) "
                          "values ('t-2', '{}', 'search', repeat('0', 32))") == ("23514", "tool_jobs_trace_id_check")
    assert refusal(conn, "insert into tool_jobs (idempotency_key, payload, tool, trace_id) "
                          "values ('t-3', '{}', 'search', repeat('ab', 16))") == (None, None)


def test_a_claim_under_an_overlong_owner_name_is_refused(db, conn, logins):
    enqueue(conn, "search")
    with as_login(db, W) as w:
        refused = refusal(w, "update tool_jobs set state = 'running', owner_id = %s, "
                              "fencing_token = fencing_token + 1, attempt = attempt + 1, "
                              "lease_until = now() + interval '1 minute' "
                              "where state = 'queued'", (W + ":" + "x" * 300,))
    assert refused == ("23514", "tool_jobs_names_bounded")
    assert conn.execute("select count(*) as n from tool_jobs where state = 'queued'").fetchone()["n"] == 1


def test_a_check_finds_done_not_done_or_unknown_and_journals_at_most_64_kib(db, conn, logins):
    register_tool(conn, "erp", "mutating_verifiable", **SLOW)
    enqueue(conn, "erp")
    with as_login(db, W) as w:
        held = claim(w, W, ["erp"])
        assert held is not None
        found_maybe = refusal(w, "update tool_jobs set check_found = 'maybe', check_token = fencing_token "
                                  "where id = %s", (held["id"],))
        said_too_much = refusal(w, "update tool_jobs set check_found = 'not_done', check_token = fencing_token, "
                                    "check_details = jsonb_build_object('said', repeat('x', 70000) "
                                    "|| md5(random()::text)) where id = %s", (held["id"],))
    assert found_maybe == ("23514", "tool_jobs_check_found_check")
    assert said_too_much == ("23514", "job_events_details_bounded")
    assert conn.execute("select count(*) as n from job_events where kind = 'side_effect_checked'").fetchone()["n"] == 0


def test_an_ending_before_the_call_was_made_or_with_an_endless_reason_is_refused(conn):
    """The schema's owner, exempt from the story rules, still meets the bounds."""
    enqueue(conn, "search")
    held = claim(conn, "w-1", ["search"])
    assert held is not None
    assert refusal(conn, "update tool_jobs set state = 'succeeded', finished_at = '2000-01-01' where id = %s",
                    (held["id"],)) == ("23514", "tool_jobs_finished_after_made")
    assert refusal(conn, "update tool_jobs set state = 'failed', terminal_reason = %s where id = %s",
                    ("x" * 2001, held["id"])) == ("23514", "tool_jobs_terminal_reason_bounded")
    assert conn.execute("select state from tool_jobs where id = %s", (held["id"],)).fetchone()["state"] == "running"


def test_no_time_of_a_call_moves_to_infinity(db, conn, logins):
    """0013's finite times, judged by the lease's check and by the guard now that the rest are no
    checks: the control plane's cancel time, a worker's lease."""
    enqueue(conn, "search")
    with as_login(db, W) as w:
        held = claim(w, W, ["search"])
        assert held is not None
        assert refusal(w, "update tool_jobs set lease_until = '-infinity' where id = %s",
                        (held["id"],)) == ("23514", "tool_jobs_lease_bounded")
    with as_login(db, SUPERVISOR) as s:
        assert refusal(s, "update tool_jobs set cancel_requested_at = 'infinity', cancel_requested_by = 'x' "
                           "where id = %s", (held["id"],)) == ("23514", "tool_jobs_finite_times")
    with as_login(db, W) as w:
        assert refusal(w, "update tool_jobs set deadline_at = now() + interval '1 year' where id = %s",
                        (held["id"],))[0] == "42501", "a worker may not write a deadline at all"
    assert refusal(conn, "update tool_jobs set deadline_at = now() + interval '1 year' where id = %s",
                    (held["id"],))[0] == "LCS05", "nor may the schema's owner: a deadline never changes"
    row = conn.execute("select deadline_at, cancel_requested_at, lease_until > now() as leased from tool_jobs "
                       "where id = %s", (held["id"],)).fetchone()
    assert row["deadline_at"] is None and row["cancel_requested_at"] is None and row["leased"]


def test_a_new_call_keeps_its_names_and_times_within_bounds(conn):
    assert refusal(conn, "insert into tool_jobs (idempotency_key, payload, tool, session_id) "
                          "values ('n-1', '{}', 'search', repeat('s', 201))") == ("23514", "tool_jobs_names_bounded")
    assert refusal(conn, "insert into tool_jobs (idempotency_key, payload, tool, deadline_at) "
                          "values ('n-2', '{}', 'search', 'infinity')") == ("23514", "tool_jobs_finite_times")
    assert conn.execute("select count(*) as n from tool_jobs").fetchone()["n"] == 0
