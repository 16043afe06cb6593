"""The auditor's rows and rules beside the ownership replay (console/core/ownership.py): the operator
journal's rows, what `leasectl audit verify` reports, who may have written each event, the Audit
screen's filter grammar.

Who wrote each event (`db_role`, the session's login, stamped by the database since migration 0005)
is held against its kind, so that a forgery that slips past some future hole in the triggers is
still caught. Each login is judged by what it is *now*: a *worker login* has the privileges of
leasectl_worker and not those of leasectl_operator nor leasectl_supervisor, is no superuser and
does not own job_events. A worker login may not have written

  * an operator kind (`operator_*`): only the operator statements journal those;
  * a `claimed` or `reclaimed` to an owner id that is not its own: `<login>` or `<login>:<name>`;
  * a report (any kind the database does not write itself: not enqueued, claimed, reclaimed,
    state_changed, fenced, side_effect_started, nor the trigger's tool_request_started, which
    carries the state columns) in a name that is not its own;
  * a `state_changed` out of `outcome_unknown`: only a human leaves it;
  * a `fenced`: only an operator's forced mark-terminal or the control plane fences.

An event with no db_role was written before 0005: it cannot be checked, and verify says how many.
A db_role that is no longer a role is an *unknown login*: counted and named, not a violation (a
login dropped since is no forgery), but its events are no longer checkable either.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import Field

from console.core.filters import Filter, key_list, keyed_term
from console.core.history import ArchiveViolation, HistoryStart
from console.core.models import Event, JobSummary, Row
from console.core.ownership import (
    CHANGE_KINDS,
    GRANT_KINDS,
    REQUEST_KINDS,
    OwnerAt,
    Violation,
)
from console.shared.config import SessionLimits
from console.shared.errors import BadInput
from console.shared.text import sanitize
from console.shared.times import TIME_FORMS, Instant, check_range, parse_past, parse_time

# the kinds only the database writes (the tool_jobs triggers); the trigger's tool_request_started
# is told from a worker's report of the same name by its state columns (a report has none: LCH03)
DATABASE_KINDS = ("enqueued", *CHANGE_KINDS, "side_effect_started")

JournalOutcome = Literal["applied", "refused", "failed"]  # an operator journal row's outcome
ACTIONS: tuple[str, ...] = ("cancel", "mark_terminal", "approve_retry", "drain", "abort", "pause", "resume", "revoke",
                             "accept", "decline", "retention", "bulk", "bulk_stop")
OUTCOMES: tuple[str, ...] = ("applied", "refused", "failed")
EXPORT_FORMATS: tuple[str, ...] = ("jsonl", "csv")
# the columns of `audit export`, in order (the contract); every export appends EXPORT_ADDED after them
EXPORT_COLUMNS: tuple[str, ...] = ("id", "job_id", "at", "kind", "actor", "fencing_token", "state_from", "state_to",
                                   "owner_from", "owner_to", "lease_until", "details")
# what the contract's columns left out: an operator's reason and request, and the login that wrote the row
EXPORT_ADDED: tuple[str, ...] = ("reason", "request_id", "db_role")
EXPORT_KEYS: tuple[str, ...] = (*EXPORT_COLUMNS, *EXPORT_ADDED)
# `audit export --fleet`: fleet_events rows (drains, aborts, refusals, state changes, grants)
FLEET_EXPORT_KEYS: tuple[str, ...] = ("id", "at", "kind", "actor", "agent_id", "shutdown_id", "grant_id", "reason",
                                      "request_id", "db_role", "details")

# The auditor's own session limits: those 0002 gives the leasectl_auditor role (it "reads more but
# never holds a transaction open" long). An export or a verify streams through a server-side cursor:
# each FETCH is one short statement, so a long export never meets the statement timeout.
# work_mem: rebuilding every call at an instant aggregates the whole history by call and sorts the
# calls (audit/jobs_at.sql); at the server's default of 4 MB both spill to disk at 100,000 calls
# (1.3x the time, tests/bench/audit.py). One auditor's session, not every connection, gets more.
AUDIT_LIMITS = SessionLimits(statement_timeout_ms=30_000, lock_timeout_ms=1_000, idle_in_transaction_ms=60_000,
                             work_mem_mb=64)


# ----------------------------------------------------------------------------- rows


class OperatorAction(Row):
    """One entry of the operator journal: an action on a call, or a shutdown of a subtree."""

    at: datetime
    operator: str | None = None
    action: str
    outcome: str
    job_id: uuid.UUID | None = None
    agent_id: str | None = None
    reason: str | None = None
    request_id: uuid.UUID | None = None
    fencing_token: int | None = None
    details: dict[str, Any] = {}
    source: Literal["call", "fleet"] = "call"
    event_id: int = 0
    db_role: str | None = None  # the login that wrote the journal row; `operator` is the name it gave

    CONTRACT: tuple[str, ...] = ("at", "operator", "action", "outcome", "job_id", "agent_id", "reason", "request_id",
                                 "fencing_token", "details")
    # what `audit actions --json` and the journal's export write: the contract's keys, then db_role
    KEYS: ClassVar[tuple[str, ...]] = (*CONTRACT, "db_role")

    def contract(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", include=set(self.CONTRACT))
        return {key: data[key] for key in self.CONTRACT}

    def record(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", include=set(self.KEYS))
        return {key: data[key] for key in self.KEYS}


class LoginCount(Row):
    db_role: str
    events: int


class VerifyReport(Row):
    ok: bool
    since: datetime | None = None
    calls: int
    events: int
    violations: list[Violation]
    checked_at: datetime | None = None
    seconds: float = 0.0
    # each event's login held against its kind (wrong_login): how many came from worker logins and
    # were checked, how many carry no login (written before migration 0005: not checkable), and the
    # logins that are no longer roles (not checkable either; not a violation)
    worker_events: int = 0
    without_login: int = 0
    unknown_logins: list[LoginCount] = []
    # once history was archived (console/core/history.py): where the online history begins; the
    # calls whose history begins in the archive, not replayed for want of it (--archive DIR); with
    # --archive, the directory, the months checked against what the database registered, what was
    # wrong with them (exit 4), and how many archived events were replayed before the online ones
    archived_before: datetime | None = None
    calls_not_replayed: int = 0
    archive: str | None = None
    archive_months_checked: list[str] = []
    archive_violations: list[ArchiveViolation] = []
    archived_events: int = 0
    archive_months_online: list[str] = []  # the manifest lists them, the database still holds them: not used


class AuditPage(Row):
    """The Audit screen's data, read in one snapshot."""

    view: Literal["events", "journal"]
    job_id: uuid.UUID | None = None
    owner: OwnerAt | None = None
    events: list[Event] = []
    actions: list[OperatorAction] = []
    problem: str | None = None  # the filter names no call (unknown or ambiguous job:): said on screen
    db_now: datetime
    # where the online history begins (console/core/history.py), and what it meant for this page:
    # the filter's range reaches before it (refused: nothing is shown), the call's history with job:
    # and at: is archived in part (no answer of who held it), the rows are the online part only
    history: HistoryStart = Field(default_factory=HistoryStart)
    refused: str | None = None
    owner_archived: str | None = None
    online_part: bool = False


