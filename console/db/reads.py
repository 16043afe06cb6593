"""What the console and the CLI read. Every function takes a connection and returns typed rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from console.core.filters import JobFilter, id_range
from console.core.history import HistoryStart, call_archived
from console.core.models import (
    ApprovalQueue,
    ApprovalRow,
    CallDetail,
    Counts,
    DbInfo,
    Event,
    FleetAgent,
    FleetSnapshot,
    GrantRow,
    HeldGrant,
    Job,
    JobSummary,
    LineageRow,
    Orphan,
    PayloadPreview,
    RecentEvent,
    ReconciliationRecord,
    Shutdown,
    ToolSettings,
    TriageSnapshot,
)
from console.core.ownership import ownership, stretches
from console.db.connect import Conn, rows_as, run, run_one
from console.shared.errors import BadInput, PayloadSearchTimedOut, PermissionDenied, StatementTimedOut
from console.shared.text import sanitize


def db_info(conn: Conn) -> DbInfo:
    row = run_one(conn, "views/db_info")
    assert row is not None
    return DbInfo.model_validate(row)


def triage(conn: Conn, limit: int = 200, recent_minutes: int = 10) -> TriageSnapshot:
    """Counts and the calls needing attention, worst first (one pass over the live calls), and
    what happened recently that no lease shows any more."""
    with conn.transaction():
        run(conn, "meta/snapshot")
        rows = run(conn, "views/triage", limit=limit)
        recent = run(conn, "views/recent_events", minutes=recent_minutes, limit=12)
        paused = run(conn, "views/tools", name=None, paused_only=True)
        orphaned = run(conn, "views/orphans")
    counts = Counts.model_validate(rows[0])
    return TriageSnapshot(counts=counts, rows=[JobSummary.model_validate(r) for r in rows if r["id"] is not None],
                          recent=[RecentEvent.model_validate(r) for r in recent],
                          paused_tools=rows_as(ToolSettings, paused), orphans=rows_as(Orphan, orphaned))


def jobs(conn: Conn, where: JobFilter | None = None, *, before: tuple[datetime, uuid.UUID] | None = None,
         limit: int = 200, ids: list[uuid.UUID] | None = None) -> list[JobSummary]:
    """One page, newest first; pass the last row's (created_at, id) as `before` for the next. A
    `payload:` filter is searched as `payload_search` says (the Calls screen, `leasectl jobs`, and
    a bulk action's snapshot, which reads its calls here)."""
    chosen = where or JobFilter()
    with payload_search(conn, chosen):
        rows = run(conn, "views/jobs", **chosen.sql_values(), ids=ids,
                   before_created=before[0] if before else None, before_id=before[1] if before else None,
                   limit=limit)
    return rows_as(JobSummary, rows)


def payload_access(conn: Conn, where: JobFilter | None) -> int | None:
    """Before a read of calls by a filter with `payload:`: whether this session's role may read
    payloads at all (queries/meta/payload_access.sql: the column privilege, SELECT on
    tool_jobs.payload, granted on the table or the column), else PermissionDenied -- not allowed,
    exit 1 -- before anything is searched. Returns the statement timeout the search runs under
    (ms, 0: none); None, and nothing asked, without `payload:`."""
    if where is None or where.payload is None:
        return None
    access = run_one(conn, "meta/payload_access")
    assert access is not None  # `Zero rows: never`
    if not access["allowed"]:
        raise PermissionDenied(
            f"not allowed: payload: searches the calls' payloads, and role {sanitize(access['role'], max_chars=63)} "
            "may not read them (it lacks the SELECT privilege on tool_jobs.payload: has_column_privilege(current_user, "
            "'public.tool_jobs', 'payload', 'SELECT') is false). Nothing was searched",
            hint="filter without payload:, or use a login granted SELECT on tool_jobs (or on its payload column)")
    timeout_ms: int = access["statement_timeout_ms"]
    return timeout_ms


@contextmanager
def payload_search(conn: Conn, where: JobFilter | None) -> Iterator[None]:
    """Around a read of calls by a filter (views/jobs.sql, audit/jobs_at.sql): with `payload:`,
    `payload_access` first; then a statement timeout in the block is PayloadSearchTimedOut, which
    says the search did not finish (never "no calls") and how to narrow it. Without `payload:`,
    nothing is asked and nothing is changed."""
    timeout_ms = payload_access(conn, where)
    if timeout_ms is None:
        yield
        return
    try:
        yield
    except PayloadSearchTimedOut:
        raise
    except StatementTimedOut as exc:
        raise PayloadSearchTimedOut(payload_timeout_words(timeout_ms), hint=PAYLOAD_NARROWER) from exc


PAYLOAD_NARROWER = ("e.g. tool:pay state:failed payload:$.invoice=INV-7: the newest calls the rest of the filter "
                    "selects are searched first, and the search stops at a page of matches")


def payload_timeout_words(timeout_ms: int) -> str:
    """What a `payload:` search that ran out of time says (the CLI's error, the Calls screen's list)."""
    if timeout_ms <= 0:  # no statement timeout: cancelled (Ctrl-C, pg_cancel_backend)
        return "the payload search was cancelled before it finished: its answer is unknown, not \"no calls\""
    return (f"the payload search did not finish within the statement timeout of {timeout_ms / 1000:g} s: its answer "
            "is unknown, not \"no calls\". Narrow the filter with tool:, state:, agent:, session:, key: or id: "
            "(the payload is searched only in the calls the rest of the filter selects)")


def job(conn: Conn, job_id: uuid.UUID) -> Job | None:
    """One call without its payload and result (see job_document)."""
    row = run_one(conn, "views/job", job_id=job_id)
    return Job.model_validate(row) if row else None


def job_document(conn: Conn, job_id: uuid.UUID) -> Job | None:
    """One call with its payload and result, whole, and its stretches of ownership replayed from its
    history (`leasectl show --json`), in one snapshot."""
    with conn.transaction():
        run(conn, "meta/snapshot")
        row = run_one(conn, "views/job", job_id=job_id)
        document = run_one(conn, "views/job_document", job_id=job_id)
        events = history(conn, job_id) if row else []
        archived = archived_part(conn, row["created_at"], events) if row else None
    if not row or not document:
        return None
    # a history archived in part is never replayed from what is left: no ownership, and why
    held = None if archived else stretches(ownership(job_id, events))
    return Job.model_validate({**row, **document, "ownership": held, "history_archived_before": archived})


def history_and_start(conn: Conn, job_id: uuid.UUID) -> tuple[list[Event], datetime | None]:
    """`leasectl history` and the call's detail: its online events, and where the online history
    begins when part of the call's history is archived before it (else None), in one snapshot."""
    with conn.transaction():
        run(conn, "meta/snapshot")
        events = history(conn, job_id)
        row = run_one(conn, "views/job", job_id=job_id)
        return events, archived_part(conn, row["created_at"] if row else None, events)


def archived_part(conn: Conn, created_at: datetime | None, events: list[Event]) -> datetime | None:
    """Where the online history begins, when part of this call's history is archived before it
    (console.core.history.call_archived); None when its history is whole online."""
    start = HistoryStart.model_validate(run_one(conn, "audit/history_start") or {})
    if call_archived(start, created_at, events[0].kind if events else None):
        return start.archived_before
    return None


PREVIEW_CHARS = 64_000


def payload_preview(conn: Conn, job_id: uuid.UUID, max_chars: int = PREVIEW_CHARS) -> PayloadPreview | None:
    row = run_one(conn, "views/job_payload_preview", job_id=job_id, max_chars=max_chars)
    return PayloadPreview.model_validate({**row, "max_chars": max_chars}) if row else None


def resolve(conn: Conn, ref: str) -> uuid.UUID:
    """A full id or a unique prefix; unknown and ambiguous are bad input (exit 2)."""
    low, high = id_range(ref)
    rows = run(conn, "views/job_by_prefix", id_low=low, id_high=high)
    if not rows:
        raise BadInput(f"no call with id {sanitize(ref, max_chars=48)}", hint="`leasectl jobs` lists calls")
    if len(rows) > 1:
        listed = ", ".join(f"{str(r['id'])[:13]}… ({r['state']})" for r in rows[:4])
        raise BadInput(f"'{sanitize(ref, max_chars=48)}' is ambiguous: {listed}", hint="give more characters of the id")
    found: uuid.UUID = rows[0]["id"]
    return found


def call_detail(conn: Conn, job_id: uuid.UUID) -> CallDetail:
    """A call, its history and its lineage, in one snapshot (they agree with each other)."""
    with conn.transaction():
        run(conn, "meta/snapshot")
        found = job(conn, job_id)
        if found is None:
            return CallDetail(job=None, events=[], lineage=[])
        events = history(conn, job_id)
        return CallDetail(job=found, events=events, lineage=lineage(conn, job_id),
                          history_archived_before=archived_part(conn, found.created_at, events))


def history(conn: Conn, job_id: uuid.UUID) -> list[Event]:
    return [Event.model_validate(r) for r in run(conn, "views/job_history", job_id=job_id)]


def lineage(conn: Conn, job_id: uuid.UUID) -> list[LineageRow]:
    return [LineageRow.model_validate(r) for r in run(conn, "views/lineage", job_id=job_id)]


def approvals(conn: Conn) -> list[ApprovalRow]:
    return [ApprovalRow.model_validate(r) for r in run(conn, "views/approvals")]


def approval_queue(conn: Conn) -> ApprovalQueue:
    """The waiting calls and their summaries in one snapshot (two statements, not one per call),
    so the guard shown beside a call is the state it was read in."""
    with conn.transaction():
        run(conn, "meta/snapshot")
        rows = approvals(conn)
        calls = jobs(conn, JobFilter(state="outcome_unknown"), limit=max(len(rows), 1)) if rows else []
        now = rows[0].db_now if rows else db_info(conn).db_now
    waiting = {str(r.id) for r in rows}
    return ApprovalQueue(rows=rows, calls={str(c.id): c for c in calls if str(c.id) in waiting}, db_now=now)


# ----------------------------------------------------------------------------- fleet


def fleet(conn: Conn, *, shutdown_limit: int = 20, grant_limit: int = 2000) -> FleetSnapshot:
    """The agent tree and the shutdowns (under way first), read in one snapshot."""
    with conn.transaction():
        run(conn, "meta/snapshot")
        agents = [FleetAgent.model_validate(r) for r in run(conn, "views/fleet")]
        under_way = [Shutdown.model_validate(r) for r in run(conn, "views/shutdowns", id_low=None, id_high=None,
                                                               limit=shutdown_limit)]
        grants = [HeldGrant.model_validate(r) for r in run(conn, "views/grants", limit=grant_limit)]
    return FleetSnapshot(agents=agents, shutdowns=under_way, grants=grants)


def tools(conn: Conn) -> list[ToolSettings]:
    """Every registered tool, paused ones first (migration 0016's settings, what runs and waits)."""
    return [ToolSettings.model_validate(r) for r in run(conn, "views/tools", name=None, paused_only=False)]


def tool_settings(conn: Conn, name: str) -> ToolSettings | None:
    row = run_one(conn, "views/tools", name=name, paused_only=False)
    return ToolSettings.model_validate(row) if row else None


def grant(conn: Conn, prefix: str) -> GrantRow:
    """The grant whose id is, or starts with, `prefix`; BadInput when none or several match."""
    low, high = id_range(prefix, "grant")
    rows = rows_as(GrantRow, run(conn, "views/grant", id_low=low, id_high=high))
    if not rows:
        raise BadInput(f"no grant {sanitize(prefix, max_chars=40)}", hint="`leasectl fleet` lists the grants held")
    if len(rows) > 1:
        raise BadInput(f"'{sanitize(prefix, max_chars=40)}' is the start of several grants' ids: give more of it")
    return rows[0]


def shutdown(conn: Conn, shutdown_id: uuid.UUID) -> Shutdown | None:
    row = run_one(conn, "views/shutdowns", id_low=shutdown_id, id_high=shutdown_id, limit=1)
    return Shutdown.model_validate(row) if row else None


def shutdown_by_prefix(conn: Conn, prefix: str) -> Shutdown:
    """The shutdown (or proposal) whose id is, or starts with, `prefix`; BadInput when none or several match."""
    low, high = id_range(prefix, "shutdown")
    rows = rows_as(Shutdown, run(conn, "views/shutdowns", id_low=low, id_high=high, limit=2))
    if not rows:
        raise BadInput(f"no shutdown {sanitize(prefix, max_chars=40)}", hint="`leasectl shutdowns` lists them")
    if len(rows) > 1:
        raise BadInput(f"'{sanitize(prefix, max_chars=40)}' is the start of several shutdowns' ids: give more of it")
    return rows[0]


def orphans(conn: Conn) -> list[Orphan]:
    """The orphaned agents (migration 0018's rule), oldest first."""
    return rows_as(Orphan, run(conn, "views/orphans"))


def reconciliations(conn: Conn, limit: int = 100) -> list[ReconciliationRecord]:
    """Newest first."""
    return [ReconciliationRecord.model_validate(r)
            for r in run(conn, "views/reconciliations", record_id=None, limit=limit)]


def reconciliation(conn: Conn, record_id: uuid.UUID) -> ReconciliationRecord | None:
    row = run_one(conn, "views/reconciliations", record_id=record_id, limit=1)
    return ReconciliationRecord.model_validate(row) if row else None
