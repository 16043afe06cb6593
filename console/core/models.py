"""Rows as they cross from the data layer to the screens and the CLI: typed, validated."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

# The vocabularies of the schema (the CHECK constraints of migrations/0001): one place in Python.
Health = Literal["healthy", "heartbeat_late", "lease_expired", "cancel_unheard", "outcome_unknown",
                 "zombie", "over_stage_timeout", "past_deadline", "past_max_hold"]
State = Literal["queued", "running", "cancel_requested", "succeeded", "failed", "cancelled",
                "outcome_unknown"]
TerminalState = Literal["succeeded", "failed", "cancelled"]
SideEffect = Literal["read_only", "mutating_verifiable", "mutating_unverifiable"]

STATES: tuple[str, ...] = get_args(State)
HEALTHS: tuple[str, ...] = get_args(Health)
TERMINAL_STATES: tuple[str, ...] = get_args(TerminalState)
LIVE_STATES = ("running", "cancel_requested")  # a lease is held: heartbeats, lease health
# worker writes refused for a stale fencing token: a call with one in the last 5 minutes is a zombie
# (the SQL side: leasectl_job_health's callers in queries/views)
ZOMBIE_KINDS = ("heartbeat_lost", "result_rejected", "receiver_rejected")


class Row(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class DbInfo(Row):
    database: str
    role: str
    server_version: str
    db_now: datetime
    session_read_only: bool
    can_act: bool
    schema_version: int | None = None


class Counts(Row):
    needs_human: int = 0
    stale_heartbeats: int = 0
    expired_unswept: int = 0
    cancel_unheard: int = 0
    over_stage_timeout: int = 0
    past_deadline: int = 0  # running past the call's deadline (also counted in expired_unswept)
    running: int = 0
    cancel_requested: int = 0
    queued: int = 0
    failed_last_hour: int = 0
    zombies: int = 0
    db_now: datetime


class Identified(Row):
    """A row named by a uuid (a call, a shutdown, a reconciliation record): lists show its first 8
    characters."""

    id: uuid.UUID

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]


class CallRow(Identified):
    """What every row of a call carries, in this order (the first keys of `leasectl jobs --json`):
    what it runs, under which token and key, for which agent and model."""

    tool: str
    side_effect: SideEffect
    state: State
    owner_id: str | None = None
    fencing_token: int
    attempt: int
    max_attempts: int | None = None
    idempotency_key: str
    agent_id: str | None = None
    session_id: str | None = None
    model: str | None = None
    provider: str | None = None


class JobSummary(CallRow):
    """A call as lists show it: everything but payload and result."""

    # its chain (migration 0014; docs/seeds.md §000 stages): the call that made it, the chain's first
    # call, its stage there, its priority (higher first), when it was accepted upstream, its W3C trace
    parent_id: uuid.UUID | None = None
    chain_id: uuid.UUID | None = None
    stage: int = 0
    priority: int = 0
    accepted_at: datetime | None = None
    trace_id: str | None = None
    created_at: datetime
    claimed_at: datetime | None = None
    heartbeat_at: datetime | None = None
    lease_until: datetime | None = None
    deadline_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    cancel_requested_reason: str | None = None
    side_effect_started_at: datetime | None = None
    external_request_id: str | None = None
    retry_approved_by: str | None = None
    retry_approved_at: datetime | None = None
    retry_approved_reason: str | None = None
    terminal_reason: str | None = None
    completed_despite_cancel: bool = False
    payload_hash: str | None = None
    payload_size: int | None = None
    lease_seconds: float | None = None
    heartbeat_seconds: float | None = None
    jitter_seconds: float | None = None
    stage_timeout_seconds: float | None = None
    health: Health | None = None  # None: a finished call holds no lease (a zombie still says zombie)
    db_now: datetime
    heartbeat_age_seconds: float | None = None
    lease_left_seconds: float | None = None
    deadline_left_seconds: float | None = None

    @property
    def lease_live(self) -> bool:
        return self.state in LIVE_STATES and self.lease_left_seconds is not None and self.lease_left_seconds >= 0


class Check(Row):
    """What the owner of a verifiable call last recorded the service said of its earlier request
    (worker/record_check.sql; docs/seeds.md §004): done, not_done or unknown, when, under which token."""

    found: Literal["done", "not_done", "unknown"]
    checked_at: datetime
    token: int


class Job(JobSummary):
    """One call with its error and lease sizing; payload and result only when asked for
    (`reads.job_document`): they may be megabytes."""

    payload: Any = None
    result: Any = None
    error: Any = None
    extra_attempts: int = 0
    missed_heartbeats: int | None = None
    check: Check | None = None  # None: no check was ever recorded
    # every stretch of ownership, oldest first (`leasectl show --json`: reads.job_document fills it
    # from the one replay, console/core/ownership.py); None when part of the call's history is
    # archived (migration 0021): never replayed from what is left (console/core/history.py)
    ownership: list[Stretch] | None = []
    history_archived_before: datetime | None = None  # set when the call's history before it is archived


class PayloadPreview(Row):
    """What the detail shows of a payload and a result: their real size and a bounded beginning."""

    payload_bytes: int | None = None
    payload_preview: str | None = None
    result_bytes: int | None = None
    result_preview: str | None = None
    max_chars: int = 0

    @property
    def payload_cut(self) -> bool:
        return self.payload_preview is not None and len(self.payload_preview) >= self.max_chars

    @property
    def result_cut(self) -> bool:
        return self.result_preview is not None and len(self.result_preview) >= self.max_chars


class EventRow(Row):
    """What every row of a call's history starts with, in this order (the first keys of `leasectl
    history --json`)."""

    id: int
    job_id: uuid.UUID
    at: datetime
    kind: str
    actor: str | None = None
    fencing_token: int | None = None


class Event(EventRow):
    state_from: str | None = None
    state_to: str | None = None
    owner_from: str | None = None
    owner_to: str | None = None
    lease_until: datetime | None = None
    reason: str | None = None
    request_id: uuid.UUID | None = None
    details: dict[str, Any] = {}
    db_role: str | None = None  # the database role that caused it (the actor is what the client claimed)


class LineageRow(Row):
    id: uuid.UUID
    tool: str
    state: str
    idempotency_key: str
    external_request_id: str | None = None
    fencing_token: int
    attempt: int
    owner_id: str | None = None
    created_at: datetime
    finished_at: datetime | None = None
    relation: str


class CallDetail(Row):
    """Everything the call detail shows, read in one snapshot."""

    job: Job | None
    events: list[Event]
    lineage: list[LineageRow]
    # where the online history begins, when part of this call's history is archived before it
    history_archived_before: datetime | None = None


class ServiceCheck(Row):
    """What an owner asked the service about an earlier request before repeating it, and what it
    said (docs/seeds.md §004: a verifiable side effect is checked, never assumed)."""

    at: datetime
    actor: str | None = None
    fencing_token: int | None = None
    found: str | None = None  # done | not_done | unknown
    request: str | None = None
    details: Any = None


class ApprovalRow(CallRow):
    """A call waiting in outcome_unknown for a human, with what may already have happened."""

    max_attempts: int  # a waiting call always has its limit (the approver reads "attempt N of M")
    external_request_id: str | None = None
    error: Any = None
    created_at: datetime
    claimed_at: datetime | None = None
    outcome_unknown_at: datetime | None = None
    last_confirmed_lease: datetime | None = None
    side_effect_started_at: datetime | None = None
    related_calls: int = 0
    checks: list[ServiceCheck] = []
    db_now: datetime


class ApprovalQueue(Row):
    """The approvals screen's data, read in one snapshot: each waiting call with what may have
    happened, and its summary (state and token: the guard an approval relies on)."""

    rows: list[ApprovalRow]
    calls: dict[str, JobSummary]
    db_now: datetime


class RecentEvent(EventRow):
    reason: str | None = None
    tool: str
    what: str


class ToolSettings(Row):
    """A registered tool and its fair-share settings (migration 0016), with what runs and waits now."""
    name: str
    side_effect: str
    max_attempts: int
    max_running: int | None = None
    max_hold_seconds: float | None = None
    paused_at: datetime | None = None
    paused_by: str | None = None
    pause_reason: str | None = None
    auto_registered: bool = False
    running: int = 0
    queued: int = 0


class ToolPause(Row):
    """A tool's pause: the one an action set, or the one a resume ended."""
    name: str
    paused_at: datetime
    paused_by: str
    pause_reason: str


class TriageSnapshot(Row):
    counts: Counts
    rows: list[JobSummary]
    recent: list[RecentEvent] = []
    paused_tools: list[ToolSettings] = []  # migration 0016: whose calls wait for a resume
    orphans: list[Orphan] = []  # migration 0018


class Stretch(Row):
    """One stretch of a call's ownership, as console/core/ownership.py replays it from the history:
    who held the lease, under which token, over [held_from, held_until), and what ended it
    (`held_until` null: no later event has closed it)."""

    owner_id: str
    fencing_token: int
    held_from: datetime
    held_until: datetime | None = None
    ended_by: str | None = None


class Applied(Row):
    action: str  # a name in console.core.actions.ACTIONS
    job_id: uuid.UUID
    state: str
    fencing_token: int
    owner_id: str | None = None
    request_id: uuid.UUID | None = None
    fenced: bool = False


class Refused(Row):
    action: str  # a name in console.core.actions.ACTIONS
    job_id: uuid.UUID
    reason: str
    now: JobSummary | None = None
    request_id: uuid.UUID | None = None


ActionResult = Applied | Refused


# ----------------------------------------------------------------------------- fleet (docs/seeds.md §003)

AgentState = Literal["running", "draining", "aborting", "reconciling", "terminated"]
ShutdownMode = Literal["drain", "abort"]
ShutdownState = Literal["proposed", "declined", "requested", "draining", "aborting", "reconciling", "terminated"]
Resolution = Literal["completed", "failed", "cancelled", "cancel_unconfirmed", "outcome_unknown",
                     "never_started"]


class FleetAgent(Row):
    """One node of the delegation tree with what it holds right now."""

    id: str
    parent_id: str | None = None
    kind: str
    state: AgentState
    started_at: datetime
    last_seen_at: datetime | None = None
    terminated_confirmed_at: datetime | None = None
    depth: int = 0
    queued_calls: int = 0
    running_calls: int = 0
    live_grants: int = 0
    expired_grants: int = 0
    shutdown_id: uuid.UUID | None = None
    last_seen_age_seconds: float | None = None
    db_now: datetime
    # migration 0018: the upgrade path's generations, and orphans (console/db's leasectl_orphans)
    proposal_id: uuid.UUID | None = None
    generation: int = 1
    replaces: str | None = None
    orphan_of: str | None = None
    orphan_why: Literal["terminated", "silent"] | None = None
    orphan_since: datetime | None = None

    @property
    def orphaned(self) -> bool:
        return self.orphan_of is not None


class Orphan(Row):
    """An agent whose ancestor is terminated or silent while it still runs (migration 0018's rule)."""

    agent_id: str
    ancestor_id: str
    why: Literal["terminated", "silent"]
    since: datetime
    kind: str
    state: AgentState
    proposal_id: uuid.UUID | None = None


class Shutdown(Identified):
    root_agent_id: str
    mode: ShutdownMode
    state: ShutdownState
    requested_by: str
    reason: str
    requested_at: datetime
    window_seconds: float
    draining_at: datetime | None = None
    aborting_at: datetime | None = None
    reconciling_at: datetime | None = None
    finished_at: datetime | None = None
    agents: int = 0
    phase_started_at: datetime | None = None
    phase_window_seconds: float | None = None
    window_left_seconds: float | None = None
    record_id: uuid.UUID | None = None
    unaccounted: int | None = None
    db_now: datetime
    # migration 0018: proposals and who decided them; the new generation that takes the queued calls
    replacement_agent_id: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    calls_moved: int = 0


class InFlightCall(Row):
    model_config = ConfigDict(extra="allow", frozen=True)

    job_id: uuid.UUID
    tool: str
    resolution: Resolution | str
    agent_id: str | None = None


class GrantEntry(Row):
    model_config = ConfigDict(extra="allow", frozen=True)

    grant_id: uuid.UUID
    agent_id: str
    kind: str
    resource: str
    issued_by: str | None = None
    revoked_by: str | None = None
    revoked_at: datetime | None = None
    expires_at: datetime | None = None


class ChildEntry(Row):
    model_config = ConfigDict(extra="allow", frozen=True)

    agent_id: str
    parent_id: str | None = None
    kind: str | None = None
    depth: int = 0
    confirmed_at: datetime | None = None
    last_seen_at: datetime | None = None


class MovedCall(Row):
    model_config = ConfigDict(extra="allow", frozen=True)

    job_id: uuid.UUID
    tool: str
    from_agent_id: str
    to_agent_id: str
    at: datetime | None = None


class ReconciliationRecord(Identified):
    """Written by the control plane before anything is called terminated; append-only."""

    shutdown_id: uuid.UUID
    written_by: str
    written_at: datetime
    in_flight: list[InFlightCall] = []
    grants_revoked: list[GrantEntry] = []
    grants_expired: list[GrantEntry] = []
    children_confirmed: list[ChildEntry] = []
    children_unaccounted: list[ChildEntry] = []
    calls_moved: list[MovedCall] = []  # migration 0018: to the replacement's generation
    root_agent_id: str | None = None
    replacement_agent_id: str | None = None
    decided_by: str | None = None  # a proposal's: who accepted it
    mode: ShutdownMode | None = None
    requested_by: str | None = None
    reason: str | None = None
    requested_at: datetime | None = None
    finished_at: datetime | None = None
    db_now: datetime | None = None

    def contract(self) -> dict[str, Any]:
        """The record with exactly the contract's field names (what --json prints)."""
        return self.model_dump(mode="json", include={
            "id", "shutdown_id", "written_by", "written_at", "in_flight", "grants_revoked", "grants_expired",
            "children_confirmed", "children_unaccounted", "calls_moved"})


class HeldGrant(Row):
    """A grant not revoked (yet): live, or expired and never revoked."""

    id: uuid.UUID
    agent_id: str
    kind: str
    resource: str
    issued_by: str
    issued_at: datetime
    expires_at: datetime
    expires_in_seconds: float


class GrantRow(HeldGrant):
    """One grant, revoked or not (`leasectl revoke` reads it before and after)."""

    revoked_at: datetime | None = None
    revoked_by: str | None = None


class FleetSnapshot(Row):
    agents: list[FleetAgent]
    shutdowns: list[Shutdown]
    grants: list[HeldGrant] = []


class ShutdownRequested(Row):
    shutdown: Shutdown
    request_id: uuid.UUID | None = None


class ShutdownDecided(Row):
    """A proposal accepted (now requested: the supervisor carries it out) or declined."""

    id: uuid.UUID
    root_agent_id: str
    mode: ShutdownMode
    state: ShutdownState
    requested_by: str
    reason: str
    decided_by: str
    decided_at: datetime
    window_seconds: float


class ShutdownRefused(Row):
    mode: ShutdownMode
    root_agent_id: str
    reason: str
    request_id: uuid.UUID | None = None


ShutdownResult = ShutdownRequested | ShutdownRefused