class JobAsOf(JobSummary):
    """A call as it was at `as_of`, rebuilt from its history (`leasectl jobs --at`). `db_now` is
    `as_of` too: every age (lease left, deadline left) is measured at that instant. The heartbeat
    is not journaled, so heartbeat_at and its age are unknown (null), and `heartbeat late` is never
    said of the past; identity columns (tool, key, agent, session, model, provider, created_at,
    deadline_at) never change (LCS05) and are read from tool_jobs."""

    as_of: datetime


# ----------------------------------------------------------------------------- who wrote it


def bound_to(name: str | None, login: str | None) -> bool:
    """Whether `name` is `login`'s own: the login itself or `<login>:<anything>`, the database's rule
    for a worker id (leasectl_worker_id_bound, migrations/0005)."""
    return name is not None and login is not None and (name == login or name.startswith(login + ":"))


def written_by_the_database(kind: str, state_from: str | None, state_to: str | None) -> bool:
    return kind in DATABASE_KINDS or (kind in REQUEST_KINDS and (state_from is not None or state_to is not None))


def login_violation(kind: str, actor: str | None, owner_to: str | None, state_from: str | None,
                    state_to: str | None, login: str) -> str | None:
    """Why a *worker login* could not have written this event honestly (the module's words), or None."""
    if kind.startswith("operator_"):
        return (f"worker login {sanitize(login)} wrote the operator event {sanitize(kind)}: only the operator "
                "statements journal an operator's action")
    if kind in GRANT_KINDS and not bound_to(owner_to, login):
        return (f"worker login {sanitize(login)} wrote {kind} to owner {sanitize(owner_to or 'none', max_chars=80)}: "
                f"a worker login is granted calls only as {sanitize(login)} or {sanitize(login)}:<name>")
    if kind == "state_changed" and state_from == "outcome_unknown":
        return (f"worker login {sanitize(login)} moved the call out of outcome_unknown (to "
                f"{sanitize(state_to or 'none')}): only a human's approve retry or mark terminal leaves it")
    if kind == "fenced":
        return (f"worker login {sanitize(login)} fenced the call: only an operator's forced mark terminal or "
                "the control plane fences an owner out")
    if not written_by_the_database(kind, state_from, state_to) and not bound_to(actor, login):
        return (f"worker login {sanitize(login)} reported {sanitize(kind, max_chars=60)} in the name of "
                f"{sanitize(actor or 'nobody', max_chars=80)}: a worker reports only as {sanitize(login)} or "
                f"{sanitize(login)}:<name>")
    return None


