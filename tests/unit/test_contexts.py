"""Contexts without a database: the one precedence rule (console.shared.contexts.settle) as every
command and the console apply it, the command line's errors (an unknown name exits 2 naming the
known ones, never a traceback), a context's read_only that no option undoes, the header's words
and colours, and the probe's deadline against a server that never answers."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from console.db.probe import brief, probe_all
from console.operator.cli import app
from console.operator.cli.common import (
    Before,
    dsn_option,
    operator_option,
    read_only_option,
    read_only_why,
    set_before,
)
from console.operator.present.contexts import context_badge, picker_row
from console.shared.contexts import Context, Overrides, dsn_place, load_contexts, settle

# nothing listens on port 1: refused at once; each context's own port tells which DSN was used
STAGING = "postgresql://sam:hunter22@127.0.0.1:1/leasectl_staging"
PROD = "postgresql://oncall:s3cr3t-pw@127.0.0.1:2/leasectl"
GIVEN = "postgresql://127.0.0.1:3/given"
FROM_ENV = "postgresql://127.0.0.1:4/from_env"
PROD_REPLICA = PROD.replace(":2/", ":5/")  # prod-eu's read_dsn: its lists read there

CONTEXTS = f"""
[contexts.staging]
dsn = "{STAGING}"
operator = "sam"

