"""An empty filter is not "every call" for an action (an unset shell variable in
`--where "$FILTER"` approved a retry of an unverifiable payment). For an action, an empty or blank
--where is bad input: exit 2, nothing changed, nothing journaled. For a read, no filter at all lists
everything, but an option given an empty value (`jobs --tool "$TOOL"`) is bad input too: it would
list nothing (--tool '') or everything (--key '') without saying so."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from console.core.filters import parse_filter, parse_selection
from console.operator.cli import app
from console.shared.errors import BadInput
from tests.helpers import FAST, claim, enqueue, register_tool, report_unknown, start_side_effect

BLANKS = ["", "   ", "\t"]


@pytest.fixture
def calls(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only")
        register_tool(conn, "pay", "mutating_unverifiable", **FAST)
        queued = enqueue(conn, "search", "q:1")
        payment = enqueue(conn, "pay", "pay:1", agent_id="billing")
        held = claim(conn, "w-pay", ["pay"])
        start_side_effect(conn, held, "w-pay")
        report_unknown(conn, held, "w-pay")
        yield db, conn, queued, payment


def invoke(db, *args: str):
    result = CliRunner().invoke(app, [*args, "--dsn", db.dsn], env={"USER": "filter-tester"})
    assert "Traceback" not in result.output, result.output
    return result


def snapshot(conn) -> tuple[list[tuple], int]:
    calls = [tuple(r.values()) for r in conn.execute("select id, state, fencing_token from tool_jobs order by id")]
    journaled = conn.execute("select count(*) as n from job_events where kind like 'operator_%'").fetchone()["n"]
    return calls, journaled


@pytest.mark.parametrize("where", BLANKS)
@pytest.mark.parametrize("action", [["approve-retry"], ["cancel"], ["mark-terminal", "--as", "failed"]])
def test_an_empty_where_on_an_action_is_bad_input_and_changes_nothing(calls, where, action):
    db, conn, _, _ = calls
    before = snapshot(conn)
    result = invoke(db, *action, "--where", where, "--reason", "nightly cleanup", "--yes")
    assert result.exit_code == 2, result.output
    assert "--where is empty" in result.output, result.output
    assert snapshot(conn) == before, "nothing changed, nothing journaled"


def test_a_real_filter_still_acts(calls):
    db, conn, _, payment = calls
    result = invoke(db, "approve-retry", "--where", "tool:pay state:outcome_unknown", "--reason", "bank: no capture",
                    "--yes")
    assert result.exit_code == 0, result.output
    assert conn.execute("select state from tool_jobs where id = %s", (payment["id"],)).fetchone()["state"] == "queued"


def test_the_rule_lives_with_the_grammar():
    for blank in [*BLANKS, None]:
        with pytest.raises(BadInput) as refused:
            parse_selection(blank)
        assert refused.value.exit_code == 2 and "--where is empty" in str(refused.value)
    assert parse_selection("state:queued").state == "queued"
    assert parse_filter("   ").empty, "a read's empty filter (the console's `/`) means no filter"


def test_reads_list_everything_without_a_filter_but_an_empty_option_is_bad_input(calls):
    db, _, _, _ = calls
    everything = invoke(db, "jobs", "--json")
    assert everything.exit_code == 0 and len(json.loads(everything.output)) == 2
    for option in ("--tool", "--owner", "--agent", "--key", "--state", "--health"):
        result = invoke(db, "jobs", option, " ")
        assert result.exit_code == 2 and f"{option} is empty" in result.output, (option, result.output)
