"""Temporary objects cannot shadow what the database's rules read (migration 0012).

Every refusal the database makes -- each SQLSTATE of class LC raised in `migrations/`, the zero rows
of row level security, the missing privileges -- is written down below as an attack a real login
sends with plain SQL. Each attack is replayed three ways, by the login that sends it:

* as it is;
* after the login created an *empty* temporary table named like every table and catalog any
  function of the schema reads (a guard that reads the shadow finds nothing: no subtree, no
  journal row, no tool);
* after the login created a *lying* one of each: every tool read-only with a thousand attempts,
  every agent running, registered by this login and a child of every other, a forged applied
  approval and claim for every call, a reconciliation record for every shutdown, every table owned
  by this login, every role a superuser named like it.

None may change the answer, and a refused statement changes nothing. Before 0012 the lying replay
requeued a started payment, forged claims and approvals, settled an unknown outcome and terminated
a shutdown without its record; tests/db/test_search_path.py holds the rule that closes it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from tests.db.test_search_path import code_of, relation_references
from tests.helpers import (
    as_login,
    claim,
    enqueue,
    ensure_login,
    expire_lease,
    register_tool,
    register_tree,
    report_unknown,
    request_shutdown,
    start_side_effect,
)

A, B = "lc_shadow_a", "lc_shadow_b"
OPERATOR, SUPERVISOR, BYPASS, AUDITOR = "lc_shadow_op", "lc_shadow_sup", "lc_shadow_bypass", "lc_shadow_aud"
OWNER = "owner"  # the test database's owner (a superuser): the rules that bind even the owner
GROUPS = {A: "leasectl_worker", B: "leasectl_worker", OPERATOR: "leasectl_operator",
          SUPERVISOR: "leasectl_supervisor", BYPASS: "leasectl_supervisor", AUDITOR: "leasectl_auditor"}
SLOW = {"lease_seconds": 30, "heartbeat_seconds": 5, "missed_heartbeats": 2, "jitter_seconds": 5}
TREE = {"planner-1": None, "code-1": "planner-1", "sandbox-1": "code-1"}
FLAVOURS = ["plain", "empty", "lying"]


@pytest.fixture(scope="module")
def logins(pg_server):
    with pg_server.admin() as admin:
        for login, group in GROUPS.items():
            ensure_login(admin, login, group)
        try:  # a control-plane login that row level security does not stop: only the triggers are left
            admin.execute(f"alter role {BYPASS} bypassrls")
        except psycopg.errors.InternalError:  # "tuple concurrently updated": another process did it
            pass
    return GROUPS


class World:
    """The test database with two tools and a small delegation tree, and a session per login."""

    def __init__(self, db) -> None:
        self.db = db
        self._conns: dict[str, Any] = {}

    def conn(self, login: str):
        if login not in self._conns:
            self._conns[login] = self.db.connect() if login == OWNER else as_login(self.db, login)
        return self._conns[login]

    @property
    def admin(self):
        return self.conn(OWNER)

    def close(self) -> None:
        for c in self._conns.values():
            c.close()

    # ------------------------------------------------------------------ situations
    def queued(self, tool: str = "search", agent_id: str | None = None) -> dict:
        return {"id": enqueue(self.admin, tool, agent_id=agent_id)["id"]}

    def running(self, login: str, tool: str = "search") -> dict:
        enqueue(self.admin, tool)
        c = claim(self.conn(login), login, [tool])
        assert c is not None
        return {"id": c["id"], "token": c["fencing_token"], "owner": login, "job": c}

    def started_payment(self, login: str = A) -> dict:
        p = self.running(login, "pay")
        assert start_side_effect(self.conn(login), p["job"], login) is not None
        return p

    def unknown_outcome(self, login: str = A) -> dict:
        p = self.started_payment(login)
        row = report_unknown(self.conn(login), p["job"], login)
        assert row is not None and row["state"] == "outcome_unknown"
        return p

    def grant(self, revoked: bool = False) -> dict:
        g = self.admin.execute(
            "insert into grants (agent_id, kind, resource, issued_by, expires_at) "
            "values ('sandbox-1', 'credential', 'vault:prod', 'code-1', now() + interval '1 hour') returning id"
        ).fetchone()
        if revoked:
            self.admin.execute("update grants set revoked_at = now(), revoked_by = 'control-plane' where id = %s",
                               (g["id"],))
        return {"id": g["id"]}

    def shutdown(self, *states: str) -> dict:
        s = request_shutdown(self.admin, "code-1")
        assert s is not None
        for state in states:
            self.admin.execute("update shutdowns set state = %s where id = %s", (state, s["id"]))
        return {"id": s["id"]}

    def draining(self, agent: str = "code-1") -> None:
        self.admin.execute("update agents set state = 'draining' where id = %s", (agent,))

    def own_tree(self) -> None:
        """a-team and its child a-child, registered by login A (it speaks for a-child's grants)."""
        a = self.conn(A)
        assert a.execute("insert into agents (id, kind) values ('a-team', 'planner') returning id").fetchone()
        assert a.execute("insert into agents (id, parent_id, kind) values ('a-child', 'a-team', 'worker') "
                         "returning id").fetchone()

    def own_grant(self, revoked: bool = False) -> dict:
        self.own_tree()
        g = self.admin.execute(
            "insert into grants (agent_id, kind, resource, issued_by, expires_at) "
            "values ('a-child', 'file_lock', '/tmp/x', 'a-team', now() + interval '1 hour') returning id").fetchone()
        if revoked:
            self.admin.execute("update grants set revoked_at = now(), revoked_by = 'control-plane' where id = %s",
                               (g["id"],))
        return {"id": g["id"]}


@dataclass(frozen=True)
class Refusal:
    name: str
    login: str
    prepare: Callable[[World], dict]
    attack: str            # plain SQL; every relation schema-qualified, so only the rules can be fooled
    expect: str | int      # a SQLSTATE, or 0 (rows)
    journals: bool = False  # an operator statement journals its refusal
    before: tuple[str, ...] = ()  # sent first, each a statement of its own, in the attacker's session


def _an_old_month(w: World, month: str, events: int) -> dict:
    """A month long ended with its partition (migration 0021) and `events` events dated in it (written
    in exact mode by the superuser): what retention's last step is asked to drop."""
    w.admin.execute("select public.leasectl_event_partition_create(%s)", (month,))
    w.admin.execute("set session_replication_role = replica")
    try:
        for _ in range(events):
            w.admin.execute("insert into public.job_events (job_id, at, kind, actor) "
                            "values (gen_random_uuid(), %s::timestamptz + interval '3 days', 'note', 'old')", (month,))
    finally:
        w.admin.execute("set session_replication_role = origin")
    row = w.admin.execute("select count(*) as n, min(id) as first, max(id) as last from public.job_events "
                          "where at >= %s::timestamptz and at < %s::timestamptz + interval '1 month'",
                          (month, month)).fetchone()
    return {"month": month, "rows": row["n"], "first": row["first"], "last": row["last"]}


ARCHIVE_MONTH = ("select * from public.leasectl_archive_month(%(month)s, %(rows)s, %(first)s, %(last)s, "
                 "repeat('a', 64), 'job_events.jsonl.gz', 'alice', 'retention')")


def _queued_for_draining_agent(w: World) -> dict:
    call = w.queued("search", agent_id="code-1")
    w.draining()
    return call


def _operators_own_agent(w: World) -> dict:
    """An agent inside planner-1's subtree that the operator's login registered itself."""
    w.admin.execute("insert into agents (id, parent_id, kind, owner_role) values ('op-agent', 'code-1', 'worker', %s)",
                    (OPERATOR,))
    return {}


def _own_draining(w: World) -> dict:
    w.own_tree()
    w.draining("a-child")
    return {}


def _cancel_requested(w: World) -> dict:
    call = w.running(A)
    w.admin.execute("select * from leasectl_request_cancel(%s, 'running', %s, 'alice', 'stop')", (call["id"], call["token"]))
    return call


def _cancelled_chain(w: World) -> dict:
    """A running call of login A whose chain has a cancel request."""
    call = w.running(A)
    w.admin.execute("select * from leasectl_request_cancel(%s, 'running', %s, 'alice', 'stop the chain')",
                    (call["id"], call["token"]))
    return call


def _paused_queued(w: World) -> dict:
    """A queued call of a tool an operator paused (migration 0016)."""
    call = w.queued()
    w.admin.execute("select * from leasectl_pause_tool('search', 'alice', 'vendor down')")
    return {**call, "who": A}


def _capped_full(w: World) -> dict:
    """A queued call of a tool capped at one call, which another login runs."""
    w.admin.execute("update tools set max_running = 1 where name = 'search'")
    w.running(B)
    return {**w.queued(), "who": A}


def _held(w: World) -> dict:
    """A running call of login A under a hold of 5 s."""
    w.admin.execute("update tools set max_hold_seconds = 5 where name = 'search'")
    return w.running(A)


CLAIM_AS = ("update public.tool_jobs set state = 'running', owner_id = %(who)s, fencing_token = fencing_token + 1, "
            "lease_until = now() + interval '1 minute', attempt = attempt + 1, claimed_at = now() where id = %(id)s")

REFUSALS = [
    # ---- the state machine (LCS)
    Refusal("requeue one's own started payment", A, lambda w: w.started_payment(A),
            "update public.tool_jobs set state = 'queued', owner_id = null, lease_until = null where id = %(id)s",
            "LCS07"),
    Refusal("reclaim an expired started payment", B,
            lambda w: (p := w.started_payment(A), expire_lease(w.admin, p["id"]), {**p, "who": B})[-1],
            CLAIM_AS, "LCS07"),
    Refusal("erase the mark of a started request", A, lambda w: w.started_payment(A),
            "update public.tool_jobs set side_effect_started_at = null where id = %(id)s", "LCS07"),
    Refusal("finish a queued call nobody ran", A, lambda w: w.queued(),
            "update public.tool_jobs set state = 'succeeded' where id = %(id)s", "LCS01"),
    Refusal("lower a fencing token", A, lambda w: w.running(A),
            "update public.tool_jobs set fencing_token = 0 where id = %(id)s", "LCS02"),
    Refusal("reopen a finished call (owner)", OWNER,
            lambda w: (p := w.running(A), w.admin.execute("update tool_jobs set state = 'succeeded' where id = %s",
                                                           (p["id"],)), p)[-1],
            "update public.tool_jobs set state = 'queued' where id = %(id)s", "LCS03"),
    Refusal("reopen a finished call", A,
            lambda w: (p := w.running(A), w.admin.execute("update tool_jobs set state = 'succeeded' where id = %s",
                                                           (p["id"],)), p)[-1],
            "update public.tool_jobs set state = 'queued' where id = %(id)s", 0),
    Refusal("approve one's own retry (owner)", OWNER, lambda w: w.unknown_outcome(A),
            "update public.tool_jobs set state = 'queued', retry_approved_by = owner_id, retry_approved_at = now() "
            "where id = %(id)s", "LCS04"),
    Refusal("approve the executor's retry through the operator statement", OPERATOR, lambda w: w.unknown_outcome(A),
            "select * from public.leasectl_approve_retry(%(id)s, 'outcome_unknown', %(token)s, %(owner)s, 'mine')",
            0, journals=True),
    Refusal("change a call's tool (owner)", OWNER, lambda w: w.running(A),
            "update public.tool_jobs set tool = 'pay' where id = %(id)s", "LCS05"),
    Refusal("change a call's tool", A, lambda w: w.running(A),
            "update public.tool_jobs set tool = 'pay' where id = %(id)s", "42501"),
    Refusal("take a call under a live lease (owner)", OWNER, lambda w: {**w.running(A), "who": "w9"},
            CLAIM_AS, "LCS06"),
    Refusal("take a call under another's live lease", B, lambda w: {**w.running(A), "who": B}, CLAIM_AS, 0),
    Refusal("claim in another login's name", A, lambda w: {**w.queued(), "who": B}, CLAIM_AS, "LCS08"),
    Refusal("settle an unknown outcome past row level security", BYPASS, lambda w: w.unknown_outcome(A),
            "update public.tool_jobs set state = 'failed', terminal_reason = 'settled' where id = %(id)s", "LCS09"),
    Refusal("settle one's own unknown outcome", A, lambda w: w.unknown_outcome(A),
            "update public.tool_jobs set state = 'succeeded' where id = %(id)s", 0),
    Refusal("settle an unknown outcome by hand", OPERATOR, lambda w: w.unknown_outcome(A),
            "update public.tool_jobs set state = 'succeeded' where id = %(id)s", "42501"),
    Refusal("rewrite a queued call in place", A, lambda w: w.queued(),
            "update public.tool_jobs set attempt = 999 where id = %(id)s", "LCS10"),
    Refusal("forge a request start on a queued call", A, lambda w: w.queued("pay"),
            "update public.tool_jobs set side_effect_started_at = now(), external_request_id = 'forged' "
            "where id = %(id)s", "LCS10"),
    Refusal("finish another worker's live call", B, lambda w: w.running(A),
            "update public.tool_jobs set state = 'succeeded', result = '{}', lease_until = null where id = %(id)s", 0),
    # ---- the journal (LCH)
    Refusal("edit the history (owner)", OWNER, lambda w: w.queued(),
            "update public.job_events set kind = 'edited' where job_id = %(id)s", "LCH01"),
    Refusal("edit the history", A, lambda w: w.queued(),
            "update public.job_events set kind = 'edited' where job_id = %(id)s", "42501"),
    Refusal("forge a claim", A, lambda w: w.queued(),
            "insert into public.job_events (job_id, kind, actor, fencing_token) "
            "values (%(id)s, 'claimed', 'ghost', 1)", "LCH02"),
    Refusal("forge a claim with its ownership columns", A, lambda w: w.queued(),
            "insert into public.job_events (job_id, kind, actor, fencing_token, owner_to) "
            "values (%(id)s, 'claimed', 'ghost', 1, 'ghost')", "42501"),
    Refusal("forge an approval", A, lambda w: w.unknown_outcome(A),
            "insert into public.job_events (job_id, kind, actor, fencing_token, details) "
            "values (%(id)s, 'operator_approve_retry', 'alice', %(token)s, '{\"outcome\": \"applied\"}')", "LCH02"),
    Refusal("forge an approval spelled without its underscore", A, lambda w: w.unknown_outcome(A),
            "insert into public.job_events (job_id, kind, actor, fencing_token, details) "
            "values (%(id)s, 'operatorapprove_retry', %(owner)s, %(token)s, '{\"outcome\": \"applied\"}')",
            "LCH02"),
    Refusal("pre-occupy the journal's ids", A, lambda w: w.running(A),
            "insert into public.job_events (id, job_id, kind, actor, fencing_token) overriding system value "
            "values ((select max(id) + 1 from public.job_events), %(id)s, 'ownership_unknown', %(owner)s, %(token)s)",
            "42501"),
    Refusal("report a lost heartbeat in another's name", A, lambda w: {**w.running(B), "who": B},
            "insert into public.job_events (job_id, kind, actor, fencing_token) "
            "values (%(id)s, 'heartbeat_lost', %(who)s, %(token)s)", "LCH03"),
    Refusal("report on a call never held", A, lambda w: {**w.running(B), "who": A},
            "insert into public.job_events (job_id, kind, actor, fencing_token) "
            "values (%(id)s, 'result_rejected', %(who)s, %(token)s)", "LCH03"),
    # ---- the fleet (LCF)
    Refusal("a shutdown asked from inside the subtree", OPERATOR, _operators_own_agent,
            "select * from public.leasectl_request_shutdown('planner-1', 'drain', 'op-agent', 'from inside', 30)",
            "LCF01"),
    Refusal("a shutdown inserted by hand", OPERATOR, lambda w: {},
            "insert into public.shutdowns (root_agent_id, mode, requested_by, reason, window_seconds) "
            "values ('planner-1', 'drain', 'alice', 'by hand', 30)", "42501"),
    Refusal("a shutdown asked with no name", OPERATOR, lambda w: {},
            "select * from public.leasectl_request_shutdown('planner-1', 'drain', ' ', 'nameless', 30)", "22023"),
    Refusal("an operator decision with no name", OPERATOR, lambda w: w.queued(),
            "select * from public.leasectl_request_cancel(%(id)s, 'queued', 0, '', 'nameless')", "22023"),
    Refusal("forge a drain in the fleet journal", A, lambda w: {},
            "insert into public.fleet_events (kind, actor, agent_id, reason) "
            "values ('shutdown_requested', 'oscar', 'planner-1', 'forged')", "42501"),
    Refusal("forge a drain in the fleet journal as an operator", OPERATOR, lambda w: {},
            "insert into public.fleet_events (kind, actor, agent_id, reason) "
            "values ('shutdown_requested', 'oscar', 'planner-1', 'forged')", "42501"),
    Refusal("skip a shutdown's phases", SUPERVISOR, lambda w: w.shutdown(),
            "update public.shutdowns set state = 'terminated', finished_at = now() where id = %(id)s", "LCF02"),
    Refusal("terminate a shutdown without its record", SUPERVISOR, lambda w: w.shutdown("draining", "reconciling"),
            "update public.shutdowns set state = 'terminated', finished_at = now() where id = %(id)s", "LCF03"),
    Refusal("revoke a grant below another login's agents", A, lambda w: w.grant(),
            "update public.grants set revoked_at = now(), revoked_by = 'planner-1' where id = %(id)s", 0),
    Refusal("revoke by writing another ancestor's name", A, lambda w: w.own_grant(),
            "update public.grants set revoked_at = now(), revoked_by = 'planner-1' where id = %(id)s", "LCF04"),
    Refusal("revoke as the control plane", A, lambda w: w.own_grant(),
            "update public.grants set revoked_at = now(), revoked_by = 'control-plane' where id = %(id)s", "LCF04"),
    Refusal("revoke through the shared SQL in an ancestor's name", A, lambda w: w.grant(),
            "update public.grants g set revoked_at = now(), revoked_by = 'code-1' "
            "where g.id = %(id)s and public.leasectl_may_revoke(g.agent_id, 'code-1')", 0),
    Refusal("rewrite a revoked grant", A, lambda w: w.own_grant(revoked=True),
            "update public.grants set revoked_by = 'a-team' where id = %(id)s", "LCF04"),
    Refusal("issue a grant already revoked", A, lambda w: (w.own_tree(), {})[-1],
            "insert into public.grants (agent_id, kind, resource, issued_by, expires_at, revoked_at, revoked_by) "
            "values ('a-child', 'credential', 'vault://root', 'a-team', now() + interval '1 day', now(), "
            "'control-plane')", "LCF04"),
    Refusal("issue a grant in the control plane's name", A, lambda w: (w.own_tree(), {})[-1],
            "insert into public.grants (agent_id, kind, resource, issued_by, expires_at) "
            "values ('a-child', 'credential', 'vault://root', 'control-plane', now() + interval '1 day')", "LCF04"),
    Refusal("issue a grant to a draining agent", A, lambda w: (w.own_tree(), w.draining("a-child"), {})[-1],
            "insert into public.grants (agent_id, kind, resource, issued_by, expires_at) "
            "values ('a-child', 'credential', 'vault://x', 'a-team', now() + interval '1 day')", "LCF07"),
    Refusal("confirm another login's agent stopped", A, lambda w: (w.draining("code-1"), {})[-1],
            "update public.agents set terminated_confirmed_at = now() where id = 'code-1'", 0),
    Refusal("confirm one's own running agent stopped", A, lambda w: (w.own_tree(), {})[-1],
            "update public.agents set terminated_confirmed_at = now() where id = 'a-child'", "LCF05"),
    Refusal("register an agent born terminated", A, lambda w: {},
            "insert into public.agents (id, kind, state) values ('born-dead', 'worker', 'terminated')", "LCF05"),
    Refusal("register a child under a draining agent by plain INSERT", A, lambda w: (w.draining("code-1"), {})[-1],
            "insert into public.agents (id, parent_id, kind) values ('late-kid', 'code-1', 'worker')", "LCF07"),
    Refusal("claim and write a result at once", A, lambda w: {**w.queued(), "who": A},
            "update public.tool_jobs set state = 'running', owner_id = %(who)s, fencing_token = fencing_token + 1, "
            "attempt = attempt + 1, lease_until = now() + interval '1 minute', result = '{\"forged\": 1}' "
            "where id = %(id)s", "LCS11"),
    Refusal("claim with an infinite lease", A, lambda w: {**w.queued(), "who": A},
            "update public.tool_jobs set state = 'running', owner_id = %(who)s, fencing_token = fencing_token + 1, "
            "attempt = attempt + 1, lease_until = 'infinity' where id = %(id)s", "23514"),
    Refusal("claim with the token at the top of bigint", A, lambda w: {**w.queued(), "who": A},
            "update public.tool_jobs set state = 'running', owner_id = %(who)s, fencing_token = 9223372036854775807, "
            "attempt = attempt + 1, lease_until = now() + interval '1 minute' where id = %(id)s", "LCS02"),
    Refusal("claim from a transaction held open", A, lambda w: {**w.queued(), "who": A},
            CLAIM_AS, "LCS12", before=("begin", "select pg_sleep(2.2)")),
    Refusal("reset one's own attempts", A, lambda w: w.running(A),
            "update public.tool_jobs set attempt = 0 where id = %(id)s", "LCS11"),
    Refusal("a finish time on a running call", A, lambda w: w.running(A),
            "update public.tool_jobs set finished_at = '2000-01-01' where id = %(id)s", "LCS11"),
    Refusal("skip an agent's shutdown", SUPERVISOR, lambda w: {},
            "update public.agents set state = 'terminated' where id = 'planner-1'", "LCF05"),
    Refusal("edit the fleet journal (owner)", OWNER, lambda w: {},
            "update public.fleet_events set reason = 'edited'", "LCF06"),
    Refusal("a new call for a draining agent by plain INSERT", A, _own_draining,
            "insert into public.tool_jobs (idempotency_key, payload, tool, agent_id) "
            "values (gen_random_uuid()::text, '{}', 'search', 'a-child')", "LCF07"),
    # ---- the third walk (0014, 0015)
    Refusal("a new call in the name of an agent another login registered", A, lambda w: {},
            "insert into public.tool_jobs (idempotency_key, payload, tool, agent_id) "
            "values (gen_random_uuid()::text, '{}', 'search', 'planner-1')", "LCF08"),
    Refusal("mark one's own payment started and requeue it in one statement", A, lambda w: w.running(A, "pay"),
            "update public.tool_jobs set state = 'queued', owner_id = null, lease_until = null, "
            "side_effect_started_at = now(), external_request_id = 'pay-1' where id = %(id)s", "LCS07"),
    Refusal("finish one's own call in an operator's words", A, lambda w: w.running(A),
            "update public.tool_jobs set state = 'succeeded', result = '{}', "
            "terminal_reason = 'marked succeeded by alice: verified' where id = %(id)s", "LCS11"),
    Refusal("complete one's own call despite a cancel nobody asked for", A, lambda w: w.running(A),
            "update public.tool_jobs set completed_despite_cancel = true where id = %(id)s", "LCS11"),
    Refusal("a lease until the year 9000", A, lambda w: w.running(A),
            "update public.tool_jobs set lease_until = '9000-01-01' where id = %(id)s", "23514"),
    Refusal("a running call with no lease", A, lambda w: w.running(A),
            "update public.tool_jobs set lease_until = null where id = %(id)s", "23514"),
    Refusal("a check recorded under an old token", A, lambda w: w.running(A),
            "update public.tool_jobs set check_found = 'not_done', check_token = fencing_token - 1, "
            "checked_at = now() where id = %(id)s", "LCS14"),
    # ---- the fleet's last gaps (0018)
    Refusal("a new generation of an agent another login registered (its queued calls would move)", A,
            lambda w: {}, "insert into public.agents (id, kind, replaces) "
            "values (gen_random_uuid()::text, 'planner', 'planner-1')", "LCF09"),
    Refusal("a shutdown proposed for another login's agent", A, lambda w: {},
            "select * from public.leasectl_propose_shutdown('planner-1', 'abort', 'not mine')", "LCF09"),
    Refusal("claim by hand a call of a paused tool", A, _paused_queued, CLAIM_AS, "LCS15"),
    Refusal("claim by hand past the tool's max_running", A, _capped_full, CLAIM_AS, "LCS15"),
    Refusal("renew a lease past the call's hold", A, _held,
            "update public.tool_jobs set lease_until = now() + interval '1 minute', heartbeat_at = now() "
            "where id = %(id)s", "23514"),
    Refusal("lengthen one's own hold", A, _held,
            "update public.tool_jobs set hold_until = hold_until + interval '1 hour' where id = %(id)s", "42501"),
    Refusal("a stage enqueued by plain INSERT after its chain's cancel", A, _cancelled_chain,
            "insert into public.tool_jobs (idempotency_key, payload, tool, parent_id) "
            "values (gen_random_uuid()::text, '{}', 'search', %(id)s)", "LCS13"),
    Refusal("a report of 10 MB in the journal", A, lambda w: w.running(A),
            "insert into public.job_events (job_id, kind, actor, fencing_token, details) "
            "select %(id)s, 'ownership_unknown', session_user, %(token)s, "
            "jsonb_build_object('x', (select string_agg(md5(g::text), '') from generate_series(1, 330000) g))",
            "23514"),
    Refusal("an operator named by a zero-width space", OPERATOR, lambda w: w.queued(),
            "select * from public.leasectl_request_cancel(%(id)s, 'queued', 0, E'\u200b', 'nameless')", "23514"),
    # ---- the fourth walk
    Refusal("a claim that sleeps inside one statement to date itself back", A, lambda w: {**w.queued(), "who": A},
            "do $$ begin perform pg_sleep(2.2); update public.tool_jobs set state = 'running', owner_id = '"
            + A + "', fencing_token = fencing_token + 1, lease_until = now() + interval '1 minute', "
            "attempt = attempt + 1 where idempotency_key = (select idempotency_key from public.tool_jobs "
            "where state = 'queued' order by created_at desc limit 1); end $$", "LCS12"),
    Refusal("an operator enqueues through the chain form", OPERATOR, lambda w: {},
            "select * from public.leasectl_enqueue('search', gen_random_uuid()::text, '{}', null, null, null, null, "
            "null, null, null, null, null)", "42501"),
    Refusal("the control plane erases a cancel request", SUPERVISOR, _cancel_requested,
            "update public.tool_jobs set cancel_requested_at = null, cancel_requested_by = null, "
            "cancel_requested_reason = null where id = %(id)s", "LCS13"),
    Refusal("a terminal reason of 67 KB", A, lambda w: w.running(A),
            "update public.tool_jobs set state = 'failed', terminal_reason = repeat('x', 67000) where id = %(id)s",
            "23514"),
    # ---- the fifth walk
    Refusal("fail a queued call one never claimed", A, lambda w: w.queued(),
            "update public.tool_jobs set state = 'failed' where id = %(id)s", "LCS10"),
    Refusal("cancel one's own running call with no cancel asked", A, lambda w: w.running(A),
            "update public.tool_jobs set state = 'cancelled' where id = %(id)s", "LCS11"),
    Refusal("an unknown outcome with no request sent", A, lambda w: w.running(A),
            "update public.tool_jobs set state = 'outcome_unknown', lease_until = null where id = %(id)s", "LCS11"),
    Refusal("finish one's call from a transaction opened long before", A, lambda w: w.running(A),
            "update public.tool_jobs set state = 'succeeded', result = '{}' where id = %(id)s", "LCS12",
            before=("begin", "select pg_sleep(2.2)")),
    # ---- the sixth walk
    Refusal("ask for a cancel of one's own call", A, lambda w: w.running(A),
            "update public.tool_jobs set state = 'cancel_requested' where id = %(id)s", "LCS11"),
    Refusal("write an error on one's running call", A, lambda w: w.running(A),
            "update public.tool_jobs set error = '{\"unchecked_request\": \"R9\"}' where id = %(id)s", "LCS11"),
    # ---- the seventh walk
    Refusal("a result on a running call", A, lambda w: w.running(A),
            "update public.tool_jobs set result = '{\"paid\": \"by a\"}' where id = %(id)s", "LCS11"),
    Refusal("an ending in an operator's words, capitalised", A, lambda w: w.running(A),
            "update public.tool_jobs set state = 'failed', terminal_reason = ' Marked failed by alice' "
            "where id = %(id)s", "LCS11"),
    Refusal("a request id with no start", A, lambda w: w.running(A),
            "update public.tool_jobs set external_request_id = 'fake' where id = %(id)s", "LCS07"),
    Refusal("two starts in one transaction", A, lambda w: w.running(A, "pay"),
            "update public.tool_jobs set side_effect_started_at = clock_timestamp(), external_request_id = 'r-2' "
            "where id = %(id)s", "LCS07",
            before=("begin", "update public.tool_jobs set side_effect_started_at = now(), external_request_id = 'r-1' "
                             "where state = 'running' and tool = 'pay' and owner_id = session_user")),
    Refusal("a shutdown window of NaN", OPERATOR, lambda w: {},
            "select * from public.leasectl_request_shutdown('planner-1', 'drain', 'alice', 'nan', 'NaN')", "23514"),
    Refusal("claim a draining agent's call by hand", A, lambda w: {**_queued_for_draining_agent(w), "who": A},
            CLAIM_AS, "LCF07"),
    # ---- retention's last step (0021): only what was archived, counted, of a month that ended
    Refusal("drop a month that has no partition (owner)", OWNER,
            lambda w: {"month": "2001-01-01", "rows": 0, "first": None, "last": None}, ARCHIVE_MONTH, "LCR03"),
    Refusal("drop a month that is not what was archived (owner)", OWNER,
            lambda w: {**_an_old_month(w, "2001-02-01", 1), "rows": 10_000}, ARCHIVE_MONTH, "LCR01"),
    Refusal("drop a month the metric rollup has not counted (owner)", OWNER,
            lambda w: _an_old_month(w, "2001-03-01", 1), ARCHIVE_MONTH, "LCR02"),
    # ---- privileges
    Refusal("the auditor writes", AUDITOR, lambda w: w.queued(),
            "update public.tool_jobs set state = 'failed' where id = %(id)s", "42501"),
    Refusal("an operator updates a call directly", OPERATOR, lambda w: w.running(A),
            "update public.tool_jobs set state = 'cancelled' where id = %(id)s", "42501"),
]


# ------------------------------------------------------------------------------- shadows


def shadowed_relations(conn) -> list[tuple[str, str]]:
    """(schema, name) of every table and catalog any function of the schema reads, and of every
    table of the schema: what a login would shadow to fool a guard."""
    relations = {r["relname"]: r["nspname"] for r in conn.execute(
        "select c.relname, n.nspname from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname in ('public', 'pg_catalog') and c.relkind in ('r', 'v', 'm', 'p', 'f')").fetchall()}
    read: set[str] = set()
    for row in conn.execute("select prosrc from pg_catalog.pg_proc where pronamespace = 'public'::regnamespace"):
        read.update(name for name, _ in relation_references(code_of(row["prosrc"]), set(relations)))
    read.update(name for name, schema in relations.items() if schema == "public")
    return sorted((relations[name], name) for name in read)


# what each lie says, column by column; a column not named copies the real row's (or is null)
FORGED_KINDS = ("(values ('operator_approve_retry', 'queued'), ('operator_mark_terminal', 'succeeded'), "
                "('operator_mark_terminal', 'failed'), ('claimed', 'running'), ('reclaimed', 'running')) "
                "as f(kind, state_to)")
LIES: dict[str, tuple[str, dict[str, str]]] = {
    "tools": ("public.tools src", {"side_effect": "'read_only'", "max_attempts": "1000"}),
    "agents": ("(select a.*, p.id as lie_parent from public.agents a join public.agents p on p.id <> a.id) src",
               {"parent_id": "src.lie_parent", "state": "'running'", "owner_role": "session_user"}),
    "job_events": (f"public.tool_jobs j cross join {FORGED_KINDS}",
                   {"id": "-row_number() over ()", "job_id": "j.id", "at": "now()", "kind": "f.kind",
                    "actor": "case when f.kind like 'operator%' then 'alice' else session_user end",
                    "fencing_token": "j.fencing_token", "state_from": "'outcome_unknown'", "state_to": "f.state_to",
                    "owner_to": "session_user", "details": "'{\"outcome\": \"applied\"}'",
                    "db_role": "session_user"}),
    "reconciliation_records": ("public.shutdowns s",
                               {"id": "gen_random_uuid()", "shutdown_id": "s.id", "written_by": "'control-plane'",
                                "written_at": "now()"}),
    "pg_class": ("pg_catalog.pg_class src",
                 {"relowner": "(select r.oid from pg_catalog.pg_roles r where r.rolname = current_user)"}),
    "pg_roles": ("pg_catalog.pg_roles src", {"rolname": "current_user", "rolsuper": "true"}),
}


def create_shadows(conn, flavour: str) -> list[str]:
    """As the login of `conn`: a temporary table named like each relation a guard may read. Returns
    the names shadowed (with rows, for the lying flavour)."""
    made = []
    for schema, name in shadowed_relations(conn):
        columns = conn.execute(
            "select a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) as type "
            "from pg_catalog.pg_attribute a "
            "where a.attrelid = pg_catalog.to_regclass(%s) and a.attnum > 0 and not a.attisdropped order by a.attnum",
            (f"{schema}.{name}",)).fetchall()
        names = [c["attname"] for c in columns]
        conn.execute(f'create temporary table "{name}" ('
                     + ", ".join(f'"{c["attname"]}" {c["type"]}' for c in columns) + ")")
        made.append(name)
        if flavour != "lying":
            continue
        source, overrides = LIES.get(name, (f"{schema}.{name} src", {}))
        copies = source.endswith(" src")
        select = ", ".join(overrides.get(n, f'src."{n}"' if copies else "null") for n in names)
        try:
            with conn.transaction():
                conn.execute(f'insert into pg_temp."{name}" select {select} from {source}')
        except psycopg.errors.InsufficientPrivilege:
            pass  # a relation this login may not read: the empty shadow stays
    return made


# ------------------------------------------------------------------------------- the replay


def fingerprint(admin, journals: bool) -> str:
    parts = []
    for table in ("tools", "tool_jobs", "agents", "grants", "shutdowns", "reconciliation_records"):
        parts.append(admin.execute(f"select coalesce(string_agg(t::text, ',' order by t::text), '') as s "
                                   f"from public.{table} t").fetchone()["s"])
    if not journals:
        for table in ("job_events", "fleet_events"):
            parts.append(str(admin.execute(f"select count(*) as n from public.{table}").fetchone()["n"]))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def answer(conn, statement: str, params: dict) -> str | int:
    try:
        cur = conn.execute(statement, params)
    except psycopg.Error as exc:
        return exc.sqlstate or "?"
    return len(cur.fetchall()) if cur.description else cur.rowcount


@pytest.fixture
def world(db, logins) -> Iterator[World]:
    w = World(db)
    register_tool(w.admin, "search", "read_only", **SLOW)
    register_tool(w.admin, "pay", "mutating_unverifiable", **SLOW)
    register_tree(w.admin, TREE)
    yield w
    w.close()


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.name for r in REFUSALS])
def test_every_refusal_holds_whatever_the_login_shadows(world, refusal, flavour):
    params = refusal.prepare(world)
    attacker = world.conn(refusal.login)
    if flavour != "plain":
        shadows = create_shadows(attacker, flavour)
        assert {"tools", "agents", "job_events", "pg_class", "pg_roles"} <= set(shadows)
    before = fingerprint(world.admin, refusal.journals)
    for statement in refusal.before:
        attacker.execute(statement)
    got = answer(attacker, refusal.attack, params)
    if refusal.before:
        attacker.execute("rollback")
    assert got == refusal.expect, f"{refusal.name} ({flavour}): expected {refusal.expect!r}, got {got!r}"
    assert fingerprint(world.admin, refusal.journals) == before, f"{refusal.name} ({flavour}) changed something"


