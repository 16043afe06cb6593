"""The auditor's rules and rows: who held a call when, rebuilt from its history alone; the checks
`leasectl audit verify` makes; the operator journal's rows; the Audit screen's filter grammar.

Ownership, from job_events only (the current row is never consulted):

* A *stretch* starts with the event that grants the call to an owner under a new fencing token
  (`claimed`, `reclaimed`): it is held from that instant.
* It ends at the first later ownership or state event that leaves it -- a completion, a failure,
  a requeue, outcome unknown, a cancel confirmed, an operator's forced mark-terminal or the control
  plane's fence (a token bump: the owner is fenced out), another owner's claim. A renewal
  (heartbeat) is not journaled and is not an ownership change; neither is a cancel *request*
  (running -> cancel_requested keeps owner, token and lease: not stopped).
* Held over the half-open interval [held_from, held_until). Exactly at the claim: held. Exactly at
  the expiry: no longer held -- the database's own rule, a worker may write only while
  `lease_until > now()`.
* A lease that ran out with nobody reclaiming it does NOT count as held after it ran out: the owner
  can no longer write (every worker statement requires a live lease), so from the expiry until the
  sweep or a reclaim nobody held the call. The expiry is known from the event that followed:
  its `details.previous_lease_until` is the last value the lease was renewed to. The stretch then
  says `ended_by: expired` and `held_until` is that instant.
* A stretch that no later event has closed is open (`held_until` null): heartbeats are not
  journaled, so the history cannot tell a lease renewed until now from one that ran out a minute
  ago and was not swept yet. It is reported as held; the next event (a sweep, a reclaim, a result)
  will close it, at its expiry if it had expired.
* Events are replayed in id order -- the order in which the row lock of the call let them happen --
  and each counts from its own `at` (queries/audit/jobs_at.sql applies the same rule in SQL). A
  transaction's `at` is its start: one that waited for the row can be dated a little before the
  event it waited for; a stretch it ends then is empty rather than negative.

`audit verify` replays each call the same way and reports, with the call, the events and why:

  overlap             two owners at one instant: a grant while the previous owner's lease was live
                      (the database refuses that: LCS06), or a grant dated inside another stretch
  token_fell          an ownership, state or operator event under a lower token than the call had
  token_reused        a grant without a new token
  token_skipped       the token rose by more than one: a grant or a fence without its event
  finished_twice      a call changed (or finished again) after it had finished
  missing_event       a change that does not start where the history left the call (its state or
                      owner before the change differs), or a history that does not begin with
                      `enqueued`: a change without its event
  illegal_transition  a state change the state machine of migrations/0001 forbids
  unreadable          an ownership event whose previous lease is not a time
  wrong_login         an event its database login (`db_role`) may not have written (below)

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, field_validator

from console.core.models import LIVE_STATES, TERMINAL_STATES, Event, JobSummary, Row
from console.shared.config import SessionLimits
from console.shared.errors import BadInput
from console.shared.text import sanitize
from console.shared.times import TIME_FORMS, Instant, check_range, parse_past, parse_time

# The kinds the tool_jobs trigger writes for an ownership or state change (migrations/0001, 0005).
CHANGE_KINDS = ("claimed", "reclaimed", "state_changed", "fenced")
GRANT_KINDS = ("claimed", "reclaimed")
# the start of an external request, as the trigger journals it (before 0005: side_effect_started)
REQUEST_KINDS = ("tool_request_started", "side_effect_started")
OPERATOR_KINDS = ("operator_cancel", "operator_mark_terminal", "operator_approve_retry", "operator_action_failed")
# the kinds only the database writes (the tool_jobs triggers); the trigger's tool_request_started
# is told from a worker's report of the same name by its state columns (a report has none: LCH03)
DATABASE_KINDS = ("enqueued", *CHANGE_KINDS, "side_effect_started")

Outcome = Literal["applied", "refused", "failed"]
ACTIONS: tuple[str, ...] = ("cancel", "mark_terminal", "approve_retry", "drain", "abort")
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

# how a stretch of ownership ended (`ended_by`)
ENDINGS: dict[str, str] = {
    "expired": "the lease ran out; nobody held the call from then until the next event",
    "succeeded": "the owner completed it",
    "failed": "it failed for good",
    "cancelled": "the cancel was confirmed, or the call was cancelled",
    "requeued": "it went back to the queue (a retryable failure)",
    "outcome_unknown": "a side effect started and the answer was lost: parked for a human",
    "fenced": "the token went up while the lease was live; an operator's forced mark-terminal or the "
              "control plane fenced the owner out",
    "reclaimed": "another owner was granted the call while the lease was live (a violation)",
}

RULES: dict[str, str] = {
    "overlap": "two owners held the call's lease at one instant",
    "token_fell": "a fencing token went down",
    "token_reused": "ownership granted without a new fencing token",
    "token_skipped": "the token rose by more than one: a grant or a fence without its event",
    "finished_twice": "a finished call changed again",
    "missing_event": "a change without its event: the history does not continue where it left the call",
    "illegal_transition": "a state change the state machine forbids",
    "unreadable": "an event's previous lease is not a time",
    "wrong_login": "a worker login wrote what only the database, an operator or its own name may",
}

# the state machine of migrations/0001 (leasectl_tool_jobs_guard): what may follow what
TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"succeeded", "failed", "queued", "outcome_unknown", "cancel_requested", "cancelled"}),
    "cancel_requested": frozenset({"cancelled", "succeeded", "failed", "outcome_unknown"}),
    "outcome_unknown": frozenset({"queued", "succeeded", "failed"}),
}

# The auditor's own session limits: those 0002 gives the leasectl_auditor role (it "reads more but
# never holds a transaction open" long). An export or a verify streams through a server-side cursor:
# each FETCH is one short statement, so a long export never meets the statement timeout.
# work_mem: rebuilding every call at an instant aggregates the whole history by call and sorts the
# calls (audit/jobs_at.sql); at the server's default of 4 MB both spill to disk at 100,000 calls
# (1.3x the time, tests/bench/audit.py). One auditor's session, not every connection, gets more.
AUDIT_LIMITS = SessionLimits(statement_timeout_ms=30_000, lock_timeout_ms=1_000, idle_in_transaction_ms=60_000,
                             work_mem_mb=64)


def parse_lease(value: object) -> datetime | None:
    """`details.previous_lease_until` as the trigger wrote it (ISO 8601 text), or None."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


