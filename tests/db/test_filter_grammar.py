"""One filter grammar: every key of console/core/filters.py selects the same calls in
the database (queries/views/jobs.sql: the Calls screen, `leasectl jobs`), in memory (`matches`:
Triage and Approvals), through `leasectl jobs --where`, through a bulk action's `--where` (its
snapshot), and in the past (queries/audit/jobs_at.sql: `jobs --at`). The console's `/` is held to
the same calls by tests/tui/test_filter_keys.py.

`payload:` is the one key the screens that filter in memory do not take (a JobSummary carries no
payload): its calls are held to the reference reading of tests/db/test_payload_filter.py instead of
`matches`, everywhere else alike."""

from __future__ import annotations

import json

import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from console.core.filters import KEYS, parse_filter, parse_selection
from console.db import bulk, reads
from console.db.audit import jobs_at
from console.db.connect import run_one
from console.operator.cli import app
from console.shared.errors import BadInput
from tests.db.test_payload_filter import reference_match
from tests.helpers import (
    FAST,
    claim,
    enqueue,
    expire_lease,
    register_tool,
    report_unknown,
    start_side_effect,
    wait_until,
)

# one filter per key of the grammar (and bare words): each must select a non-empty, proper subset
FILTERS = {
    "state": "state:running",
    "tool": "tool:erp",
    "owner": "owner:w-erp",
    "agent": "agent:planner-7",
    "key": "key:report:42:",
    "id": None,  # an id prefix of one call: filled in below
    "health": "health:outcome_unknown",
    "model": "model:gpt-5.1",
    "provider": "provider:anthropic",
    "class": "class:unverifiable",
    "chain": None,  # the chain of report:42:stage:1 (itself and the call it made): filled in below
    "parent": None,  # the call report:42:stage:1 made
    "session": "session:s-9",
    "trace": "trace:4BF92F35",  # a prefix, in capitals: trace ids are lower-case hex
    "priority": "priority:5",
    "payload": "payload:$.invoice=INV-7",  # erp:1's invoice exactly, not pay:1's INV-70
    "payload text": "payload:inv-7",  # both, in any case
    "payload and another key": "tool:pay payload:inv-7",
    "bare state": "queued",
    "bare health": "lease_expired",
    "health past_deadline": "health:past_deadline",
    "bare past_deadline": "past_deadline",
}
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def enqueue_with(conn, tool: str, key: str, **chain: object) -> str:
    """worker/enqueue.sql with its chain parameters (parent_id, priority, trace_id, ...)."""
    row = run_one(conn, "worker/enqueue", tool=tool, idempotency_key=key, payload=Jsonb(chain.pop("payload", {"n": 1})),
                  agent_id=chain.pop("agent_id", None), session_id=chain.pop("session_id", None),
                  deadline_at=chain.pop("deadline_at", None), model=chain.pop("model", None),
                  provider=chain.pop("provider", None), **chain)
    assert row is not None, f"{key} was refused"
    return str(row["id"])


