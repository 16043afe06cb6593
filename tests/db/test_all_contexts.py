"""`leasectl triage` and `leasectl triage --all-contexts` on real databases: two contexts up (two
test databases, each with calls waiting for a human), and contexts down -- a closed port, and a
listening socket that never answers, which proves each context's own timeout. The answer names
every down context, says PARTIAL, exits 1, and never says "nothing needs a human" while a context
is unknown; JSON keys as docs/contract.md §7 lists them."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from console.operator.cli import app
from tests.conftest import Database, _test_database
from tests.helpers import outcomes_unknown

CLOSED = "postgresql://leasectl:s3cretpass@127.0.0.1:1/leasectl"  # nothing listens on port 1


def closed_port_dsn() -> str:
    return CLOSED


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A listening socket that accepts connections and never says a word (a server hung, a network
    that swallows): a client waits until its own timeout. Its DSN."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            held.append(conn)  # kept open, never answered

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"postgresql://leasectl@127.0.0.1:{listener.getsockname()[1]}/leasectl?sslmode=disable"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


def write_contexts(home: Path, contexts: dict[str, dict[str, str]]) -> Path:
    path = home / "leasectl" / "contexts.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, fields in contexts.items():
        lines.append(f"[contexts.{name}]")
        lines.extend(f"{key} = {json.dumps(value)}" for key, value in fields.items())
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def second_db(pg_server, template_db) -> Iterator[Database]:
    with _test_database(pg_server, "leasectl_test", template_db) as database:
        yield database


@pytest.fixture
def two_up(db, second_db) -> tuple[Database, Database, list[dict], list[dict]]:
    """Two databases, one call waiting for a human in the first and two in the second."""
    with db.connect() as conn:
        first = outcomes_unknown(conn, 1, tool="pay")
    with second_db.connect() as conn:
        second = outcomes_unknown(conn, 2, tool="charge")
    return db, second_db, first, second


def run(home: Path, *args: str):
    result = CliRunner().invoke(app, ["triage", *args], env={"XDG_CONFIG_HOME": str(home), "USER": "tester",
                                                              "LEASECTL_DSN": "", "LEASECTL_CONTEXT": ""})
    assert "Traceback" not in result.output, result.output
    return result


def test_two_up_and_two_down_json_names_the_down_and_is_partial(two_up, tmp_path):
    db, second_db, first, second = two_up
    with silent_server() as silent:
        write_contexts(tmp_path, {"eu": {"dsn": db.dsn}, "us": {"dsn": second_db.dsn},
                                  "gone": {"dsn": closed_port_dsn()}, "hung": {"dsn": silent}})
        begun = time.monotonic()
        result = run(tmp_path, "--all-contexts", "--json", "--timeout", "2")
        took = time.monotonic() - begun
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["partial"] is True and doc["all_clear"] is False
    assert doc["down"] == ["gone", "hung"]
    by_name = {c["name"]: c for c in doc["contexts"]}
    assert [c["name"] for c in doc["contexts"]] == ["eu", "us", "gone", "hung"]
    assert by_name["eu"]["up"] and by_name["eu"]["counts"]["needs_human"] == 1 and by_name["eu"]["attention"] == 1
    assert by_name["us"]["up"] and by_name["us"]["counts"]["needs_human"] == 2 and by_name["us"]["attention"] == 2
    assert by_name["gone"]["up"] is False and by_name["gone"]["counts"] is None
    assert "cannot connect" in by_name["gone"]["error"] and "s3cretpass" not in result.stdout
    assert by_name["hung"]["up"] is False and by_name["hung"]["error"]
    rows = {(r["context"], r["id"]) for r in doc["rows"]}
    assert rows == {("eu", str(first[0]["id"])), *(("us", str(s["id"])) for s in second)}
    for row in doc["rows"]:  # each row: its context, then the keys of `jobs --json`
        assert list(row)[:2] == ["context", "id"]
        for key in ("state", "tool", "owner_id", "fencing_token", "health", "lease_left_seconds"):
            assert key in row, key
        assert row["health"] == "outcome_unknown"
    # the hung context had 2 s: the answer did not wait for it any longer than that
    assert took < 4.5, f"took {took:.1f}s with a 2 s timeout per context"


def test_a_context_that_hangs_is_down_within_its_timeout(db, tmp_path):
    with silent_server() as silent:
        write_contexts(tmp_path, {"fine": {"dsn": db.dsn}, "hung": {"dsn": silent}})
        begun = time.monotonic()
        result = run(tmp_path, "--all-contexts", "--timeout", "2")
        took = time.monotonic() - begun
    assert result.exit_code == 1, result.output
    assert 1.5 < took < 4.5, took
    assert "hung is DOWN:" in result.stdout
    assert "PARTIAL: 1 of 2 contexts did not answer (hung)" in result.stdout


def test_text_says_partial_first_and_never_an_all_clear(db, second_db, tmp_path):
    # both databases answer and have nothing to show; one context is down
    write_contexts(tmp_path, {"eu": {"dsn": db.dsn}, "us": {"dsn": second_db.dsn}, "gone": {"dsn": closed_port_dsn()}})
    result = run(tmp_path, "--all-contexts")
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert out.splitlines()[0].startswith("PARTIAL: 1 of 3 contexts did not answer (gone)"), out
    assert "gone is DOWN: cannot connect to the database" in out
    assert "Nothing needs a human" not in out
    assert "this is NOT an all-clear" in out
    assert "s3cretpass" not in result.output


def test_every_context_up_exits_0_with_the_rows_and_their_context(two_up, tmp_path):
    db, second_db, first, second = two_up
    write_contexts(tmp_path, {"eu": {"dsn": db.dsn}, "us": {"dsn": second_db.dsn}})
    result = run(tmp_path, "--all-contexts")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "PARTIAL" not in out
    assert "3 calls need attention in 2 contexts." in out
    lines = out.splitlines()
    assert any(line.lstrip().startswith("eu") and str(first[0]["id"])[:8] in line for line in lines), out
    for s in second:
        assert any(line.lstrip().startswith("us") and str(s["id"])[:8] in line for line in lines), out
    doc = json.loads(run(tmp_path, "--all-contexts", "--json").stdout)
    assert doc["partial"] is False and doc["down"] == [] and len(doc["rows"]) == 3


def test_the_all_clear_only_when_every_context_answered(db, second_db, tmp_path):
    write_contexts(tmp_path, {"eu": {"dsn": db.dsn}, "us": {"dsn": second_db.dsn}})
    result = run(tmp_path, "--all-contexts")
    assert result.exit_code == 0, result.output
    assert "Nothing needs a human in any of the 2 contexts: every lease is healthy." in result.stdout
    assert json.loads(run(tmp_path, "--all-contexts", "--json").stdout)["all_clear"] is True


def test_reads_go_to_the_replica(db, tmp_path):
    """dsn unreachable, read_dsn the database: the triage is read from read_dsn, and says so."""
    with db.connect() as conn:
        made = outcomes_unknown(conn, 1)
    write_contexts(tmp_path, {"eu": {"dsn": closed_port_dsn(), "read_dsn": db.dsn}})
    result = run(tmp_path, "--all-contexts", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["contexts"][0]["up"] and doc["contexts"][0]["read_from"] == "replica"
    assert [r["id"] for r in doc["rows"]] == [str(made[0]["id"])]
    text = run(tmp_path, "--all-contexts").stdout
    assert "read from each context's replica (read_dsn)" in text


def test_a_context_without_the_schema_is_down_with_what_to_run(db, empty_db, tmp_path):
    write_contexts(tmp_path, {"eu": {"dsn": db.dsn}, "new": {"dsn": empty_db.dsn}})
    result = run(tmp_path, "--all-contexts", "--json")
    assert result.exit_code == 1
    new = json.loads(result.stdout)["contexts"][1]
    assert not new["up"] and "no leasectl schema" in new["error"]


def test_no_contexts_file_is_bad_input(tmp_path):
    result = run(tmp_path, "--all-contexts")
    assert result.exit_code == 2
    assert "no contexts to ask" in result.output and "does not exist" in result.output
    write_contexts(tmp_path, {})
    named_none = run(tmp_path, "--all-contexts", "--json")
    assert named_none.exit_code == 2 and "names no context" in named_none.output and named_none.stdout == ""


def test_all_contexts_with_a_dsn_is_bad_input(db, tmp_path):
    write_contexts(tmp_path, {"eu": {"dsn": db.dsn}})
    result = run(tmp_path, "--all-contexts", "--dsn", db.dsn)
    assert result.exit_code == 2 and "--all-contexts" in result.output
    assert run(tmp_path, "--timeout", "3", "--dsn", db.dsn).exit_code == 2, "--timeout belongs to --all-contexts"
    named = CliRunner().invoke(app, ["--context", "eu", "triage", "--all-contexts"],
                               env={"XDG_CONFIG_HOME": str(tmp_path), "LEASECTL_DSN": "", "LEASECTL_CONTEXT": ""})
    assert named.exit_code == 2 and "--context names one" in named.output, named.output


def test_triage_of_one_database(db, tmp_path):
    with db.connect() as conn:
        made = outcomes_unknown(conn, 2)
    doc = json.loads(run(tmp_path, "--json", "--dsn", db.dsn).stdout)
    assert list(doc) == ["counts", "rows"]
    assert doc["counts"]["needs_human"] == 2
    assert {r["id"] for r in doc["rows"]} == {str(m["id"]) for m in made}
    text = run(tmp_path, "--dsn", db.dsn)
    assert text.exit_code == 0
    assert "need a human 2" in text.stdout and "2 calls need attention, worst first:" in text.stdout
    assert str(made[0]["id"])[:8] in text.stdout


def test_triage_of_one_database_with_nothing_to_show(db, tmp_path):
    text = run(tmp_path, "--dsn", db.dsn)
    assert text.exit_code == 0 and "Nothing needs attention: every lease is healthy" in text.stdout
    down = run(tmp_path, "--dsn", closed_port_dsn())
    assert down.exit_code == 1 and "cannot connect" in down.output and "Nothing needs" not in down.output