class Step(NamedTuple):
    """One history row as the replay needs it (light: verify streams a million of them)."""

    id: int
    at: datetime
    kind: str
    fencing_token: int | None
    state_from: str | None
    state_to: str | None
    owner_from: str | None
    owner_to: str | None
    lease_until: datetime | None
    previous_lease_until: str | datetime | None = None
    actor: str | None = None


def step_of(event: Any) -> Step:
    """A Step from an Event (models.Event) or from a row with the same names."""
    if isinstance(event, dict):
        row = event
    else:
        row = {name: getattr(event, name, None) for name in (*Step._fields, "details")}
    previous = row.get("previous_lease_until")
    if previous is None and isinstance(row.get("details"), dict):
        previous = row["details"].get("previous_lease_until")
    return Step(row["id"], row["at"], row["kind"], row.get("fencing_token"), row.get("state_from"),
                row.get("state_to"), row.get("owner_from"), row.get("owner_to"), row.get("lease_until"), previous,
                row.get("actor"))


# ----------------------------------------------------------------------------- rows


class Holding(Row):
    """One stretch of ownership as the history tells it."""

    owner_id: str
    fencing_token: int
    held_from: datetime
    held_until: datetime | None = None  # None: no later event closed it (see the module's words)
    ended_by: str | None = None
    claim_event_id: int
    end_event_id: int | None = None
    end_actor: str | None = None
    ended_at_event: datetime | None = None  # the instant of the event that closed it (later than an expiry)
    lease_known: datetime | None = None  # the latest lease value the history shows for it


class Violation(Row):
    job_id: uuid.UUID
    rule: str
    event_ids: list[int]
    why: str
    # wrong_login: the event's kind and the login that wrote it (null for the replay's rules)
    kind: str | None = None
    db_role: str | None = None


