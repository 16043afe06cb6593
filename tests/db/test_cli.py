"""The CLI on a real database: JSON keys, prefixes, confirmations and exit codes
(0 done, 1 anything else, 2 bad input, 3 refused by a guard). Never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from console.operator.cli import app
from tests.conftest import ROOT
from tests.helpers import FAST, claim, enqueue, events, job, register_tool, report_unknown, start_side_effect


@pytest.fixture
def cli(db):
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        result = runner.invoke(app, [*args, "--dsn", db.dsn], input=input, env={"USER": "cli-tester"})
        assert "Traceback" not in result.output, result.output
        return result

    with db.connect() as conn:
        register_tool(conn, "search", "read_only", lease_seconds=60, heartbeat_seconds=5, missed_heartbeats=2,
                      jitter_seconds=5)
        register_tool(conn, "pay", "mutating_unverifiable", **FAST)
        yield invoke, conn


def test_jobs_json_has_contract_names_and_derived_fields(cli):
    invoke, conn = cli
    e = enqueue(conn, "search", "k-1")
    claim(conn, "w-1")
    result = invoke("jobs", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows[0]["id"] == str(e["id"])
    for key in ("id", "state", "owner_id", "lease_until", "fencing_token", "heartbeat_at", "attempt",
                "idempotency_key", "tool", "agent_id", "created_at", "heartbeat_age_seconds", "lease_left_seconds",
                "health"):
        assert key in rows[0], key
    assert rows[0]["health"] == "healthy" and rows[0]["lease_left_seconds"] > 50


def test_jobs_filters_and_bad_state(cli):
    invoke, conn = cli
    enqueue(conn, "search")
    enqueue(conn, "pay")
    assert len(json.loads(invoke("jobs", "--tool", "pay", "--json").output)) == 1
    assert json.loads(invoke("jobs", "--state", "running", "--json").output) == []
    nothing = invoke("jobs", "--state", "running")
    assert nothing.exit_code == 0 and "no calls match" in nothing.stderr
    assert nothing.stdout == "", "no empty table before the words"
    bad = invoke("jobs", "--state", "sleeping")
    assert bad.exit_code == 2 and "unknown state" in bad.output


def test_show_and_history(cli):
    invoke, conn = cli
    e = enqueue(conn, "search", payload={"q": "secret"})
    claim(conn, "w-1")
    shown = json.loads(invoke("show", str(e["id"])[:8], "--json").output)
    assert shown["payload"] == {"q": "secret"} and shown["owner_id"] == "w-1" and shown["health"] == "healthy"
    human = invoke("show", str(e["id"])[:8])
    assert human.exit_code == 0 and "secret" not in human.output, "the payload stays hidden in human output"
    history = json.loads(invoke("history", str(e["id"]), "--json").output)
    assert [h["kind"] for h in history] == ["enqueued", "claimed"]
    assert {"job_id", "at", "kind", "actor", "fencing_token", "state_from", "state_to", "owner_from", "owner_to",
            "lease_until", "details"} <= set(history[1])


def test_unknown_and_ambiguous_ids_are_bad_input(cli):
    invoke, conn = cli
    for _ in range(40):
        enqueue(conn, "search")
    assert invoke("show", "ffffffff-0000").exit_code == 2
    assert invoke("show", "zz!").exit_code == 2
    huge = invoke("show", "a" * 100_000)
    assert huge.exit_code == 2 and "too long for a call id" in huge.output and len(huge.output) < 600, \
        "a bad id is named, not echoed whole"
    ids = [r["id"] for r in conn.execute("select id::text as id from tool_jobs")]
    first = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) > 1)
    result = invoke("show", first)
    assert result.exit_code == 2 and "ambiguous" in result.output


def test_cancel_asks_then_applies(cli):
    invoke, conn = cli
    e = enqueue(conn, "search")
    claim(conn, "w-1")
    declined = invoke("cancel", str(e["id"])[:8], "--reason", "stuck", input="n\n")
    assert declined.exit_code == 2 and "nothing changed" in declined.output, "not confirmed: exit 2"
    assert invoke("cancel", str(e["id"])[:8], "--reason", "stuck").exit_code == 2, "no answer: nothing changes"
    assert job(conn, e["id"])["state"] == "running"
    accepted = invoke("cancel", str(e["id"])[:8], "--reason", "stuck", input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "state running" in accepted.output and "token 1" in accepted.output, "shows what it read"
    assert "NOT stopped" in accepted.output
    journal = [ev for ev in events(conn, e["id"]) if ev["kind"] == "operator_cancel"]
    assert journal[-1]["actor"] == "cli-tester" and journal[-1]["reason"] == "stuck"


def test_stale_token_is_refused_with_exit_3(cli):
    invoke, conn = cli
    e = enqueue(conn, "search")
    claim(conn, "w-1")
    result = invoke("cancel", str(e["id"]), "--reason", "stuck", "--token", "7")
    assert result.exit_code == 3 and "changed since you looked" in result.output and "token 1" in result.output
    assert job(conn, e["id"])["state"] == "running"


def test_mark_terminal_needs_force_and_as(cli):
    invoke, conn = cli
    e = enqueue(conn, "search")
    claim(conn, "w-1")
    refused = invoke("mark-terminal", str(e["id"]), "--as", "failed", "--reason", "hung", "--yes")
    assert refused.exit_code == 3 and "live lease" in refused.output
    bad = invoke("mark-terminal", str(e["id"]), "--as", "exploded", "--reason", "hung", "--yes")
    assert bad.exit_code == 2
    forced = invoke("mark-terminal", str(e["id"]), "--as", "failed", "--reason", "hung", "--force", "--yes")
    assert forced.exit_code == 0 and "fenced out" in forced.output
    assert job(conn, e["id"])["fencing_token"] == 2


def test_approve_retry_by_the_executor_is_refused(cli):
    invoke, conn = cli
    e = enqueue(conn, "pay", agent_id="billing")
    c = claim(conn, "w-pay")
    start_side_effect(conn, c, "w-pay")
    report_unknown(conn, c, "w-pay")
    own = invoke("approve-retry", str(e["id"]), "--reason", "me", "--operator", "w-pay", "--yes")
    assert own.exit_code == 3 and "executor" in own.output
    ok = invoke("approve-retry", str(e["id"]), "--reason", "checked", "--operator", "ana", "--yes")
    assert ok.exit_code == 0 and job(conn, e["id"])["state"] == "queued"


def test_missing_reason_and_no_terminal(cli):
    invoke, conn = cli
    e = enqueue(conn, "search")
    assert invoke("cancel", str(e["id"])).exit_code == 2, "--reason is required"
    assert invoke("cancel", str(e["id"]), "--reason", "  ", "--yes").exit_code == 2


def test_unreachable_database_exits_1_without_traceback():
    result = CliRunner().invoke(app, ["jobs", "--dsn", "postgresql://nobody@127.0.0.1:1/x?connect_timeout=2"])
    assert result.exit_code == 1 and "cannot connect" in result.output and "Traceback" not in result.output


def test_dsn_from_environment(db):
    result = CliRunner().invoke(app, ["jobs", "--json"], env={"LEASECTL_DSN": db.dsn})
    assert result.exit_code == 0 and json.loads(result.output) == []
    result = CliRunner().invoke(app, ["jobs", "--json"], env={"LEASECTL_DSN": "", "DATABASE_URL": db.dsn})
    assert result.exit_code == 0


def test_an_empty_dsn_is_bad_input_not_the_environments_database(db):
    # `--dsn "$DB"` with DB unset must not quietly reach whatever LEASECTL_DSN names
    for args in (["jobs", "--dsn", ""], ["--dsn", " ", "jobs"], ["audit", "actions", "--dsn", ""]):
        result = CliRunner().invoke(app, args, env={"LEASECTL_DSN": db.dsn})
        assert result.exit_code == 2 and "--dsn is empty" in result.output, (args, result.output)
        assert "Traceback" not in result.output


def test_unmigrated_database_says_migrate(empty_db):
    result = CliRunner().invoke(app, ["jobs", "--dsn", empty_db.dsn])
    assert result.exit_code == 1 and "leasectl migrate" in result.output


# ---------------------------------------------------------------------------- fleet


def test_fleet_drain_abort_reconciliations_and_supervise(cli):
    from tests.helpers import give_grant, register_tree

    invoke, conn = cli
    register_tree(conn, {"planner-1": None, "code-1": "planner-1", "sandbox-1": "code-1", "review-1": "planner-1"})
    give_grant(conn, "sandbox-1", "credential", "vault:prod-db", issued_by="code-1")
    fleet = json.loads(invoke("fleet", "--json").output)
    assert [a["id"] for a in fleet["agents"]][:1] == ["planner-1"]
    sandbox = next(a for a in fleet["agents"] if a["id"] == "sandbox-1")
    for key in ("id", "parent_id", "kind", "state", "started_at", "last_seen_at", "terminated_confirmed_at",
                "running_calls", "live_grants"):
        assert key in sandbox, key
    assert sandbox["live_grants"] == 1 and sandbox["state"] == "running"
    assert [(g["agent_id"], g["resource"], g["issued_by"]) for g in fleet["grants"]] == [
        ("sandbox-1", "vault:prod-db", "code-1")]
    human = invoke("fleet")
    assert human.exit_code == 0 and "sandbox-1" in human.output

    assert invoke("drain", "nobody", "--reason", "r").exit_code == 2
    assert invoke("drain", "code-1", "--reason", "  ").exit_code == 2
    assert invoke("drain", "code-1", "--reason", "r", "--window", "0").exit_code == 2
    assert invoke("drain", "code-1").exit_code == 2, "a reason is required"
    unasked = invoke("drain", "code-1", "--reason", "deploy", "--window", "0.5")
    assert unasked.exit_code == 2 and "not confirmed" in unasked.output, "drain asks first; no answer, no drain"
    assert "code-1" in unasked.output and "sandbox-1" in unasked.output and "vault:prod-db" in unasked.output, \
        "the question shows the subtree and its live grants"
    applied = invoke("drain", "code-1", "--reason", "deploy", "--window", "0.5", input="y\n")
    assert applied.exit_code == 0, applied.output
    assert "applied" in applied.output and "2 agents" in applied.output
    refused = invoke("abort", "planner-1", "--reason", "fire", "--yes")
    assert refused.exit_code == 3 and "already under way" in refused.output
    assert invoke("abort", "review-1", "--reason", "fire", "--window", "0.5", "--yes").exit_code == 0

    assert invoke("reconciliations", "--json").output.strip() == "[]"
    for _ in range(60):
        step = invoke("supervise", "--once")
        assert step.exit_code == 0, step.output
        records = json.loads(invoke("reconciliations", "--json").output)
        if len(records) == 2:
            break
        import time
        time.sleep(0.2)
    assert len(records) == 2
    for key in ("id", "shutdown_id", "written_by", "written_at", "in_flight", "grants_revoked", "grants_expired",
                "children_confirmed", "children_unaccounted"):
        assert key in records[0], key
    drained = next(r for r in records if any(c["agent_id"] == "code-1" for c in r["children_unaccounted"]))
    assert {c["agent_id"] for c in drained["children_unaccounted"]} == {"code-1", "sandbox-1"}
    assert drained["grants_revoked"][0]["revoked_by"] == "control-plane"
    shown = invoke("reconciliations")
    assert shown.exit_code == 0 and "UNACCOUNTED" in shown.output.upper() and "sandbox-1" in shown.output
    assert json.loads(invoke("fleet", "--json").output)["agents"][1]["state"] == "terminated"
    assert invoke("drain", "code-1", "--reason", "again", "--yes").exit_code == 3, "terminated: refused"


# ---------------------------------------------------------------------------- options before the command


def test_options_before_the_command_are_never_ignored(db, empty_db):
    runner = CliRunner()
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", lease_seconds=60, heartbeat_seconds=5, missed_heartbeats=2,
                      jitter_seconds=5)
        e = enqueue(conn, "search")
        claim(conn, "w-1")
    env = {"USER": "shell-user", "LEASECTL_DSN": empty_db.dsn}  # the wrong database, if --dsn were ignored
    listed = runner.invoke(app, ["--dsn", db.dsn, "jobs", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.output)] == [str(e["id"])]
    both = runner.invoke(app, ["--dsn", db.dsn, "jobs", "--dsn", empty_db.dsn], env=env)
    assert both.exit_code == 2 and "given twice" in both.output
    assert runner.invoke(app, ["--dsn", db.dsn, "jobs", "--dsn", db.dsn, "--json"], env=env).exit_code == 0

    read_only = runner.invoke(app, ["--read-only", "--dsn", db.dsn, "cancel", str(e["id"]), "--reason", "x",
                                    "--token", "1"], env=env)
    assert read_only.exit_code == 1 and "read-only" in read_only.output and "applied" not in read_only.output
    with db.connect() as conn:
        assert job(conn, e["id"])["state"] == "running", "--read-only before the command: nothing changed"
        assert not [ev for ev in events(conn, e["id"]) if ev["kind"].startswith("operator_")]

    as_alice = runner.invoke(app, ["--operator", "alice", "--dsn", db.dsn, "cancel", str(e["id"]), "--reason",
                                   "stuck", "--token", "1"], env=env)
    assert as_alice.exit_code == 0, as_alice.output
    with db.connect() as conn:
        journal = [ev for ev in events(conn, e["id"]) if ev["kind"] == "operator_cancel"]
        assert journal[-1]["actor"] == "alice", "--operator before the command is the name journaled"
    twice = runner.invoke(app, ["--operator", "alice", "cancel", str(e["id"]), "--reason", "x", "--operator", "bob",
                                "--dsn", db.dsn, "--yes"], env=env)
    assert twice.exit_code == 2 and "given twice" in twice.output

    assert runner.invoke(app, ["--poll", "1", "--dsn", db.dsn, "jobs"], env=env).exit_code == 2


def test_version_and_undecodable_arguments(db):
    import subprocess
    import sys
    from pathlib import Path

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("leasectl ")
    leasectl = Path(sys.executable).parent / "leasectl"
    raw = subprocess.run([leasectl, b"show", b"\xff\xfe-not-utf8", b"--dsn", db.dsn.encode()],
                         capture_output=True, timeout=60)
    assert raw.returncode == 2, raw.stderr
    assert b"not valid UTF-8" in raw.stderr and b"Traceback" not in raw.stderr


HOSTILE_OWNER = "w-\u202egnp.exe\x1b]52;c;UFdORUQ=\x07\x1b]2;PWNED-TITLE\x07\x1b[31mred\u200b\u2028"


def _no_terminal_controls(text: str) -> None:
    import unicodedata

    bad = sorted({f"U+{ord(c):04X}" for c in text if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")
                  and c != "\n"})
    assert not bad, f"raw control or invisible characters reached the terminal: {bad}"


def test_hostile_text_never_reaches_the_terminal_raw(cli):
    invoke, conn = cli
    e = enqueue(conn, "search", agent_id="agent-\u202eexe")
    claim(conn, HOSTILE_OWNER)
    for args in (("jobs",), ("show", str(e["id"])), ("history", str(e["id"])),
                 ("cancel", str(e["id"]), "--reason", "x", "--token", "9")):
        result = invoke(*args)
        assert result.exit_code in (0, 3), result.output
        _no_terminal_controls(result.output)
        assert "PWNED-TITLE" in result.output or args[0] in ("jobs", "history"), "hostile text is shown, as text"
    refused = invoke("cancel", str(e["id"]), "--reason", "x", "--token", "9")
    assert "\\u202e" in refused.output and "\\x1b]2;PWNED" in refused.output, refused.output
    as_json = invoke("show", str(e["id"]), "--json")
    _no_terminal_controls(as_json.output)
    assert json.loads(as_json.output)["owner_id"] == HOSTILE_OWNER, "JSON keeps the exact value, escaped"


def test_a_finished_call_has_no_lease_health_or_heartbeat_age_in_json(cli):
    invoke, conn = cli
    e = enqueue(conn, "search")
    from tests.helpers import complete

    c = claim(conn, "w-1")
    complete(conn, c, "w-1")
    row = json.loads(invoke("jobs", "--json").output)[0]
    assert row["id"] == str(e["id"]) and row["state"] == "succeeded"
    assert row["health"] is None and row["heartbeat_age_seconds"] is None and row["lease_left_seconds"] is None
    human = invoke("show", str(e["id"]))
    assert "healthy" not in human.output, "a finished call holds no lease: no lease health"


def test_tables_on_a_pipe_are_not_cut_to_80_columns(cli, db):
    """rich draws 80 columns wide when it cannot ask a terminal: ids, owners and headers were cut."""
    invoke, conn = cli
    enqueue(conn, "search")
    claim(conn, "w-browser-west-17")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    shown = subprocess.run([sys.executable, "-m", "console", "jobs", "--dsn", db.dsn], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "w-browser-west-17" in shown.stdout and "…" not in shown.stdout, shown.stdout
    assert all(word in shown.stdout for word in ("lease left", "health", "created")), "every column is there"

