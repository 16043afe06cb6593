"""Contexts on a real database: `leasectl contexts` with one context up (the test database) and one
down (a closed port), as JSON and as text; and the commands run in a context -- its DSN, its
operator journaled with an action, --operator winning over it, its read_only refusing actions."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from console.operator.cli import app
from console.operator.cli.common import Before, set_before
from tests.helpers import SLOW, claim, enqueue, events, job, register_tool

CLOSED = "postgresql://leasectl:hunter22@127.0.0.1:1/leasectl"  # nothing listens on port 1


@pytest.fixture
def leasectl(db, tmp_path, monkeypatch):
    """`leasectl ARGS` with a contexts file of this test's own: `up` (the test database, operator
    ctx-op), `down` (a closed port) and `ro` (the test database, read_only)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for name in ("LEASECTL_CONTEXT", "LEASECTL_DSN", "DATABASE_URL", "LEASECTL_OPERATOR"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "leasectl" / "contexts.toml"
    path.parent.mkdir(parents=True)
    path.write_text(f"""
[contexts.up]
dsn = {json.dumps(db.dsn)}
operator = "ctx-op"

[contexts.down]
dsn = "{CLOSED}"
production = true

[contexts.ro]
dsn = {json.dumps(db.dsn)}
read_only = true
""")
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None):
        result = runner.invoke(app, list(args), env={"USER": "cli-user", **(env or {})})
        assert "Traceback" not in result.output, result.output
        return result

    yield invoke, path
    set_before(Before())


def running_call(db) -> dict:
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", **SLOW)
        e = enqueue(conn, "search", "ctx:1")
        assert claim(conn, "w-1") is not None
    return e


def test_contexts_json_one_up_one_down(leasectl):
    invoke, _path = leasectl
    result = invoke("contexts", "--json", env={"LEASECTL_CONTEXT": "up"})
    assert result.exit_code == 0, "a listing: exit 0 even with a context down"
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert list(rows) == ["up", "down", "ro"]
    up, down = rows["up"], rows["down"]
    assert up["answers"] is True and up["error"] is None and isinstance(up["answered_in_ms"], int)
    assert up["current"] is True and up["operator"] == "ctx-op"
    assert down["answers"] is False and down["error"] == "Connection refused" and down["answered_in_ms"] is None
    assert down["current"] is False and down["production"] is True
    assert down["dsn"] == "postgresql://leasectl:***@127.0.0.1:1/leasectl"
    assert "hunter22" not in result.output
    assert rows["ro"]["read_only"] is True and rows["ro"]["answers"] is True


def test_contexts_text_one_up_one_down(leasectl):
    invoke, path = leasectl
    result = invoke("--context", "ro", "contexts")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    up = next(line for line in lines if " up " in line)
    down = next(line for line in lines if " down " in line)
    ro = next(line for line in lines if " ro " in line)
    assert "● answers (" in up and "ms)" in up
    assert "✕ DOWN: Connection refused" in down and "production" in down
    assert "postgresql://leasectl:" in result.stdout, "its DSN is shown (masked: below; the column may fold it)"
    assert ro.lstrip().startswith("▶") and "read-only" in ro, "the current one is marked"
    assert f"3 contexts in {path}; 1 DOWN: down; current: ro" in " ".join(result.stdout.split())
    assert "hunter22" not in result.output


def test_a_command_in_a_context_uses_its_dsn_and_its_operator(leasectl, db):
    invoke, _path = leasectl
    e = running_call(db)
    listed = invoke("--context", "up", "jobs", "--json")
    assert listed.exit_code == 0, listed.output
    assert [row["id"] for row in json.loads(listed.stdout)] == [str(e["id"])]
    cancelled = invoke("cancel", str(e["id"])[:8], "--reason", "in a context", "--yes", env={"LEASECTL_CONTEXT": "up"})
    assert cancelled.exit_code == 0, cancelled.output
    with db.connect() as conn:
        journal = [ev for ev in events(conn, e["id"]) if ev["kind"] == "operator_cancel"]
        assert journal[-1]["actor"] == "ctx-op", "the context's operator is the name journaled"
        assert job(conn, e["id"])["state"] == "cancel_requested"


def test_operator_beats_the_contexts_and_read_only_contexts_refuse(leasectl, db):
    invoke, _path = leasectl
    e = running_call(db)
    refused = invoke("--context", "ro", "cancel", str(e["id"])[:8], "--reason", "r", "--yes")
    assert refused.exit_code == 1 and "context ro is read_only" in refused.output
    assert invoke("--context", "ro", "show", str(e["id"])[:8], "--json").exit_code == 0, "reads work"
    applied = invoke("--context", "up", "--operator", "alice", "cancel", str(e["id"])[:8], "--reason", "r", "--yes")
    assert applied.exit_code == 0, applied.output
    with db.connect() as conn:
        journal = [ev for ev in events(conn, e["id"]) if ev["kind"] == "operator_cancel"]
        assert [ev["actor"] for ev in journal] == ["alice"], "--operator wins; the read-only one sent nothing"


def test_a_down_context_is_unreachable_not_a_traceback(leasectl):
    invoke, _path = leasectl
    result = invoke("--context", "down", "jobs")
    assert result.exit_code == 1 and "cannot connect to the database" in result.output
    assert "hunter22" not in result.output