class OwnerAt(Row):
    """`leasectl audit owner JOB --at TIME`: who held the call's lease at that instant."""

    job_id: uuid.UUID
    at: datetime
    owner_id: str | None = None
    fencing_token: int | None = None
    held_from: datetime | None = None
    held_until: datetime | None = None
    ended_by: str | None = None

    @field_validator("at")
    @classmethod
    def _in_utc(cls, value: datetime) -> datetime:
        """Every time in JSON is UTC (Z), the instant asked for too, whatever offset it was typed in."""
        return value.astimezone(UTC) if value.tzinfo is not None else value

    # beyond the contract's keys (the words and the screen use them; --json prints the contract's)
    zone: str = "UTC"
    existed: bool = True
    created_at: datetime | None = None
    state: str | None = None
    holding: Holding | None = None
    previous: Holding | None = None  # when nobody held it: the last stretch that ended before
    timeline: list[Holding] = []
    # a history that breaks the rules (only a superuser can make one): every other stretch that
    # also covers the instant, and what verify would say of this call; the answer is then not one owner
    also_held: list[Holding] = []
    violations: list[Violation] = []

    CONTRACT: tuple[str, ...] = ("job_id", "at", "owner_id", "fencing_token", "held_from", "held_until", "ended_by")

    def contract(self) -> dict[str, Any]:
        """The contract's keys, in order; and, only when the call's history breaks the rules (a
        superuser's tampering), `also_held` and `violations` after them, so that a script is told
        the one owner it reads is not the whole answer, as the words on a terminal say first."""
        keys = self.CONTRACT + (("also_held", "violations") if self.violations or self.also_held else ())
        data = self.model_dump(mode="json", include=set(keys))
        return {key: data[key] for key in keys}


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


class AuditPage(Row):
    """The Audit screen's data, read in one snapshot."""

    view: Literal["events", "journal"]
    job_id: uuid.UUID | None = None
    owner: OwnerAt | None = None
    events: list[Event] = []
    actions: list[OperatorAction] = []
    problem: str | None = None  # the filter names no call (unknown or ambiguous job:): said on screen
    db_now: datetime


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


# ----------------------------------------------------------------------------- the replay


@dataclass(slots=True)
class _Stretch:
    owner_id: str
    fencing_token: int
    held_from: datetime
    raw_from: datetime  # the grant's own `at` (what the database compared with the old lease)
    claim_id: int
    lease_known: datetime | None
    held_until: datetime | None = None
    ended_by: str | None = None
    end_id: int | None = None
    end_actor: str | None = None
    end_at: datetime | None = None

    def holding(self) -> Holding:
        return Holding(owner_id=self.owner_id, fencing_token=self.fencing_token, held_from=self.held_from,
                       held_until=self.held_until, ended_by=self.ended_by, claim_event_id=self.claim_id,
                       end_event_id=self.end_id, end_actor=self.end_actor, ended_at_event=self.end_at,
                       lease_known=self.lease_known)


class Moment(NamedTuple):
    """The call after one change: from `at` on, until the next change."""

    at: datetime
    event_id: int
    state: str
    owner_id: str | None
    fencing_token: int


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


