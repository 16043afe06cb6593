"""A context's read_dsn (issue 28): lists, audit and the console's pages read from it; every action,
its guard and the read it builds on go to dsn. Two databases stand in for a primary and its replica,
each with a call of its own, so where each read went is plain to see; the HA tier
(tests/ha/test_failover.py) reads from a real streaming standby and its lag."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from console.db import reads
from console.db.session import ConsoleSession
from console.operator.cli import app
from console.operator.cli.common import Before, set_before
from console.operator.present.contexts import replica_note
from console.shared.contexts import Context, Overrides, settle
from tests.conftest import _test_database
from tests.helpers import SLOW, claim, enqueue, job, register_tool


@pytest.fixture
def replica(pg_server: Any, template_db: str) -> Iterator[Any]:
    with _test_database(pg_server, "leasectl_replica", template_db) as database:
        yield database


def running_call(database: Any, key: str) -> dict[str, Any]:
    with database.connect() as conn:
        register_tool(conn, "search", "read_only", **SLOW)
        e = enqueue(conn, "search", key)
        assert claim(conn, "w-1") is not None
    return e


@pytest.fixture
def leasectl(db: Any, replica: Any, tmp_path: Any, monkeypatch: Any) -> Iterator[Any]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for name in ("LEASECTL_CONTEXT", "LEASECTL_DSN", "DATABASE_URL", "LEASECTL_OPERATOR"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "leasectl" / "contexts.toml"
    path.parent.mkdir(parents=True)
    path.write_text(f"[contexts.split]\ndsn = {json.dumps(db.dsn)}\nread_dsn = {json.dumps(replica.dsn)}\n")
    runner = CliRunner()

    def invoke(*args: str) -> Any:
        result = runner.invoke(app, list(args), env={"USER": "cli-user"})
        assert "Traceback" not in result.output, result.output
        return result

    yield invoke
    set_before(Before())


def test_settle_takes_the_replica_only_with_the_contexts_own_dsn() -> None:
    ctx = Context(name="x", dsn="postgresql://db1/l", read_dsn="postgresql://db2/l")
    assert settle(ctx).read_dsn == "postgresql://db2/l"
    assert settle(ctx, Overrides(dsn="postgresql://other/l")).read_dsn is None, \
        "--dsn chose another database: its replica is unknown"
    assert settle(Context(name="y", dsn="postgresql://db1/l")).read_dsn is None


def test_lists_and_audit_read_the_replica_actions_go_to_the_primary(leasectl: Any, db: Any, replica: Any) -> None:
    on_primary = running_call(db, "primary:1")
    on_replica = running_call(replica, "replica:1")
    listed = json.loads(leasectl("--context", "split", "jobs", "--json").output)
    assert [r["id"] for r in listed] == [str(on_replica["id"])], "the list came from read_dsn"
    history = leasectl("--context", "split", "history", str(on_replica["id"]))
    assert history.exit_code == 0, history.output
    assert leasectl("--context", "split", "history", str(on_primary["id"])).exit_code == 2, "not on the replica"
    owner = leasectl("--context", "split", "audit", "owner", str(on_replica["id"]), "--at", "0s", "--json")
    assert owner.exit_code == 0 and "w-1" in owner.output, owner.output
    # the cancel reads the call and acts on it on the primary: the replica's call is not there
    refused = leasectl("--context", "split", "cancel", str(on_replica["id"]), "--reason", "r", "--yes")
    assert refused.exit_code != 0
    done = leasectl("--context", "split", "cancel", str(on_primary["id"]), "--reason", "stuck", "--yes")
    assert done.exit_code == 0, done.output
    with db.connect() as conn:
        assert job(conn, on_primary["id"])["state"] == "cancel_requested"
    with replica.connect() as conn:
        assert job(conn, on_replica["id"])["state"] == "running", "nothing was written on the replica"
    # --dsn names one database: reads and actions both go there
    assert [r["id"] for r in json.loads(leasectl("--context", "split", "--dsn", db.dsn, "jobs", "--json").output)] \
        == [str(on_primary["id"])]


def test_the_console_session_reads_the_replica_and_acts_on_the_primary(db: Any, replica: Any) -> None:
    on_primary = running_call(db, "primary:2")
    on_replica = running_call(replica, "replica:2")
    session = ConsoleSession(db.dsn, operator="dana", read_dsn=replica.dsn)
    try:
        info = session.open()
        assert not session.read_only, info
        seen = session.read(reads.jobs)
        assert [j.id for j in seen] == [on_replica["id"]]
        acted = session.act(lambda conn: reads.job(conn, on_primary["id"]))
        assert acted is not None and acted.id == on_primary["id"]
        # the header's word: this stand-in is no streaming replica, and says so
        assert session.replica is not None and session.replica.replica is False
        assert replica_note(False, False, None)[0] == "reads: read_dsn is not a replica"
        assert replica_note(True, False, 7.5) == ("replica 7.5s behind", "bold red")
        assert replica_note(True, True, 120.0)[0] == "replica caught up"
    finally:
        session.close()
