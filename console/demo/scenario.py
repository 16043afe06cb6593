"""A fixed scenario: every situation the console exists for, frozen at one instant.

Used by the snapshot tests and `leasectl screenshots`, so that the pictures never change unless
the screens do. The live demo (`leasectl demo`) produces the same situations with real workers.
Rows and history are written exactly as below (triggers bypassed: a throwaway superuser
session only); the console then renders them with its display clock pinned to ANCHOR.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from console.core.models import TERMINAL_STATES
from console.db.connect import Conn, run, run_one
from console.demo.tools import register_demo_tools

# the instant of docs/seeds.md §000.5's example lease (lease_until: 2026-07-23T21:14:30Z)
ANCHOR = datetime(2026, 7, 23, 21, 14, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return ANCHOR + timedelta(seconds=seconds)


def call_id(n: int) -> uuid.UUID:
    # stable, distinct-looking ids: the first 8 characters are what people type
    prefixes = ["8f1b7c3d", "2c9e41aa", "5d03f7e1", "a7e4c912", "c3b8d05f", "e91f2b64", "4b6a9d27", "71d2e8c0",
                "93aa5f1e", "b5c7e033", "d8e1a4f9", "0e4f9b72", "6a2d0c5e", "f3b9e7a1", "19c4a6d8", "3e7f0b2c",
                "57ab3e90", "86cd12f4", "ac0e5b37", "c9f2d481", "2f8d6b13", "7c1e9a50"]
    return uuid.UUID(f"{prefixes[n]}-4e2a-4b7c-9d1e-{n:012x}")


class Story:
    """One call and its history, written as the protocol would have written them."""

    def __init__(self, n: int, tool: str, key: str, *, created: float, payload: Any = None, agent: str = "planner-1",
                 session: str = "sess-0412", model: str = "gpt-5.1", provider: str = "openai",
                 deadline: float | None = None, parent: Story | None = None) -> None:
        self.id = call_id(n)
        self.row: dict[str, Any] = dict(
            id=self.id, tool=tool, state="queued", owner_id=None, lease_until=None, fencing_token=0,
            heartbeat_at=None, attempt=0, idempotency_key=key, payload=payload or {"query": key}, result=None,
            error=None, agent_id=agent, session_id=session, model=model, provider=provider, created_at=at(created),
            claimed_at=None, finished_at=None, deadline_at=at(deadline) if deadline is not None else None,
            cancel_requested_at=None, cancel_requested_by=None, cancel_requested_reason=None,
            side_effect_started_at=None, external_request_id=None, retry_approved_by=None, retry_approved_at=None,
            retry_approved_reason=None, terminal_reason=None, completed_despite_cancel=False,
            # a chain (migration 0014): a call made by another is its next stage, in its chain
            parent_id=parent.id if parent else None, chain_id=parent.row["chain_id"] if parent else self.id,
            stage=parent.row["stage"] + 1 if parent else 0)
        self.events: list[dict[str, Any]] = []
        self.event(created, "enqueued", agent, state_to="queued",
                   details={"tool": tool, "idempotency_key": key})

    def event(self, t: float, kind: str, actor: str | None, **fields: Any) -> Story:
        self.events.append(dict(job_id=self.id, at=at(t), kind=kind, actor=actor,
                                fencing_token=fields.pop("token", self.row["fencing_token"]),
                                state_from=fields.pop("state_from", None), state_to=fields.pop("state_to", None),
                                owner_from=fields.pop("owner_from", None), owner_to=fields.pop("owner_to", None),
                                lease_until=fields.pop("lease_until", None), reason=fields.pop("reason", None),
                                request_id=fields.pop("request_id", None), details=fields.pop("details", {})))
        assert not fields, fields
        return self

    def claim(self, t: float, owner: str, lease: float) -> Story:
        previous = self.row["state"]
        prev_owner = self.row["owner_id"]
        prev_lease = self.row["lease_until"]
        self.row.update(state="running", owner_id=owner, fencing_token=self.row["fencing_token"] + 1,
                        attempt=self.row["attempt"] + 1, claimed_at=at(t), heartbeat_at=at(t), lease_until=at(lease))
        details: dict[str, Any] = {"attempt": self.row["attempt"]}
        if prev_lease:
            details["previous_lease_until"] = prev_lease.isoformat()
        return self.event(t, "claimed" if previous == "queued" else "reclaimed", owner, state_from=previous,
                          state_to="running", owner_from=prev_owner, owner_to=owner, lease_until=at(lease),
                          details=details)

    def beat(self, t: float, lease: float) -> Story:
        self.row.update(heartbeat_at=at(t), lease_until=at(lease))
        return self

    def side_effect(self, t: float, request: str) -> Story:
        self.row.update(side_effect_started_at=at(t), external_request_id=request)
        return self.event(t, "tool_request_started", self.row["owner_id"], state_from=self.row["state"],
                          state_to=self.row["state"], owner_from=self.row["owner_id"],
                          owner_to=self.row["owner_id"], lease_until=self.row["lease_until"],
                          details={"external_request_id": request})

    def to(self, t: float, state: str, actor: str | None = None, *, terminal_reason: str | None = None,
           **changes: Any) -> Story:
        previous = self.row["state"]
        prev_lease = self.row["lease_until"]
        self.row.update(state=state, terminal_reason=terminal_reason, **changes)
        if state in TERMINAL_STATES:
            self.row["finished_at"] = at(t)
        if state in (*TERMINAL_STATES, "outcome_unknown"):
            self.row["lease_until"] = None
        details: dict[str, Any] = {"attempt": self.row["attempt"]}
        if prev_lease:
            details["previous_lease_until"] = prev_lease.isoformat()
        if terminal_reason:
            details["terminal_reason"] = terminal_reason
        if self.row["completed_despite_cancel"] and state == "succeeded":
            details["completed_despite_cancel"] = True
        return self.event(t, "state_changed", actor or self.row["owner_id"], state_from=previous, state_to=state,
                          owner_from=self.row["owner_id"], owner_to=self.row["owner_id"],
                          lease_until=self.row["lease_until"], details=details)

    def operator(self, t: float, kind: str, who: str, reason: str, outcome: str, **details: Any) -> Story:
        return self.event(t, kind, who, reason=reason, request_id=uuid.uuid5(self.id, f"{kind}{t}"),
                          state_from=self.row["state"], state_to=self.row["state"],
                          owner_from=self.row["owner_id"], owner_to=self.row["owner_id"],
                          details={"outcome": outcome, **details})


def stories() -> list[Story]:
    s: list[Story] = []
    # healthy calls: the fleet at work
    s.append(Story(0, "web_search", "chat-88:search:1", created=-9, payload={"q": "postgres fencing tokens"})
             .claim(-8, "w-search-1", 12).beat(-2, 18))
    s.append(Story(1, "web_search", "chat-88:search:2", created=-4).claim(-3, "w-search-2", 17))
    s.append(Story(2, "erp_update_order", "order:A-1048:set-status", created=-12,
                   payload={"order": "A-1048", "status": "shipped"})
             .claim(-11, "w-erp-1", 19).side_effect(-10, "erp-req-5530").beat(-1, 29))
    # a browser that heartbeats but is stuck past its stage timeout (alive but useless)
    s.append(Story(3, "browser_session", "chat-91:browse:checkout", created=-95,
                   payload={"url": "https://shop.example/checkout", "goal": "download invoice"})
             .claim(-94, "w-browser-1", -49).beat(-3, 42))
    # a worker that died mid-call: lease expired, not yet reclaimed
    s.append(Story(4, "erp_update_order", "order:A-1050:cancel-line", created=-70, agent="planner-2")
             .claim(-69, "w-erp-2", -39).side_effect(-66, "erp-req-5531").beat(-35, -5))
    # heartbeat late (one beat missed, lease not gone yet)
    s.append(Story(5, "report_export", "report:42:stage:3", created=-40, payload={"report": 42, "stage": 3},
                   deadline=900)
             .claim(-39, "w-report-1", 21).beat(-24, 36))
    # a cancel nobody hears: requested 50 s ago, the lease is still renewed
    s.append(Story(6, "web_search", "chat-77:search:9", created=-61)
             .claim(-60, "w-search-3", -40).beat(-1, 19)
             .operator(-50, "operator_cancel", "alice", "user closed the chat", "applied",
                       seen_state="running", seen_token=1)
             .to(-50, "cancel_requested", "alice", cancel_requested_at=at(-50), cancel_requested_by="alice",
                 cancel_requested_reason="user closed the chat"))
    s[-1].row.update(lease_until=at(19), heartbeat_at=at(-1))
    # payment that timed out after the request was sent: outcome unknown, waits for a human
    s.append(Story(7, "payment_capture", "payment:inv-7:capture", created=-130, agent="billing-agent",
                   payload={"invoice": "inv-7", "amount": "129.00", "currency": "EUR"})
             .claim(-129, "w-pay-1", -99).side_effect(-127, "psp-7781").beat(-105, -75)
             .to(-75, "outcome_unknown", error={"message": "gateway timeout after the request was sent",
                                                "external_request_id": "psp-7781"}))
    s.append(Story(8, "erp_update_order", "order:A-1031:refund", created=-400, agent="billing-agent")
             .claim(-399, "w-erp-3", -369).side_effect(-397, "erp-req-5490")
             .to(-380, "outcome_unknown", error={"message": "ERP status endpoint unavailable"}))
    # a zombie: W1 froze, W2 finished; W1 woke up and was refused
    zombie = (Story(9, "web_search", "chat-80:search:4", created=-60)
              .claim(-59, "w-search-4", -39).event(-58, "tool_request_started", "w-search-4",
                                                   details={"external_request_id": "req-a91"}))
    zombie.row["lease_until"] = at(-39)
    zombie.claim(-30, "w-search-5", -10).to(-24, "succeeded", result={"hits": 10, "by": "w-search-5"})
    zombie.event(-15, "heartbeat_lost", "w-search-4", token=1, details={"reason": "zero_rows"})
    zombie.event(-14, "result_rejected", "w-search-4", token=1, details={"reason": "zero_rows"})
    zombie.event(-14, "receiver_rejected", "w-search-4", token=1,
                 details={"external_request_id": "req-a92", "highest_fence": 2})
    s.append(zombie)
    # a cancel that raced a result: completed despite the cancel request
    s.append(Story(10, "web_search", "chat-81:search:2", created=-140).claim(-139, "w-search-1", -119)
             .operator(-120, "operator_cancel", "bob", "wrong customer", "applied", seen_state="running", seen_token=1)
             .to(-120, "cancel_requested", "bob", cancel_requested_at=at(-120), cancel_requested_by="bob",
                 cancel_requested_reason="wrong customer")
             .to(-119, "succeeded", "w-search-1", result={"hits": 3}, completed_despite_cancel=True))
    # past its chain deadline; used up its attempts
    s.append(Story(11, "erp_update_order", "order:A-1044:set-status", created=-900, deadline=-300)
             .claim(-899, "w-erp-1", -869).to(-869, "queued", "sweeper", owner_id=None)
             .to(-300, "failed", "sweeper", terminal_reason="deadline passed while queued"))
    s.append(Story(12, "web_search", "chat-70:search:1", created=-1500)
             .claim(-1499, "w-search-2", -1479).to(-1470, "queued", "w-search-2", owner_id=None,
                                                   error={"message": "HTTP 503"})
             .claim(-1460, "w-search-3", -1440).to(-1430, "queued", "w-search-3", owner_id=None,
                                                   error={"message": "HTTP 503"})
             .claim(-1420, "w-search-1", -1400).to(-1395, "failed", "w-search-1", terminal_reason="attempts exhausted",
                                                   error={"message": "HTTP 503"}))
    # the report, a chain of persisted stages with their own keys (lineage): each stage made by the one
    # before it, under the chain's deadline (stage 3, above, is the one whose heartbeat is late)
    s.append(Story(13, "report_export", "report:42:stage:1", created=-300, payload={"report": 42, "stage": 1},
                   deadline=900)
             .claim(-299, "w-report-1", -239).to(-250, "succeeded", result={"rows": 120_000}))
    s.append(Story(14, "report_export", "report:42:stage:2", created=-249, payload={"report": 42, "stage": 2},
                   deadline=900, parent=s[-1])
             .claim(-248, "w-report-2", -188).to(-190, "succeeded", result={"file": "s3://exports/42/2.parquet"}))
    report = next(x for x in s if x.row["idempotency_key"] == "report:42:stage:3")
    report.row.update(parent_id=s[-1].id, chain_id=s[-1].row["chain_id"], stage=2)
    # waiting in the queue: stage 4, asked for by stage 3 while it runs
    s.append(Story(15, "report_export", "report:42:stage:4", created=-2, payload={"report": 42, "stage": 4},
                   deadline=900, parent=report))
    s.append(Story(16, "payment_capture", "payment:inv-9:capture", created=-1, agent="billing-agent",
                   payload={"invoice": "inv-9", "amount": "19.90", "currency": "EUR"}))
    # an operator refusal on record: the token had moved on
    s.append(Story(17, "browser_session", "chat-93:browse:login", created=-200)
             .claim(-199, "w-browser-2", -154).claim(-150, "w-browser-3", -105)
             .operator(-148, "operator_mark_terminal", "carol", "looked stuck", "refused", seen_state="running",
                       seen_token=1, refusal="the call changed since you looked", terminal_state="failed")
             .to(-110, "succeeded", result={"logged_in": True}))
    # the support subtree, aborted 20 minutes ago (see fleet_fixture): how its calls ended
    s.append(Story(18, "web_search", "ticket-311:search:1", created=-1330, agent="mailer-1")
             .claim(-1329, "w-search-6", -1269).to(-1290, "succeeded", result={"hits": 4}))
    s.append(Story(19, "browser_session", "ticket-311:browse:crm", created=-1320, agent="mailer-sandbox")
             .claim(-1319, "w-browser-4", -1200)
             .to(-1300, "cancel_requested", "control-plane", cancel_requested_at=at(-1300),
                 cancel_requested_by="control-plane", cancel_requested_reason="the subtree is being aborted")
             .to(-1240, "cancelled", "control-plane", fencing_token=2,
                 terminal_reason="cancel unconfirmed: fenced by the control plane at the end of the window"))
    s.append(Story(20, "erp_update_order", "ticket-311:erp:refund", created=-1302, agent="triage-bot-1")
             .to(-1299, "cancelled", "control-plane",
                 terminal_reason="never started: the subtree is shutting down"))
    return s


# the fleet (docs/seeds.md §003): a working tree, a drain in progress that rolls the ingest tree to its
# second generation (the upgrade path, migration 0018), an abort already reconciled with one grandchild
# that never confirmed it stopped, and an orphan: a scraper still running under a research agent that
# went silent, with the supervisor's proposal to abort it waiting for a human
AGENTS: list[tuple[str, str | None, str, str, float, float | None, float | None]] = [
    # id, parent, kind, state, started, last seen, confirmed stopped
    ("planner-1", None, "planner", "running", -3600, -1, None),
    ("retrieval-1", "planner-1", "retrieval", "running", -3500, -2, None),
    ("code-1", "planner-1", "code", "running", -3400, -1, None),
    ("sandbox-1", "code-1", "sandbox", "running", -3300, -4, None),
    ("review-1", "planner-1", "review", "running", -3200, -3, None),
    ("planner-2", None, "planner", "running", -3000, -2, None),
    ("billing-agent", None, "billing", "running", -2900, -1, None),
    ("ingest-1", None, "ingest", "draining", -2800, -2, None),
    ("crawler-1", "ingest-1", "crawler", "draining", -2700, -41, None),
    ("crawler-2", "ingest-1", "crawler", "draining", -2600, -5, -20),
    ("support-1", None, "support", "terminated", -5000, -1250, -1260),
    ("triage-bot-1", "support-1", "triage", "terminated", -4900, -1255, -1262),
    ("mailer-1", "support-1", "mailer", "terminated", -4800, -1250, -1270),
    ("mailer-sandbox", "mailer-1", "sandbox", "terminated", -4700, -1310, None),
    ("ingest-2", None, "ingest", "running", -75, -1, None),
    ("crawler-3", "ingest-2", "crawler", "running", -74, -2, None),
    ("research-1", None, "research", "running", -2000, -900, None),
    ("scraper-1", "research-1", "scraper", "running", -1900, -3, None),
]
# generation and the agent replaced, where not 1 and none
LINEAGE: dict[str, tuple[int, str]] = {"ingest-2": (2, "ingest-1"), "crawler-3": (2, "crawler-1")}


def _fixed_uuid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"leasectl-demo:{name}")


def fleet_fixture() -> dict[str, list[dict[str, Any]]]:
    def maybe(t: float | None) -> datetime | None:
        return at(t) if t is not None else None

    agents = [dict(id=a, parent_id=p, kind=k, state=st, started_at=at(t0), last_seen_at=maybe(seen),
                   terminated_confirmed_at=maybe(done), generation=LINEAGE.get(a, (1, None))[0],
                   replaces=LINEAGE.get(a, (1, None))[1]) for a, p, k, st, t0, seen, done in AGENTS]
    grants = [
        dict(id=_fixed_uuid("g-sandbox"), agent_id="sandbox-1", kind="credential", resource="vault:prod-db/readonly",
             issued_by="code-1", issued_at=at(-3290), expires_at=at(2400), revoked_at=None, revoked_by=None),
        dict(id=_fixed_uuid("g-review"), agent_id="review-1", kind="file_lock", resource="repo:main/CHANGELOG.md",
             issued_by="planner-1", issued_at=at(-600), expires_at=at(300), revoked_at=None, revoked_by=None),
        dict(id=_fixed_uuid("g-crawler"), agent_id="crawler-1", kind="rate_limit_token", resource="serp-api:60rpm",
             issued_by="ingest-1", issued_at=at(-2690), expires_at=at(900), revoked_at=None, revoked_by=None),
        dict(id=_fixed_uuid("g-mailer"), agent_id="mailer-sandbox", kind="credential", resource="smtp:relay-2",
             issued_by="mailer-1", issued_at=at(-4690), expires_at=at(3600), revoked_at=at(-1230),
             revoked_by="control-plane"),
        dict(id=_fixed_uuid("g-triage"), agent_id="triage-bot-1", kind="queue_reservation",
             resource="queue:tickets/slot-3", issued_by="support-1", issued_at=at(-4890), expires_at=at(-1500),
             revoked_at=None, revoked_by=None),
        dict(id=_fixed_uuid("g-scraper"), agent_id="scraper-1", kind="credential", resource="news-api:key-7",
             issued_by="research-1", issued_at=at(-1890), expires_at=at(1800), revoked_at=None, revoked_by=None),
    ]
    draining = _fixed_uuid("s-ingest")
    aborted = _fixed_uuid("s-support")
    shutdowns = [
        dict(id=draining, root_agent_id="ingest-1", mode="drain", state="draining", requested_by="dana",
             reason="moving the crawlers to the new cluster", requested_at=at(-61), window_seconds=300,
             draining_at=at(-60), aborting_at=None, reconciling_at=None, finished_at=None,
             replacement_agent_id="ingest-2"),
        dict(id=_fixed_uuid("s-scraper"), root_agent_id="scraper-1", mode="abort", state="proposed",
             requested_by="supervisor@ops-1:4121", requested_at=at(-838), window_seconds=60,
             reason=f"orphaned: research-1 is silent since {at(-900):%Y-%m-%d %H:%M:%S} UTC and scraper-1 still runs",
             draining_at=None, aborting_at=None, reconciling_at=None, finished_at=None),
        dict(id=aborted, root_agent_id="support-1", mode="abort", state="terminated", requested_by="alice",
             reason="support bot mailing customers in a loop", requested_at=at(-1301), window_seconds=60,
             draining_at=None, aborting_at=at(-1300), reconciling_at=at(-1240), finished_at=at(-1230)),
    ]
    record = dict(
        id=_fixed_uuid("r-support"), shutdown_id=aborted, written_by="supervisor@ops-1:4121", written_at=at(-1230),
        in_flight=[
            {"job_id": str(call_id(18)), "tool": "web_search", "resolution": "completed", "agent_id": "mailer-1",
             "attempt": 1, "fencing_token": 1},
            {"job_id": str(call_id(19)), "tool": "browser_session", "resolution": "cancel_unconfirmed",
             "agent_id": "mailer-sandbox", "attempt": 1, "fencing_token": 2},
            {"job_id": str(call_id(20)), "tool": "erp_update_order", "resolution": "never_started",
             "agent_id": "triage-bot-1", "attempt": 0, "fencing_token": 0},
        ],
        grants_revoked=[{"grant_id": str(_fixed_uuid("g-mailer")), "agent_id": "mailer-sandbox",
                         "kind": "credential", "resource": "smtp:relay-2", "issued_by": "mailer-1",
                         "revoked_by": "control-plane", "revoked_at": at(-1230).isoformat()}],
        grants_expired=[{"grant_id": str(_fixed_uuid("g-triage")), "agent_id": "triage-bot-1",
                         "kind": "queue_reservation", "resource": "queue:tickets/slot-3", "issued_by": "support-1",
                         "expires_at": at(-1500).isoformat()}],
        children_confirmed=[{"agent_id": a, "parent_id": p, "kind": k, "depth": d, "confirmed_at": at(t).isoformat()}
                            for a, p, k, d, t in (("support-1", None, "support", 0, -1260),
                                                  ("mailer-1", "support-1", "mailer", 1, -1270),
                                                  ("triage-bot-1", "support-1", "triage", 1, -1262))],
        children_unaccounted=[{"agent_id": "mailer-sandbox", "parent_id": "mailer-1", "kind": "sandbox",
                               "depth": 2, "last_seen_at": at(-1310).isoformat()}],
    )
    return {"agents": agents, "grants": grants, "shutdowns": shutdowns, "records": [record]}


def _month_of(at: datetime | str) -> date:
    instant = at if isinstance(at, datetime) else datetime.fromisoformat(at)
    return instant.astimezone(UTC).date().replace(day=1)


def load_fixed_scenario(conn: Conn) -> list[uuid.UUID]:
    """Write the scenario into an empty, migrated database. Needs a superuser session."""
    register_demo_tools(conn)
    made = []
    told = stories()
    with conn.transaction():
        # the history is partitioned by month (migration 0021): the scenario's months get theirs
        # first, as a real history's did when it was written, instead of the default partition
        for month in sorted({_month_of(e["at"]) for story in told for e in story.events}):
            run_one(conn, "admin/create_event_partition", month=month)
        run(conn, "demo/exact_mode", on=True)
        for story in told:
            row = {k: (Jsonb(v) if k in ("payload", "result", "error") and v is not None else v)
                   for k, v in story.row.items()}
            run_one(conn, "demo/insert_call", **row)
            for event in story.events:
                run_one(conn, "demo/insert_event", **{**event, "details": Jsonb(event["details"])})
            made.append(story.id)
        fleet = fleet_fixture()
        for agent in fleet["agents"]:
            run_one(conn, "demo/insert_agent", **agent)
        for grant in fleet["grants"]:
            run_one(conn, "demo/insert_grant", **grant)
        for shutdown in fleet["shutdowns"]:
            run_one(conn, "demo/insert_shutdown", **shutdown)
        for record in fleet["records"]:
            run_one(conn, "demo/insert_record", **{k: Jsonb(v) if isinstance(v, list) else v
                                                   for k, v in record.items()})
        run(conn, "demo/exact_mode", on=False)
    return made