# ----------------------------------------------------------------------------- the Audit screen's filter

AUDIT_KEYS: dict[str, str] = {
    "job": "a call-id prefix (the call's events; with at: also who held it then)",
    "owner": "a worker: the events that gave it, took it from or were reported by it",
    "operator": "an operator's actions (the journal view: drains and aborts too)",
    "kind": "an event kind (claimed, reclaimed, state_changed, operator_cancel, heartbeat_lost, ...)",
    "since": "from this time on",
    "until": "up to this time",
    "at": "an instant: with job:, who held the call then; the events up to it",
}
_KIND = re.compile(r"^[a-z][a-z0-9_]*$")
_HEX = re.compile(r"^[0-9a-fA-F-]{1,36}$")


def audit_grammar() -> str:
    return (f"audit filter keys: {key_list(AUDIT_KEYS)}. A bare word is a call-id prefix. Times are {TIME_FORMS}. "
            "e.g. job:8f1b at:2026-12-03T02:13:00Z, or operator:alice since:3d")


class AuditFilter(Filter):
    """The Audit screen's filter, its times resolved once (an age means that long before it was typed)."""

    job: str | None = None
    owner: str | None = None
    operator: str | None = None
    kind: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    at: datetime | None = None
    at_zone: str = "UTC"
    text: dict[str, str] = {}  # as typed

    def keyed(self) -> dict[str, str]:
        return self.text

    @property
    def upto(self) -> datetime | None:
        """The last instant shown: until:, or at: (the events up to that instant)."""
        if self.at is not None and self.until is not None:
            return min(self.at, self.until)
        return self.at or self.until

    def instant(self) -> Instant | None:
        return Instant(self.at, self.at_zone, self.text.get("at", "")) if self.at is not None else None


def parse_audit_filter(text: str, *, now: datetime | None = None) -> AuditFilter:
    """The grammar above; an unknown key, an empty value, a key given twice, a bad time or
    since: after until: is a BadInput whose hint is the grammar."""
    values: dict[str, str] = {}
    for token in text.split():
        term = keyed_term(token, AUDIT_KEYS, audit_grammar)
        if term is None:
            if not _HEX.match(token):
                raise BadInput(f"'{sanitize(token, max_chars=60)}' is not a call-id prefix; name its key "
                               f"(owner:{sanitize(token, max_chars=40)} for a worker)", hint=audit_grammar())
            term = ("job", token)
        name, value = term
        if name in values and values[name] != value:
            raise BadInput(f"'{sanitize(token, max_chars=60)}': {name}: is given twice", hint=audit_grammar())
        values[name] = value
    if "job" in values and not _HEX.match(values["job"]):
        raise BadInput(f"job:{sanitize(values['job'], max_chars=40)} is not a call-id prefix (hex digits)",
                       hint=audit_grammar())
    if "kind" in values and not _KIND.match(values["kind"]):
        raise BadInput(f"kind:{sanitize(values['kind'], max_chars=40)} is not an event kind "
                       "(lower case letters, digits and _)", hint=audit_grammar())
    times: dict[str, Instant] = {}
    for key in ("since", "until", "at"):
        if key in values:
            try:
                # at: and since: ask the history, which holds nothing after now; until: may lie ahead
                times[key] = (parse_past(values[key], now=now, what=f"{key}:") if key != "until" and now is not None
                              else parse_time(values[key], now=now, what=f"{key}:"))
            except BadInput as exc:
                raise BadInput(str(exc), hint=audit_grammar()) from None
    try:
        check_range(times.get("since"), times.get("until"))
    except BadInput as exc:
        raise BadInput(str(exc).replace("--since", "since:").replace("--until", "until:"),
                       hint=audit_grammar()) from None
    return AuditFilter(job=values.get("job"), owner=values.get("owner"), operator=values.get("operator"),
                       kind=values.get("kind"), since=times["since"].at if "since" in times else None,
                       until=times["until"].at if "until" in times else None,
                       at=times["at"].at if "at" in times else None,
                       at_zone=times["at"].zone if "at" in times else "UTC", text=values)
