"""Migration 0028: a claim steps over the calls claimed before it once, not at every claim.

Calls enqueued in one transaction share their created_at (and their priority): with B-tree
deduplication the queue's index packs them into posting lists, and an entry left dead by a claim
is marked for later scans only once every call of its list is claimed. Until a vacuum, every claim
then visited again, in the heap, each call claimed from the same list before it. These tests count the
index entries one claim reads after half of such a queue was claimed: 2 without posting lists,
201 with them (PostgreSQL 18 and 15).
"""

from __future__ import annotations

import time

from console.db import sql
from console.db.connect import Conn
from tests import helpers as h

TOOLS = {"search": ("read_only", h.SLOW_30)}
QUEUED = 400
CLAIMED = 200


def entries_read(conn: Conn) -> int:
    """Entries of the queue's index one claim (worker/claim.sql) read, run for real and rolled
    back: the transaction's own count, before the statistics collector sees it. The session's
    counts are sent first: since PostgreSQL 15 a session keeps its counts of ended transactions
    until it sends them (at most once a second), and a transaction's count includes them until
    then. Uncounted, the claims just before it made this claim read 3,253-3,973 entries (two test
    workers, PostgreSQL 15) where it read 201."""
    query = sql.load("worker/claim")
    conn.execute("select pg_stat_force_next_flush()")  # sent as this statement's transaction ends
    with conn.transaction(force_rollback=True):
        conn.execute(query.text, query.bind({"worker_id": "w", "tools": None}))
        row = conn.execute("select pg_stat_get_xact_tuples_returned('tool_jobs_queued_idx'::regclass) as n").fetchone()
        assert row is not None
        return int(row["n"])


def settled(conn: Conn, timeout: float = 120.0) -> None:
    """Wait until every transaction of the server that began before now has ended, then let one
    claim mark the entries of the calls claimed so far dead. A scan marks an entry dead only once
    no snapshot can still see its call queued, and a snapshot's horizon is the oldest transaction
    running anywhere on the server: another test's transaction, in another database, can keep the
    claimed calls visible while they are claimed. An entry of a posting list (before 0028) is
    marked only when every call in its list is dead: this claim leaves those as they are."""
    mark = conn.execute("select pg_current_xact_id()::text as xid").fetchone()["xid"]
    deadline = time.monotonic() + timeout
    while not conn.execute("select pg_snapshot_xmin(pg_current_snapshot()) > %s::xid8 as done",
                           (mark,)).fetchone()["done"]:
        assert time.monotonic() < deadline, f"a transaction older than {mark} still runs after {timeout:.0f} s"
        time.sleep(0.05)
    entries_read(conn)


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
    settled(conn)
    # with deduplication (before migration 0028) this claim read 201 entries on PostgreSQL 18 and on
    # 15: every call claimed before it from the same posting list, again; without it, 2
    later = entries_read(conn)
    assert later <= 10, later
