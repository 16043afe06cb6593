"""The database enforces the state machine whatever SQL a client sends (raw UPDATEs here)."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import FAST, claim, complete, enqueue, expire_lease, register_tool, start_side_effect


@pytest.fixture
def conn(db):
    with psycopg.connect(db.dsn, autocommit=True) as c:
        from psycopg.rows import dict_row

        c.row_factory = dict_row
        register_tool(c, "search", "read_only", **FAST)
        register_tool(c, "pay", "mutating_unverifiable", **FAST)
        yield c


def sqlstate_of(conn, statement, params=()):
    with pytest.raises(psycopg.Error) as info:
        conn.execute(statement, params)
    return info.value.sqlstate


@pytest.mark.parametrize(("start", "to"), [
    ("queued", "succeeded"), ("queued", "outcome_unknown"), ("queued", "cancel_requested"),
])
def test_illegal_transitions_from_queued(conn, start, to):
    e = enqueue(conn, "search")
    assert sqlstate_of(conn, "update tool_jobs set state = %s where id = %s", (to, e["id"])) == "LCS01"


def test_running_without_owner_or_new_token_is_refused(conn):
    e = enqueue(conn, "search")
    assert sqlstate_of(conn, "update tool_jobs set state='running' where id=%s", (e["id"],)) == "LCS01"
    assert sqlstate_of(conn, "update tool_jobs set state='running', owner_id='x' where id=%s",
                       (e["id"],)) == "LCS02"


def test_token_never_decreases(conn):
    e = enqueue(conn, "search")
    claim(conn, "w1")
    assert sqlstate_of(conn, "update tool_jobs set fencing_token = 0 where id=%s", (e["id"],)) == "LCS02"


def test_terminal_rows_are_frozen(conn):
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    complete(conn, c, "w1")
    for stmt in ("update tool_jobs set state='queued' where id=%s",
                 "update tool_jobs set result='{\"forged\":1}' where id=%s",
                 "update tool_jobs set fencing_token = fencing_token + 1 where id=%s"):
        assert sqlstate_of(conn, stmt, (e["id"],)) == "LCS03", stmt


def test_stealing_a_live_lease_is_refused(conn):
    e = enqueue(conn, "search")
    claim(conn, "w1")
    assert sqlstate_of(conn, "update tool_jobs set owner_id='thief', fencing_token=fencing_token+1 "
                             "where id=%s", (e["id"],)) == "LCS06"


def test_owner_change_without_claim_is_refused(conn):
    e = enqueue(conn, "pay")
    c = claim(conn, "w1")
    start_side_effect(conn, c, "w1")
    conn.execute("update tool_jobs set state='outcome_unknown' where id=%s", (e["id"],))
    assert sqlstate_of(conn, "update tool_jobs set owner_id='someone' where id=%s", (e["id"],)) == "LCS01"


def test_unverifiable_reclaim_is_refused_even_by_raw_sql(conn):
    e = enqueue(conn, "pay")
    c = claim(conn, "w1")
    start_side_effect(conn, c, "w1")
    expire_lease(conn, e["id"])
    assert sqlstate_of(conn, "update tool_jobs set owner_id='w2', fencing_token=fencing_token+1 "
                             "where id=%s", (e["id"],)) == "LCS07"


def test_approval_needs_a_human_other_than_the_executor(conn):
    e = enqueue(conn, "pay", agent_id="agent-7")
    c = claim(conn, "w1")
    start_side_effect(conn, c, "w1")
    conn.execute("update tool_jobs set state='outcome_unknown' where id=%s", (e["id"],))
    assert sqlstate_of(conn, "update tool_jobs set state='queued' where id=%s", (e["id"],)) == "LCS04"
    for executor in ("w1", "agent-7"):
        assert sqlstate_of(conn, "update tool_jobs set state='queued', retry_approved_by=%s, "
                                 "retry_approved_at=now() where id=%s", (executor, e["id"])) == "LCS04"
    conn.execute("update tool_jobs set state='queued', retry_approved_by='bob', retry_approved_at=now() "
                 "where id=%s", (e["id"],))


def test_immutable_columns(conn):
    e = enqueue(conn, "search")
    claim(conn, "w1")
    assert sqlstate_of(conn, "update tool_jobs set idempotency_key='other' where id=%s", (e["id"],)) == "LCS05"
    assert sqlstate_of(conn, "update tool_jobs set tool='pay' where id=%s", (e["id"],)) == "LCS05"


def test_new_calls_start_queued_with_no_owner(conn):
    assert sqlstate_of(conn, "insert into tool_jobs (idempotency_key, payload, tool, state) "
                             "values ('x', '{}', 'search', 'running')") == "LCS01"
    assert sqlstate_of(conn, "insert into tool_jobs (idempotency_key, payload, tool, owner_id) "
                             "values ('y', '{}', 'search', 'w1')") == "LCS01"


def test_history_is_append_only_even_for_the_owner(conn):
    e = enqueue(conn, "search")
    assert sqlstate_of(conn, "update job_events set actor='x' where job_id=%s", (e["id"],)) == "LCH01"
    assert sqlstate_of(conn, "delete from job_events where job_id=%s", (e["id"],)) == "LCH01"
    assert sqlstate_of(conn, "truncate job_events") == "LCH01"


def test_lease_sizing_rule_is_enforced(conn):
    # L > R x H + J: 90 > 1 x 30 + 20 holds; 35 > 1 x 30 + 20 does not
    register_tool(conn, "ok", lease_seconds=90, heartbeat_seconds=30, missed_heartbeats=1, jitter_seconds=20)
    assert sqlstate_of(conn, "insert into tools (name, side_effect, lease_seconds, heartbeat_seconds, "
                             "missed_heartbeats, jitter_seconds) values ('bad', 'read_only', 35, 30, 1, 20)"
                       ) == "23514"


def test_heartbeat_updates_stay_hot(conn):
    """Nothing indexed changes on a heartbeat, so PostgreSQL can update in place (HOT)."""
    e = enqueue(conn, "search")
    c = claim(conn, "w1")
    before = conn.execute("select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables "
                          "where relname='tool_jobs'").fetchone()
    from tests.helpers import heartbeat

    for _ in range(50):
        assert heartbeat(conn, c, "w1")
    conn.execute("select pg_stat_force_next_flush()") if conn.info.server_version >= 150000 else None
    after = conn.execute("select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables "
                         "where relname='tool_jobs'").fetchone()
    updates = after["n_tup_upd"] - before["n_tup_upd"]
    hot = after["n_tup_hot_upd"] - before["n_tup_hot_upd"]
    assert updates >= 50 and hot / updates >= 0.9, (updates, hot, e)