def test_the_lying_shadows_do_lie(world):
    """The replay above means something only if the shadows tell the guards what an attacker wants."""
    p = world.started_payment(A)
    a = world.conn(A)
    create_shadows(a, "lying")
    assert a.execute("select side_effect from tools where name = 'pay'").fetchone()["side_effect"] == "read_only"
    assert a.execute("select count(*) as n from job_events where job_id = %s and kind = 'claimed' "
                     "and owner_to = session_user", (p["id"],)).fetchone()["n"] >= 1
    assert a.execute("select rolsuper from pg_roles limit 1").fetchone()["rolsuper"] is True
    owner = a.execute("select pg_get_userbyid(relowner) as o from pg_class where relname = 'job_events'").fetchone()
    assert owner["o"] == A


def test_every_refusal_code_of_the_schema_is_replayed():
    raised = set()
    for path in sorted((__import__("pathlib").Path(__file__).resolve().parents[2] / "migrations").glob("*.sql")):
        raised.update(re.findall(r"errcode = '(LC[A-Z]\d\d)'", path.read_text()))
    replayed = {r.expect for r in REFUSALS if isinstance(r.expect, str)}
    assert raised, "the migrations raise refusals of class LC"
    assert sorted(raised - replayed) == [], "every refusal of the schema has an attack in REFUSALS"
    assert {r.login for r in REFUSALS} >= {A, B, OPERATOR, SUPERVISOR, AUDITOR, OWNER}, "as each login"