@pytest.fixture
def calls(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", lease_seconds=60, heartbeat_seconds=5)
        register_tool(conn, "erp", "mutating_verifiable", lease_seconds=60, heartbeat_seconds=5)
        register_tool(conn, "pay", "mutating_unverifiable", **FAST)
        register_tool(conn, "quick", "read_only", **FAST)
        register_tool(conn, "late", "read_only", lease_seconds=60, heartbeat_seconds=5)
        ids = [enqueue(conn, "search", "report:42:stage:1", agent_id="planner-7", model="gpt-5.1",
                       provider="openai")["id"],
               enqueue(conn, "search", "report:42:stage:2", agent_id="planner-7", model="claude-4",
                       provider="anthropic", session_id="s-9")["id"],
               enqueue_with(conn, "erp", "erp:1", agent_id="ops-1", model="gpt-5.1", provider="openai", priority=5,
                            payload={"invoice": "INV-7", "amount": 120}),
               enqueue_with(conn, "pay", "pay:1", agent_id="ops-1", model="claude-4", provider="anthropic",
                            trace_id=TRACE, payload={"invoice": "INV-70", "amount": 120}),
               enqueue(conn, "quick", "quick:1", model="gpt-5.1", provider="openai")["id"]]
        deadline = conn.execute("select now() + interval '1.5 seconds' as t").fetchone()["t"]
        ids.append(enqueue_with(conn, "late", "late:1", deadline_at=deadline))
        claim(conn, "w-search", ["search"])          # report:42:stage:1 running, healthy
        # the next stage of report:42:stage:1, made while it runs: its chain, stage 1, queued
        ids.append(enqueue_with(conn, "search", "report:42:stage:1:next", parent_id=ids[0]))
        claim(conn, "w-erp", ["erp"])                # erp:1 running, healthy
        claim(conn, "w-late", ["late"])              # late:1 running, then past its deadline
        paid = claim(conn, "w-pay", ["pay"])         # pay:1 -> outcome_unknown
        start_side_effect(conn, paid, "w-pay")
        report_unknown(conn, paid, "w-pay")
        claim(conn, "w-quick", ["quick"])            # quick:1 -> lease expired, not swept
        expire_lease(conn, ids[4])
        wait_until(lambda: conn.execute("select now() > %s as past", (deadline,)).fetchone()["past"],
                   what="late:1's deadline to pass")
        yield conn, ids


def expected_ids(conn, text: str) -> set[str]:
    """The calls `text` selects in memory (`matches`); a payload: term by the reference reading of
    each call's payload (tests/db/test_payload_filter.py), which `matches` refuses to guess."""
    everything = reads.jobs(conn, limit=100)
    f = parse_filter(text)
    term = f.payload_term
    if term is None:
        return {str(j.id) for j in everything if f.matches(j)}
    payloads = {str(r["id"]): (r["payload"], r["payload_text"])
                for r in conn.execute("select id, payload, payload::text as payload_text from tool_jobs").fetchall()}
    rest = f.model_copy(update={"payload": None})
    return {str(j.id) for j in everything if rest.matches(j) and reference_match(term, *payloads[str(j.id)])}


@pytest.fixture
def cli(db):
    runner = CliRunner()

    def jobs(*args: str) -> set[str]:
        result = runner.invoke(app, ["jobs", *args, "--json", "--dsn", db.dsn])
        assert result.exit_code == 0, result.output
        return {r["id"] for r in json.loads(result.stdout)}

    return jobs


def filters_for(ids) -> dict[str, str]:
    chosen = dict(FILTERS)
    chosen["id"] = f"id:{str(ids[2])[:8]}"
    chosen["chain"] = f"chain:{str(ids[0])[:8]}"
    chosen["parent"] = f"parent:{str(ids[0])[:13].upper()}"  # hyphens and capitals, as id: takes them
    return chosen


def test_every_key_of_the_grammar_is_in_this_test():
    assert {k for k in FILTERS if " " not in k} == set(KEYS) - {"at"}, "a new key needs its line in FILTERS"


def test_the_in_memory_reading_refuses_payload_rather_than_guess(calls):
    conn, _ = calls
    job = reads.jobs(conn, limit=1)[0]
    with pytest.raises(BadInput, match="payload: is searched in the database"):
        parse_filter("payload:$.invoice=INV-7").matches(job)


def test_the_chain_keys_select_what_they_say(calls):
    conn, ids = calls
    chain = {str(j.id) for j in reads.jobs(conn, parse_filter(filters_for(ids)["chain"]), limit=100)}
    assert chain == {str(ids[0]), str(ids[-1])}, "the first stage and the one it made"
    made = reads.jobs(conn, parse_filter(filters_for(ids)["parent"]), limit=100)
    assert [(str(j.id), j.stage, str(j.parent_id), str(j.chain_id)) for j in made] == \
        [(str(ids[-1]), 1, str(ids[0]), str(ids[0]))]
    assert [str(j.id) for j in reads.jobs(conn, parse_filter(f"trace:{TRACE}"), limit=100)] == [str(ids[3])]
    assert [j.priority for j in reads.jobs(conn, parse_filter("priority:5"), limit=100)] == [5]
    assert [str(j.id) for j in reads.jobs(conn, parse_filter("past_deadline"), limit=100)] == [str(ids[5])]
    assert reads.jobs(conn, parse_filter("priority:0 tool:erp"), limit=100) == [], "priority 0 filters too"


@pytest.mark.parametrize("name", list(FILTERS))
def test_every_key_selects_the_same_calls_everywhere(calls, cli, name):
    conn, ids = calls
    text = filters_for(ids)[name]
    want = expected_ids(conn, text)
    assert want and len(want) < len(ids), f"{text} selects a proper subset (the test means something)"
    assert {str(j.id) for j in reads.jobs(conn, parse_filter(text), limit=100)} == want, "SQL = in memory"
    assert cli("--where", text) == want, "leasectl jobs --where"
    assert {str(j.id) for j in bulk.snapshot(conn, where=parse_selection(text))} == want, "bulk --where"
    now = conn.execute("select now() as t").fetchone()["t"]
    past = {str(j.id) for j in jobs_at(conn, now, parse_filter(text), limit=100)}
    if name in ("health", "bare health"):
        return  # the past's health is rebuilt from the history (no heartbeats): asked of the present only
    assert past == want, "jobs --at (the history at this instant) selects the same calls"


def test_where_and_the_named_options_combine_and_refuse_to_disagree(calls, cli, db):
    conn, ids = calls
    both = cli("--where", "model:gpt-5.1", "--tool", "search")
    assert both == expected_ids(conn, "model:gpt-5.1 tool:search")
    runner = CliRunner()
    clash = runner.invoke(app, ["jobs", "--where", "tool:erp", "--tool", "search", "--dsn", db.dsn])
    assert clash.exit_code == 2 and "given twice" in clash.output
    empty = runner.invoke(app, ["jobs", "--where", "  ", "--dsn", db.dsn])
    assert empty.exit_code == 2, "an unset variable is bad input, not every call"
    bad = runner.invoke(app, ["jobs", "--where", "colour:red", "--dsn", db.dsn])
    assert bad.exit_code == 2 and "unknown filter key" in bad.output and "filter keys:" in bad.output


def test_where_at_is_the_same_as_at(calls, cli):
    conn, _ = calls
    assert cli("--where", "at:0s state:running") == cli("--at", "0s", "--state", "running")