@dataclass
class CallReplay:
    """One call's history replayed in id order: its stretches of ownership and, for verify, what
    breaks the protocol. Feed it Steps in id order, then call finish()."""

    job_id: uuid.UUID
    keep_moments: bool = False
    state: str | None = None
    owner: str | None = None
    token: int = 0
    created_at: datetime | None = None
    stretches: list[_Stretch] = field(default_factory=list)
    moments: list[Moment] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    events: int = 0
    _current: _Stretch | None = None
    _finished: tuple[int, str] | None = None
    _last_change: int | None = None
    _started: bool = False
    _complained_start: bool = False

    def _violate(self, rule: str, ids: Iterable[int | None], why: str) -> None:
        self.violations.append(Violation(job_id=self.job_id, rule=rule,
                                         event_ids=sorted({i for i in ids if i is not None}), why=why))

    def feed(self, s: Step) -> None:
        self.events += 1
        eff = s.at
        if s.kind == "enqueued":
            if self._started:
                self._violate("missing_event", [s.id], f"a second enqueued event (#{s.id}): a call is enqueued once")
                return
            self._started = True
            self.created_at = eff
            self.state = s.state_to or "queued"
            self.token = s.fencing_token or 0
            if self.keep_moments:
                self.moments.append(Moment(eff, s.id, self.state, None, self.token))
            return
        if s.kind in CHANGE_KINDS:
            self._change(s, eff)
        elif s.kind in REQUEST_KINDS and s.state_to is not None:
            # the trigger's own record of a request: it carries the lease as renewed by then
            self._check_token(s)
            cur = self._current
            if cur is not None and s.owner_to == cur.owner_id and s.fencing_token == cur.fencing_token:
                cur.lease_known = _later(cur.lease_known, s.lease_until)
        elif s.kind in OPERATOR_KINDS:
            self._check_token(s)

    def _check_token(self, s: Step) -> None:
        if s.fencing_token is not None and s.fencing_token < self.token:
            self._violate("token_fell", [self._last_change, s.id],
                          f"{s.kind} #{s.id} carries fencing token {s.fencing_token}, but the call already had "
                          f"token {self.token}: a token never decreases")

    def _previous_lease(self, s: Step) -> datetime | None:
        try:
            return parse_lease(s.previous_lease_until)
        except (TypeError, ValueError):
            self._violate("unreadable", [s.id], f"{s.kind} #{s.id}: details.previous_lease_until "
                                                f"'{sanitize(s.previous_lease_until, max_chars=60)}' is not a time")
            return None

    def _change(self, s: Step, eff: datetime) -> None:
        if not self._started and not self._complained_start:
            self._complained_start = True
            self._violate("missing_event", [s.id], f"the history starts with {s.kind} #{s.id}, not with the call's "
                                                   "enqueued event")
            self.state, self.owner = s.state_from, s.owner_from
            self.token = max((s.fencing_token or 0) - 1, 0)
        tok = s.fencing_token if s.fencing_token is not None else self.token
        # -- where the history left the call
        if self._finished is not None:
            fid, fstate = self._finished
            self._violate("finished_twice", [fid, s.id],
                          f"the call finished {fstate} at event #{fid}; {s.kind} #{s.id} changes it again "
                          f"({s.state_from} -> {s.state_to})")
        elif self._started or self._complained_start:
            if s.state_from != self.state:
                self._violate("missing_event", [self._last_change, s.id],
                              f"{s.kind} #{s.id} moves the call from {s.state_from}, but the history left it "
                              f"{self.state}: a change without its event")
            elif s.owner_from != self.owner:
                self._violate("missing_event", [self._last_change, s.id],
                              f"{s.kind} #{s.id} takes the call from owner {sanitize(s.owner_from or 'none')}, but "
                              f"the history left it with {sanitize(self.owner or 'no owner')}: an ownership change "
                              "without its event")
            if (s.state_from is not None and s.state_to is not None and s.state_from != s.state_to
                    and s.state_to not in TRANSITIONS.get(s.state_from, frozenset())):
                self._violate("illegal_transition", [s.id],
                              f"{s.kind} #{s.id}: {s.state_from} -> {s.state_to} is not a transition of the "
                              "state machine")
        # -- the token
        grant = s.kind in GRANT_KINDS
        if tok < self.token:
            self._check_token(s)
        elif grant and tok == self.token:
            self._violate("token_reused", [self._last_change, s.id],
                          f"{sanitize(s.owner_to or 'someone')} was granted the call in {s.kind} #{s.id} under "
                          f"token {tok}, the token it already had: every grant is a new token")
        elif tok > self.token + 1:
            self._violate("token_skipped", [self._last_change, s.id],
                          f"the token went from {self.token} to {tok} in {s.kind} #{s.id}: a grant or a fence "
                          "without its event")
        # -- ownership
        holds_after = s.state_to in LIVE_STATES and s.owner_to is not None
        previous_lease = self._previous_lease(s)
        cur = self._current
        same = False
        if cur is not None:
            cur.lease_known = _later(cur.lease_known, previous_lease)
            same = holds_after and s.owner_to == cur.owner_id and tok == cur.fencing_token
            if same:
                cur.lease_known = _later(cur.lease_known, s.lease_until)
            else:
                final = cur.lease_known
                if grant and final is not None and final >= s.at:
                    self._violate("overlap", [cur.claim_id, s.id],
                                  f"{sanitize(s.owner_to or 'someone')} was granted the call at "
                                  f"{s.at.isoformat()} (event #{s.id}, token {tok}) while "
                                  f"{sanitize(cur.owner_id)} still held its lease until {final.isoformat()} "
                                  f"(token {cur.fencing_token}, granted in event #{cur.claim_id})")
                    cur.held_until, cur.ended_by = max(eff, cur.held_from), "reclaimed"
                elif final is not None and final <= eff:
                    cur.held_until, cur.ended_by = max(final, cur.held_from), "expired"
                else:
                    cur.held_until, cur.ended_by = max(eff, cur.held_from), _ending(s, cur)
                cur.end_id, cur.end_actor, cur.end_at = s.id, s.actor, eff
                self._current = None
        if holds_after and not same:
            assert s.owner_to is not None
            if not grant:
                self._violate("missing_event", [s.id],
                              f"{s.kind} #{s.id} leaves the call {s.state_to} with {sanitize(s.owner_to)} under "
                              f"token {tok} without a claim: ownership is granted only by claimed or reclaimed")
            stretch = _Stretch(owner_id=s.owner_to, fencing_token=tok, held_from=eff, raw_from=s.at, claim_id=s.id,
                               lease_known=s.lease_until)
            self.stretches.append(stretch)
            self._current = stretch
        self.state, self.owner = s.state_to, s.owner_to
        self.token = max(self.token, tok)
        self._last_change = s.id
        if s.state_to in TERMINAL_STATES and self._finished is None:
            self._finished = (s.id, s.state_to)
        if self.keep_moments and s.state_to is not None:
            self.moments.append(Moment(eff, s.id, s.state_to, s.owner_to, self.token))

    def against_row(self, state: str, owner_id: str | None, fencing_token: int) -> None:
        """The history must end where the call's row is: a change made behind the triggers' back
        (superuser, triggers disabled) has no event, and the row is the only trace of it."""
        if not self._started and self.events == 0:
            self._violate("missing_event", [], f"the call is {state} under token {fencing_token} but has no history "
                          "at all: it was never enqueued through the journal")
            return
        if (self.state, self.owner, self.token) != (state, owner_id, fencing_token):
            self._violate("missing_event", [self._last_change],
                          f"the history leaves the call {self.state} with {sanitize(self.owner or 'no owner')} "
                          f"under token {self.token}, its row says {state} with "
                          f"{sanitize(owner_id or 'no owner')} under token {fencing_token}: a change without its event")

    def finish(self) -> CallReplay:
        """The check that needs the whole history: a grant dated inside another stretch (a forged row
        appended later can carry any `at`; the replay in id order would otherwise place it after)."""
        reported = {tuple(v.event_ids) for v in self.violations if v.rule == "overlap"}
        for i, later in enumerate(self.stretches):
            for earlier in self.stretches[:i]:
                end = earlier.held_until  # set: a stretch closes before the next one starts
                if not ((end is None or later.raw_from < end)
                        and (later.held_until is None or earlier.held_from < later.held_until)):
                    continue
                ids = tuple(sorted((earlier.claim_id, later.claim_id)))
                if ids in reported:
                    continue
                reported.add(ids)
                self._violate("overlap", ids,
                              f"{sanitize(later.owner_id)} (token {later.fencing_token}, event #{later.claim_id}) "
                              f"is granted at {later.raw_from.isoformat()}, while {sanitize(earlier.owner_id)} held "
                              f"the call from {earlier.held_from.isoformat()} "
                              f"{'on' if end is None else 'until ' + end.isoformat()} "
                              f"(token {earlier.fencing_token}, event #{earlier.claim_id})")
        return self

    # ------------------------------------------------------------------ questions
    def holding_at(self, at: datetime) -> _Stretch | None:
        found = None
        for s in self.stretches:
            if s.held_from <= at and (s.held_until is None or at < s.held_until):
                found = s
        return found

    def moment_at(self, at: datetime) -> Moment | None:
        """The call after its last change (in id order) dated at or before `at`."""
        found = None
        for m in self.moments:
            if m.at <= at:
                found = m
        return found


