"""A walk past the one guard (migrations/0015_trust_third_walk.sql), by a fresh reviewer after the
guards became one: what it got through, now refused.

The journal's 64 KiB bound on details was measured with pg_column_size(), the size a value is
*stored* at: a value read from a table (another call's payload) arrives compressed, so details of
megabytes measured a few dozen KiB, and leasectl_journal_check journaled them rebuilt at full size,
as the owner. The bounds measure the text now. And a cancel request's who and why could be
rewritten by the control plane's login (only its time was judged)."""

from __future__ import annotations

from console.db.connect import Conn
from tests.helpers import SLOW, as_login, claim, enqueue, refusal

W, SUPERVISOR, OPERATOR = "lc_gwalk_w1", "lc_gwalk_sup", "lc_gwalk_op"
LOGINS = {W: "leasectl_worker", SUPERVISOR: "leasectl_supervisor", OPERATOR: "leasectl_operator"}
TOOLS = {"search": ("read_only", SLOW), "erp": ("mutating_verifiable", SLOW)}

FIVE_MB = 5_000_000  # compresses (pglz) to ~57 KB: under the guard's 64 KiB as pg_column_size counts it



def largest_journal_details(conn: Conn, job_id, kind: str) -> int:
    row = conn.execute("select coalesce(max(octet_length(details::text)), 0) as n from job_events "
                       "where job_id = %s and kind = %s", (job_id, kind)).fetchone()
    return row["n"]


def test_a_check_of_megabytes_read_compressed_from_a_payload_is_refused(db, conn, logins):
    """A worker's own call carries a 5 MB payload (any worker may read any payload); the worker's
    check of its erp call names that payload as what the service said."""
    with as_login(db, W) as w:
        big = enqueue(w, "search", payload={"said": "x" * FIVE_MB})
        enqueue(w, "erp")
        held = claim(w, W, ["erp"])
        assert held is not None
        refused = refusal(w, "update tool_jobs set check_found = 'not_done', check_token = fencing_token, "
                              "check_details = (select b.payload from tool_jobs b where b.id = %s) "
                              "where id = %s", (big["id"], held["id"]))
    journaled = largest_journal_details(conn, held["id"], "side_effect_checked")
    assert refused == ("23514", "job_events_details_bounded"), \
        f"accepted: a side_effect_checked journal row of {journaled:,} bytes"
    assert journaled <= 65536


def test_a_worker_report_of_megabytes_read_compressed_is_refused(db, conn, logins):
    """The same size test on a worker's own report (the journal's guard): test_shadows' "a report
    of 10 MB in the journal" builds its details fresh; read from a table they pass."""
    with as_login(db, W) as w:
        enqueue(w, "search")
        held = claim(w, W, ["search"])
        assert held is not None
        big = enqueue(w, "search", payload={"said": "y" * FIVE_MB})
        refused = refusal(w, "insert into job_events (job_id, kind, actor, fencing_token, details) "
                              "select %s, 'ownership_unknown', session_user, %s, b.payload "
                              "from tool_jobs b where b.id = %s",
                           (held["id"], held["fencing_token"], big["id"]))
    journaled = largest_journal_details(conn, held["id"], "ownership_unknown")
    assert refused == ("23514", "job_events_details_bounded"), \
        f"accepted: an ownership_unknown journal row of {journaled:,} bytes"
    assert journaled <= 65536


def test_who_asked_for_a_cancel_and_why_are_never_rewritten(db, conn, logins):
    """The guard: "a cancel request stands: who asked, when and why are never rewritten or
    erased". Only the time is judged, and the trigger does not list cancel_requested_by or
    cancel_requested_reason (the supervisor may write both)."""
    enqueue(conn, "search")
    with as_login(db, W) as w:
        held = claim(w, W, ["search"])
    assert held is not None
    with as_login(db, OPERATOR) as op:
        assert op.execute("select * from leasectl_request_cancel(%s, 'running', %s, 'alice', 'stop it')",
                          (held["id"], held["fencing_token"])).fetchone() is not None
    with as_login(db, SUPERVISOR) as s:
        refused = refusal(s, "update tool_jobs set cancel_requested_by = 'bob', "
                              "cancel_requested_reason = 'nobody asked' where id = %s", (held["id"],))
    row = conn.execute("select cancel_requested_by, cancel_requested_reason from tool_jobs where id = %s",
                       (held["id"],)).fetchone()
    assert refused[0] == "LCS13", f"accepted: the request now reads {row}"
    assert (row["cancel_requested_by"], row["cancel_requested_reason"]) == ("alice", "stop it")


def test_a_model_name_or_a_cancel_of_a_megabyte_is_refused(db, conn, logins):
    """Never bounded until the ninth walk: a model (a metric label) and who asked for a cancel."""
    with as_login(db, W) as w:
        assert refusal(w, "insert into tool_jobs (idempotency_key, payload, tool, model) "
                          "values ('m-1', '{}', 'search', repeat('m', 201))") == ("23514", "tool_jobs_names_bounded")
        enqueue(w, "search")
        held = claim(w, W, ["search"])
    assert held is not None
    with as_login(db, SUPERVISOR) as s:
        assert refusal(s, "update tool_jobs set cancel_requested_by = repeat('b', 1000000) where id = %s",
                       (held["id"],)) == ("23514", "tool_jobs_names_bounded")
        assert refusal(s, "update tool_jobs set state = 'cancel_requested', cancel_requested_at = now(), "
                          "cancel_requested_by = 'control-plane', cancel_requested_reason = repeat('r', 1001) "
                          "where id = %s", (held["id"],)) == ("23514", "tool_jobs_reason_bounded")
    row = conn.execute("select state, cancel_requested_by from tool_jobs where id = %s", (held["id"],)).fetchone()
    assert (row["state"], row["cancel_requested_by"]) == ("running", None)
