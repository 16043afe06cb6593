"""The write path's rules as they stand after migrations/0029_fewer_parses.sql: the same rows refused,
under the same names, by less that each statement parses again.

PostgreSQL reads a table's CHECK constraints and a trigger's WHEN clause back from their stored node
strings and plans them once per statement, at the first row it writes (a claim, a completion and each
of the journal's rows are statements of one row). Before 0029 that was a quarter of the server's
instructions per call of the reference worker (README, "What each statement parses again"); the
shape test below keeps it from creeping back, the others that the rules it moved still hold."""

from __future__ import annotations

from console.db.connect import Conn
from tests.helpers import SLOW, as_login, claim, enqueue, refusal

W = "lc_parses_w1"
LOGINS = {W: "leasectl_worker"}
TOOLS = {"search": ("read_only", SLOW)}

# the stored form of 0029's check, one function call of six columns: 901 bytes on PostgreSQL 15 (five
# columns: 1,127 on 18, whose Vars spell out more); 0016's inline lease condition: 2,961 on 15, 3,303 on 18
LARGEST_CHECK = 1_500


def test_what_a_one_row_write_parses_again_stays_small(conn: Conn):
    checks = conn.execute(
        "select c.conrelid::regclass::text as rel, c.conname, length(c.conbin) as size "
        "from pg_constraint c join pg_class r on r.oid = c.conrelid "
        "where c.contype = 'c' and (r.relname = 'tool_jobs' or r.relname like 'job_events%%') "
        "  and r.relname <> 'job_events_archive'").fetchall()
    assert len([c for c in checks if c["rel"] == "tool_jobs"]) == 1, checks
    assert [c for c in checks if c["rel"].startswith("job_events")] == [], \
        "a check on the journal is parsed again for each of its rows, two per call"
    assert all(c["size"] <= LARGEST_CHECK for c in checks), checks
    # the journal's guard runs for every row: a WHEN clause in front of it was parsed again per row
    guards = conn.execute("select t.tgrelid::regclass::text as rel, t.tgqual is not null as has_when "
                          "from pg_trigger t where t.tgname = 'job_events_kind_guard'").fetchall()
    assert guards and not any(g["has_when"] for g in guards), guards


def journal_as_owner(conn: Conn, job_id, *, kind: str = "heartbeat_lost", actor: str = "owner",
                     reason: str | None = None) -> tuple[str | None, str | None]:
    return refusal(conn, "insert into job_events (job_id, kind, actor, reason) values (%s, %s, %s, %s)",
                   (job_id, kind, actor, reason))


def test_the_journal_bounds_hold_for_every_row_the_owner_s_too(conn: Conn):
    job = enqueue(conn, "search")
    assert journal_as_owner(conn, job["id"], reason="r" * 1001) == ("23514", "job_events_reason_bounded")
    assert journal_as_owner(conn, job["id"], actor="a" * 201) == ("23514", "job_events_actor_bounded")
    assert journal_as_owner(conn, job["id"], kind="Not A Kind") == ("23514", "job_events_kind_check")
    # at the bounds: written
    assert journal_as_owner(conn, job["id"], reason="r" * 1000, actor="a" * 200) == (None, None)
    rows = conn.execute("select count(*) as n from job_events where job_id = %s and kind = 'heartbeat_lost'",
                        (job["id"],)).fetchone()
    assert rows["n"] == 1


def test_a_worker_s_report_is_bounded_before_it_is_judged(db, conn: Conn, logins):
    with as_login(db, W) as w:
        enqueue(w, "search")
        held = claim(w, W, ["search"])
        assert held is not None
        assert refusal(w, "insert into job_events (job_id, kind, actor, fencing_token) "
                          "values (%s, 'ownership_unknown', %s, %s)",
                       (held["id"], "x" * 201, held["fencing_token"])) == ("23514", "job_events_actor_bounded")


def test_the_row_bounds_of_a_call_keep_their_names(conn: Conn):
    job = enqueue(conn, "search")
    assert refusal(conn, "update tool_jobs set extra_attempts = -1 where id = %s",
                   (job["id"],)) == ("23514", "tool_jobs_extra_attempts_check")
    held = claim(conn, "w-parses", ["search"])
    assert held is not None
    # a lease past a day, or a heartbeat after its lease: the lease's bound, as before
    assert refusal(conn, "update tool_jobs set lease_until = now() + interval '2 days' where id = %s",
                   (held["id"],)) == ("23514", "tool_jobs_lease_bounded")
    assert refusal(conn, "update tool_jobs set heartbeat_at = lease_until + interval '1 second' where id = %s",
                   (held["id"],)) == ("23514", "tool_jobs_lease_bounded")
    assert refusal(conn, "update tool_jobs set lease_until = 'infinity' where id = %s",
                   (held["id"],)) == ("23514", "tool_jobs_lease_bounded")
    # a renewal within the bounds passes
    assert refusal(conn, "update tool_jobs set lease_until = now() + interval '30 seconds', heartbeat_at = now() "
                         "where id = %s", (held["id"],)) == (None, None)