[contexts.prod-eu]
dsn = "{PROD}"
read_dsn = "{PROD_REPLICA}"
production = true
read_only = true
colour = "magenta"
"""


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A config home of the test's own, with the two contexts above; no context chosen, no DSN nor
    operator from the environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for name in ("LEASECTL_CONTEXT", "LEASECTL_DSN", "DATABASE_URL", "LEASECTL_OPERATOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("USER", "from-user")
    write(tmp_path, CONTEXTS)
    return tmp_path


def write(home: Path, text: str) -> None:
    path = home / "leasectl" / "contexts.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def leasectl() -> Iterator[object]:
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None):
        result = runner.invoke(app, list(args), env=env)
        assert "Traceback" not in result.output, result.output
        return result

    yield invoke
    set_before(Before())


def port_tried(result) -> str:
    """Which of the DSNs above a command tried to reach (libpq names the port it could not reach)."""
    for dsn in (STAGING, PROD, GIVEN, FROM_ENV, PROD_REPLICA):
        port = dsn.split("127.0.0.1:")[1].split("/")[0]
        if f'port {port} failed' in result.output:
            return dsn
    raise AssertionError(f"no known port in: {result.output}")


# ----------------------------------------------------------------------------- the rule itself


def test_settle_dsn_precedence(home, monkeypatch):
    contexts = load_contexts()
    staging = contexts["staging"]
    assert settle(staging, Overrides(dsn=GIVEN)).dsn == GIVEN, "--dsn beats the context's dsn"
    assert settle(staging, Overrides(dsn=GIVEN)).dsn_from == "--dsn"
    monkeypatch.setenv("LEASECTL_DSN", FROM_ENV)
    assert settle(staging).dsn == STAGING, "a chosen context beats LEASECTL_DSN"
    assert settle(staging).dsn_from == "context"
    assert settle(None).dsn == FROM_ENV and settle(None).dsn_from == "environment"


def test_settle_operator_and_read_only(home, monkeypatch):
    contexts = load_contexts()
    staging, prod = contexts["staging"], contexts["prod-eu"]
    assert settle(staging, Overrides(operator="alice")).operator == "alice", "--operator beats the context's"
    monkeypatch.setenv("LEASECTL_OPERATOR", "env-op")
    assert settle(staging).operator == "sam", "the context's operator beats the environment's"
    assert settle(prod).operator == "env-op", "a context without one: the environment's"
    assert settle(prod).read_only_reason == "context prod-eu is read_only"
    assert settle(prod, Overrides(read_only=False)).read_only, "nothing on the command line undoes it"
    assert settle(staging, Overrides(read_only=True)).read_only_reason == "started with --read-only"
    assert not settle(staging).read_only


def test_the_cli_helpers_apply_the_rule(home):
    set_before(Before(context_name="staging"))
    assert dsn_option(None) == STAGING and operator_option(None) == "sam" and not read_only_option()
    assert dsn_option(GIVEN) == GIVEN, "--dsn after the command beats the context too"
    assert operator_option("alice") == "alice"
    set_before(Before(context_name="prod-eu", operator="bob"))
    assert operator_option(None) == "bob" and read_only_option()
    assert read_only_why() == "context prod-eu is read_only"
    set_before(Before())
    assert operator_option(None) == "from-user", "no context: $USER as before"


# ----------------------------------------------------------------------------- the command line


def test_an_unknown_context_names_the_known_ones(home, leasectl):
    for result in (leasectl("--context", "prod", "jobs"), leasectl("jobs", env={"LEASECTL_CONTEXT": "prod"})):
        assert result.exit_code == 2, result.output
        assert "no context named 'prod' (known: staging, prod-eu)" in result.output
        assert str(home / "leasectl" / "contexts.toml") in result.output
    console = leasectl("--context", "prod")  # the console goes through the same lookup
    assert console.exit_code == 2 and "known: staging, prod-eu" in console.output


def test_no_file_and_a_broken_file_are_bad_input(tmp_path, monkeypatch, leasectl):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nothing-here"))
    missing = leasectl("--context", "staging", "jobs")
    assert missing.exit_code == 2 and "has no [contexts.NAME]" in missing.output
    write(tmp_path / "nothing-here", "[contexts.x]\ndsn = \n")
    broken = leasectl("--context", "x", "jobs")
    assert broken.exit_code == 2 and "is not valid TOML" in broken.output
    write(tmp_path / "nothing-here", '[contexts.x]\ndsn = "host=h"\ncolour = "reddish"\n')
    colour = leasectl("--context", "x", "jobs")
    assert colour.exit_code == 2 and "not a colour name Rich knows" in colour.output
    empty = leasectl("--context", "", "jobs")
    assert empty.exit_code == 2 and "--context is empty" in empty.output


def test_help_works_whatever_the_context_says(home, leasectl):
    result = leasectl("jobs", "--help", env={"LEASECTL_CONTEXT": "no-such"})
    assert result.exit_code == 0 and "Usage" in result.output


def test_the_context_dsn_and_the_dsn_that_beats_it(home, leasectl):
    assert port_tried(leasectl("--context", "staging", "jobs")) == STAGING
    assert port_tried(leasectl("jobs", env={"LEASECTL_CONTEXT": "staging"})) == STAGING
    assert port_tried(leasectl("--context", "staging", "jobs", "--dsn", GIVEN)) == GIVEN
    assert port_tried(leasectl("--context", "staging", "--dsn", GIVEN, "jobs")) == GIVEN
    assert port_tried(leasectl("--context", "staging", "jobs", env={"LEASECTL_DSN": FROM_ENV})) == STAGING
    assert port_tried(leasectl("--context", "prod-eu", "jobs", env={"LEASECTL_CONTEXT": "staging"})) == PROD_REPLICA, \
        "--context beats LEASECTL_CONTEXT (and a list reads from its replica)"
    result = leasectl("--context", "staging", "jobs")
    assert "hunter22" not in result.output, "a context's password is never printed"


def test_a_read_only_context_refuses_every_action_before_connecting(home, leasectl):
    result = leasectl("--context", "prod-eu", "cancel", "1a2b3c4d", "--reason", "r", "--yes")
    assert result.exit_code == 1, result.output
    assert "read-only (context prod-eu is read_only)" in result.output and "Nothing was sent" in result.output
    undo = leasectl("--context", "prod-eu", "--no-read-only", "cancel", "1a2b3c4d", "--reason", "r")
    assert undo.exit_code == 2, "there is no option that turns a read-only context read-write"
    readable = leasectl("--context", "prod-eu", "jobs")
    assert port_tried(readable) == PROD_REPLICA, "reads still go to it (to its replica, read_dsn)"


def test_contexts_lists_without_a_database(home, leasectl):
    """Both contexts are down (closed ports): still a listing (exit 0), passwords masked, the down
    ones loud, and the current one marked."""
    listed = leasectl("contexts", "--json", env={"LEASECTL_CONTEXT": "prod-eu"})
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [r["name"] for r in rows] == ["staging", "prod-eu"]
    assert list(rows[0]) == ["name", "dsn", "read_dsn", "operator", "read_only", "production", "colour",
                             "trace_url", "current", "answers", "answered_in_ms", "error"]
    assert [r["current"] for r in rows] == [False, True]
    assert all(r["answers"] is False and r["error"] == "Connection refused" for r in rows)
    assert rows[1]["dsn"] == "postgresql://oncall:***@127.0.0.1:2/leasectl" and "***" in rows[1]["read_dsn"]
    assert "hunter22" not in listed.output and "s3cr3t-pw" not in listed.output
    text = leasectl("contexts")
    assert text.exit_code == 0
    assert "DOWN: Connection refused" in text.output and "2 DOWN: staging, prod-eu" in text.output
    assert "no current context" in text.output
    unknown = leasectl("--context", "nope", "contexts")
    assert unknown.exit_code == 2 and "staging" in unknown.output and "no context named 'nope'" in unknown.output


def test_contexts_without_a_file(tmp_path, monkeypatch, leasectl):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("LEASECTL_CONTEXT", raising=False)
    assert leasectl("contexts", "--json").stdout.strip() == "[]"
    text = leasectl("contexts")
    assert text.exit_code == 0 and "no contexts:" in text.output and "README" in text.output


# ----------------------------------------------------------------------------- words and colours


def test_the_header_badge():
    staging = Context(name="staging", dsn=STAGING)
    assert context_badge(staging, STAGING).plain == "staging"
    assert [str(s.style) for s in context_badge(staging, STAGING).spans] == ["bold"]
    prod = Context(name="prod-eu", dsn=PROD, production=True)
    assert str(context_badge(prod, PROD).spans[0].style) == "bold white on red", "production: red by default"
    yellow = Context(name="prod-us", dsn=PROD, production=True, colour="yellow")
    assert str(context_badge(yellow, PROD).spans[0].style) == "bold black on yellow", "its colour, readable"
    tagged = Context(name="lab", dsn=PROD, colour="#00aa00")
    assert "on #00aa00" in str(context_badge(tagged, PROD).spans[0].style), "a colour without production too"
    assert context_badge(staging, GIVEN, overridden=True).plain == "staging (--dsn)"
    assert context_badge(None, "host=/run/postgresql dbname=leasectl").plain == "no context: local/leasectl"
    long = context_badge(Context(name="x" * 40, dsn=PROD), PROD).plain
    assert len(long) <= 24 and long.endswith("…")


def test_dsn_place_never_shows_a_password():
    assert dsn_place(PROD) == "127.0.0.1:2/leasectl"
    assert dsn_place("postgresql://u:pw@db.internal/app") == "db.internal/app"
    assert dsn_place("host=/tmp dbname=demo password=pw") == "local/demo"
    assert "secret" not in dsn_place("postgresql//u:secret@x")


def test_the_picker_row():
    prod = Context(name="prod-eu", dsn=PROD, production=True, operator="oncall")
    row = picker_row(prod, None, current=True, place="", name_width=10).plain
    assert row.startswith("▶  prod-eu ") and "asking…" in row and "production" in row and "as oncall" in row
    assert "no context" in picker_row(None, None, current=False, place="local/x").plain


# ----------------------------------------------------------------------------- the probe


def test_brief_reasons():
    assert brief('cannot connect to the database: connection failed: connection to server at "h", port 1 '
                 "failed: Connection refused\n\tIs the server running") == "Connection refused"
    assert brief("bad connection string: invalid connection option \"x\"") == \
        'bad connection string: invalid connection option "x"'
    assert brief("") == "no answer"


def test_a_server_that_never_answers_costs_its_deadline_only():
    """A socket that accepts and says nothing (a hung server): libpq waits for the startup answer;
    the probe gives up at its deadline, and a refused one beside it answers at once."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    heard: list[str] = []
    try:
        started = time.monotonic()
        answers = probe_all({"hung": f"postgresql://x@127.0.0.1:{port}/x", "refused": STAGING}, timeout=2,
                            on_answer=lambda name, _answer: heard.append(name))
        took = time.monotonic() - started
    finally:
        silent.close()
    assert took < 4.5, f"the probe took {took:.1f} s"
    assert heard[0] == "refused", "the refused one is heard first: nobody waits for the hung one"
    assert not answers["hung"].answers and answers["hung"].error
    assert ("timeout" in answers["hung"].error) or ("no answer within" in answers["hung"].error)
    assert answers["refused"].error == "Connection refused"


def test_a_context_that_does_not_answer_points_at_its_own_entry(home, leasectl):
    down = leasectl("--context", "staging", "jobs")
    assert down.exit_code == 1 and "context staging: check its dsn in" in down.output, down.output
    replica = leasectl("--context", "prod-eu", "jobs")
    assert "context prod-eu: check its read_dsn in" in replica.output, replica.output
    given = leasectl("--context", "staging", "--dsn", GIVEN, "jobs")
    assert "check --dsn" in given.output and "context staging" not in given.output, given.output
