"""The one ownership answer: who held a call, with which token, from when to when and how each
stretch ended, rebuilt from its history (job_events) alone. The call detail, `leasectl show --json`
(`ownership`), `leasectl audit owner` and `leasectl audit verify` all ask this replay;
queries/audit/jobs_at.sql applies the same rule in SQL for every call at once, and
tests/db/test_audit.py holds the two equal.

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
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pydantic import field_validator

from console.core.actions import ACTIONS
from console.core.models import LIVE_STATES, TERMINAL_STATES, Row, Stretch
from console.shared.text import sanitize
from console.shared.times import Instant

# The kinds the tool_jobs trigger writes for an ownership or state change (migrations/0001, 0005).
CHANGE_KINDS = ("claimed", "reclaimed", "state_changed", "fenced")
GRANT_KINDS = ("claimed", "reclaimed")
# the start of an external request, as the trigger journals it (before 0005: side_effect_started)
REQUEST_KINDS = ("tool_request_started", "side_effect_started")
# an operator's action on a call (console/core/actions.py), and one that never reached its guard
OPERATOR_KINDS = (*(spec.journal_kind for spec in ACTIONS.values()), "operator_action_failed")

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

# the state machine of migrations/0001 (leasectl_tool_jobs_guard): what may follow what; a queued
# call whose verifiable request went out unchecked ends in outcome_unknown, not failed or cancelled
# (migrations/0014_chains.sql)
TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed", "outcome_unknown"}),
    "running": frozenset({"succeeded", "failed", "queued", "outcome_unknown", "cancel_requested", "cancelled"}),
    "cancel_requested": frozenset({"cancelled", "succeeded", "failed", "outcome_unknown"}),
    "outcome_unknown": frozenset({"queued", "succeeded", "failed"}),
}


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


class Holding(Stretch):
    """One stretch of ownership as the history tells it, with the events that opened and closed it."""

    claim_event_id: int
    end_event_id: int | None = None
    end_actor: str | None = None
    ended_at_event: datetime | None = None  # the instant of the event that closed it (later than an expiry)
    lease_known: datetime | None = None  # the latest lease value the history shows for it
    end_kind: str | None = None  # the kind of the event that closed it, and the state it left the call in
    end_state: str | None = None


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
    end_kind: str | None = None
    end_state: str | None = None

    def holding(self) -> Holding:
        return Holding(owner_id=self.owner_id, fencing_token=self.fencing_token, held_from=self.held_from,
                       held_until=self.held_until, ended_by=self.ended_by, claim_event_id=self.claim_id,
                       end_event_id=self.end_id, end_actor=self.end_actor, ended_at_event=self.end_at,
                       end_kind=self.end_kind, end_state=self.end_state,
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
                cur.end_kind, cur.end_state = s.kind, s.state_to
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


def ownership(job_id: uuid.UUID, events: Iterable[Any]) -> list[Holding]:
    """Every stretch of the call's ownership, oldest first, by the rule above: what the call
    detail shows, `leasectl show --json` says (`ownership`) and `audit owner` answers from."""
    return [s.holding() for s in replay(job_id, [step_of(e) for e in events], keep_moments=False).stretches]


def stretches(holdings: Iterable[Holding]) -> list[Stretch]:
    """The contract's five keys of each stretch (`show --json`), without the replay's bookkeeping."""
    return [Stretch.model_validate(h.model_dump(include=set(Stretch.model_fields))) for h in holdings]
