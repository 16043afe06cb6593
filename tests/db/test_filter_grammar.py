"""One filter grammar: every key of console/core/filters.py selects the same calls in
the database (queries/views/jobs.sql: the Calls screen, `leasectl jobs`), in memory (`matches`:
Triage and Approvals), through `leasectl jobs --where`, through a bulk action's `--where` (its
snapshot), and in the past (queries/audit/jobs_at.sql: `jobs --at`). The console's `/` is held to
the same calls by tests/tui/test_filter_keys.py."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from console.core.filters import KEYS, parse_filter, parse_selection
from console.db import bulk, reads
from console.db.audit import jobs_at
from console.operator.cli import app
from tests.helpers import (
    FAST,
    claim,
    enqueue,
    expire_lease,
    register_tool,
    report_unknown,
    start_side_effect,
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
    "bare state": "queued",
    "bare health": "lease_expired",
}


@pytest.fixture
def calls(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", lease_seconds=60, heartbeat_seconds=5)
        register_tool(conn, "erp", "mutating_verifiable", lease_seconds=60, heartbeat_seconds=5)
        register_tool(conn, "pay", "mutating_unverifiable", **FAST)
        register_tool(conn, "quick", "read_only", **FAST)
        ids = [enqueue(conn, "search", "report:42:stage:1", agent_id="planner-7", model="gpt-5.1",
                       provider="openai")["id"],
               enqueue(conn, "search", "report:42:stage:2", agent_id="planner-7", model="claude-4",
                       provider="anthropic")["id"],
               enqueue(conn, "erp", "erp:1", agent_id="ops-1", model="gpt-5.1", provider="openai")["id"],
               enqueue(conn, "pay", "pay:1", agent_id="ops-1", model="claude-4", provider="anthropic")["id"],
               enqueue(conn, "quick", "quick:1", model="gpt-5.1", provider="openai")["id"]]
        claim(conn, "w-search", ["search"])          # report:42:stage:1 running, healthy
        claim(conn, "w-erp", ["erp"])                # erp:1 running, healthy
        paid = claim(conn, "w-pay", ["pay"])         # pay:1 -> outcome_unknown
        start_side_effect(conn, paid, "w-pay")
        report_unknown(conn, paid, "w-pay")
        claim(conn, "w-quick", ["quick"])            # quick:1 -> lease expired, not swept
        expire_lease(conn, ids[4])
        yield conn, ids


def expected_ids(conn, text: str) -> set[str]:
    everything = reads.jobs(conn, limit=100)
    f = parse_filter(text)
    return {str(j.id) for j in everything if f.matches(j)}


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
    return chosen


def test_every_key_of_the_grammar_is_in_this_test():
    assert {k for k in FILTERS if " " not in k} == set(KEYS) - {"at"}, "a new key needs its line in FILTERS"


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
