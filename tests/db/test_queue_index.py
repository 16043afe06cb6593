"""Migration 0028: a claim steps over the calls claimed before it once, not at every claim.

Calls enqueued in one transaction share their created_at (and their priority): with B-tree
deduplication the queue's index packs them into posting lists, and an entry left dead by a claim
is marked for later scans only once every call of its list is claimed. Until a vacuum, every claim
then visited again, in the heap, each call claimed from the same list before it. These tests count the
index entries one claim reads after half of such a queue was claimed.
"""

from __future__ import annotations

from console.db import sql
from console.db.connect import Conn
from tests import helpers as h

TOOLS = {"search": ("read_only", h.SLOW_30)}
QUEUED = 400
CLAIMED = 200


def entries_read(conn: Conn) -> int:
    """Entries of the queue's index one claim (worker/claim.sql) read, run for real and rolled
    back: the transaction's own count, before the statistics collector sees it."""
    query = sql.load("worker/claim")
    with conn.transaction(force_rollback=True):
        conn.execute(query.text, query.bind({"worker_id": "w", "tools": None}))
        row = conn.execute("select pg_stat_get_xact_tuples_returned('tool_jobs_queued_idx'::regclass) as n").fetchone()
        assert row is not None
        return int(row["n"])


def test_the_indexes_of_passing_states_keep_one_entry_per_call(conn):
    options = {r["relname"]: r["reloptions"] for r in conn.execute(
        "select c.relname, c.reloptions from pg_index i join pg_class c on c.oid = i.indexrelid "
        "where i.indrelid = 'tool_jobs'::regclass").fetchall()}
    for index in ("tool_jobs_queued_idx", "tool_jobs_live_idx", "tool_jobs_agent_live_idx",
                  "tool_jobs_agent_running_idx"):
        assert "deduplicate_items=off" in (options[index] or []), index


def test_a_claim_does_not_read_again_the_calls_claimed_before_it(conn):
    with conn.transaction():
        for n in range(QUEUED):
            h.enqueue(conn, "search", f"batch:{n}")
    assert conn.execute("select count(distinct (priority, created_at)) as n from tool_jobs").fetchone()["n"] == 1
    # the statistics of a queue this long (autovacuum's analyze): the claim walks the index
    conn.execute("analyze tool_jobs")
    assert entries_read(conn) <= 2, "the head of a fresh queue"
    for _ in range(CLAIMED):
        got = h.claim(conn, "w")
        assert got is not None
        assert h.complete(conn, got, "w") is not None
    # with deduplication (before migration 0028) this claim read 13,161 entries on PostgreSQL 18 and
    # 12,920 on 15: the posting lists' dead entries again, many times over
    later = entries_read(conn)
    assert later <= 3 * CLAIMED, later