def _ending(s: Step, cur: _Stretch) -> str:
    """How a live stretch ended, from the event that ended it."""
    if s.kind in GRANT_KINDS:
        return "reclaimed"
    if s.fencing_token is not None and s.fencing_token > cur.fencing_token:
        return "fenced"
    if s.state_to == "queued":
        return "requeued"
    if s.state_to in (*TERMINAL_STATES, "outcome_unknown"):
        return str(s.state_to)
    return s.state_to or s.kind


def replay(job_id: uuid.UUID, steps: Iterable[Step], *, keep_moments: bool = True) -> CallReplay:
    r = CallReplay(job_id, keep_moments=keep_moments)
    for s in steps:
        r.feed(s)
    return r.finish()


def owner_at(job_id: uuid.UUID, events: Iterable[Any], at: Instant) -> OwnerAt:
    """Who held the call at `at`, from its history alone (Events or rows, oldest first)."""
    r = replay(job_id, [step_of(e) for e in events])
    when = at.at
    timeline = [s.holding() for s in r.stretches]
    if r.created_at is None or when < r.created_at:
        return OwnerAt(job_id=job_id, at=when, zone=at.zone, existed=False, created_at=r.created_at,
                       timeline=timeline)
    moment = r.moment_at(when)
    held = r.holding_at(when)
    state = moment.state if moment else None
    token = moment.fencing_token if moment else 0
    if held is not None:
        h = held.holding()
        others = [s.holding() for s in r.stretches
                  if s is not held and s.raw_from <= when and (s.held_until is None or when < s.held_until)]
        return OwnerAt(job_id=job_id, at=when, zone=at.zone, owner_id=h.owner_id, fencing_token=h.fencing_token,
                       held_from=h.held_from, held_until=h.held_until, ended_by=h.ended_by, created_at=r.created_at,
                       state=state, holding=h, timeline=timeline, also_held=others, violations=r.violations)
    before = [s for s in r.stretches if s.held_until is not None and s.held_until <= when]
    return OwnerAt(job_id=job_id, at=when, zone=at.zone, fencing_token=token, created_at=r.created_at, state=state,
                   previous=before[-1].holding() if before else None, timeline=timeline, violations=r.violations)


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
    keys = " ".join(f"{k}:…" for k in AUDIT_KEYS)
    return (f"audit filter keys: {keys}. A bare word is a call-id prefix. Times are {TIME_FORMS}. "
            "e.g. job:8f1b at:2026-12-03T02:13:00Z, or operator:alice since:3d")


class AuditFilter(BaseModel):
    """The Audit screen's filter, its times resolved once (an age means that long before it was typed)."""

    model_config = ConfigDict(frozen=True)

    job: str | None = None
    owner: str | None = None
    operator: str | None = None
    kind: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    at: datetime | None = None
    at_zone: str = "UTC"
    text: dict[str, str] = {}

    @property
    def empty(self) -> bool:
        return not self.text

    def describe(self) -> str:
        return " ".join(f"{k}:{v}" for k, v in self.text.items())

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
        name, sep, value = token.partition(":")
        if not sep:
            if not _HEX.match(token):
                raise BadInput(f"'{sanitize(token, max_chars=60)}' is not a call-id prefix; name its key "
                               f"(owner:{sanitize(token, max_chars=40)} for a worker)", hint=audit_grammar())
            name, value = "job", token
        elif name not in AUDIT_KEYS:
            raise BadInput(f"unknown filter key '{sanitize(name, max_chars=40)}:' in "
                           f"'{sanitize(token, max_chars=60)}'", hint=audit_grammar())
        elif not value:
            raise BadInput(f"'{sanitize(token, max_chars=60)}': nothing after '{name}:'", hint=audit_grammar())
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
