"""`payload:` against a real database: what each kind of term selects (held to a reference reading
of its meaning, `reference_match`), combined with the other keys, through `leasectl jobs --where`,
a bulk action's snapshot and `jobs --at`; planned after the rest of the filter and stopped by the
page's LIMIT (the plans say so); refused for a role that may not read payloads; and a search that
runs out of statement time says so instead of answering "no calls"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

from console.core.filters import PayloadTerm, parse_filter, parse_selection
from console.db import bulk, lane, reads, sql
from console.db.audit import jobs_at
from console.db.connect import connect, run
from console.operator.cli import app
from console.shared.config import SessionLimits
from console.shared.errors import PayloadSearchTimedOut, PermissionDenied, StatementTimedOut
from tests.conftest import ROOT
from tests.helpers import SLOW, claim, enqueue, ensure_login

TOOLS = {"pay": ("mutating_unverifiable", SLOW), "search": ("read_only", SLOW)}
NO_PAYLOAD_LOGIN = "lc_test_no_payload"
LOGINS = {"lc_test_payload_auditor": "leasectl_auditor"}

# the calls, by name: (tool, payload)
CALLS: dict[str, tuple[str, Any]] = {
    "inv7": ("pay", {"invoice": "INV-7", "amount": 120, "vip": True, "note": "Late fee: \"waived\"",
                     "customer": {"name": "Ada Lovelace", "tier": "gold"},
                     "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}]}),
    "inv70": ("pay", {"invoice": "INV-70", "amount": "120", "vip": False,
                      "customer": {"name": "Charles Babbage", "tier": "silver"}, "lines": [{"sku": "C-3", "qty": 1}]}),
    "inv8": ("pay", {"invoice": "INV-8", "amount": 120.0, "vip": "true", "note": None,
                     "customer": {"name": "Grace Hopper"}, "lines": [{"sku": "B-2", "qty": 5}]}),
    "refund": ("search", {"query": "Refund policy for INV-7", "max_results": 10}),
    "weather": ("search", {"query": "weather in Zürich", "max_results": 3, "amount": 12}),
    "tags": ("search", {"query": "tagged", "tags": ["urgent", "billing"], "nested": {"list": [1, 2, 3]}}),
}

# what each term selects, by the names above (the reference reading agrees: checked too)
EXPECTED: dict[str, set[str]] = {
    "payload:$.invoice=INV-7": {"inv7"},  # exact: not INV-70
    "payload:$.invoice=inv-7": set(),  # a string compares with its case
    "payload:$.customer.name=\"Ada Lovelace\"": {"inv7"},
    "payload:$.customer.tier=gold": {"inv7"},
    "payload:$.lines[0].sku=B-2": {"inv8"},  # the first line only
    "payload:$.lines[1].sku=B-2": {"inv7"},
    "payload:$.lines.sku=B-2": {"inv7", "inv8"},  # any line (an array is searched element by element)
    "payload:$.lines[5].sku=B-2": set(),
    "payload:$.amount=120": {"inv7", "inv70", "inv8"},  # the number 120 (120.0 too) or the string "120"
    "payload:$.amount=1.2e2": {"inv7", "inv8"},  # the number only: the string is "120", not "1.2e2"
    "payload:$.amount=\"120\"": {"inv70"},  # quoted: the string only
    "payload:$.amount=12": {"weather"},
    "payload:$.vip=true": {"inv7", "inv8"},  # true, or the string "true"
    "payload:$.vip=false": {"inv70"},
    "payload:$.note=null": {"inv8"},
    "payload:$.note": {"inv7", "inv8"},  # the path is there (null included)
    "payload:$.tags=urgent": {"tags"},
    "payload:$.tags[1]=billing": {"tags"},
    "payload:$.nested.list[2]=3": {"tags"},
    "payload:$.missing": set(),
    "payload:refund": {"refund"},  # text, any case
    "payload:inv-7": {"inv7", "inv70", "refund"},  # in any string, INV-70 included
    "payload:\"ada lovelace\"": {"inv7"},
    "payload:\"policy for\"": {"refund"},
    "payload:zürich": {"weather"},
    "payload:ZÜRICH": {"weather"},  # any case beyond ASCII too
    "payload:max_results": {"refund", "weather"},  # keys are text of the payload too
    "payload:waived": {"inv7"},
    "payload:nothing-like-this": set(),
}


def reference_match(term: PayloadTerm, payload: Any, payload_text: str) -> bool:
    """What a term means, written plainly (console.core.filters.PayloadTerm's docstring): the SQL
    must select exactly the calls this does."""
    if term.text is not None:
        return term.text.lower() in payload_text.lower()
    values = [payload]
    for step in term.steps:
        reached: list[Any] = []
        for value in values:
            if isinstance(step, int):
                if isinstance(value, list):
                    reached.extend(value[step:step + 1])
                elif step == 0:  # lax: a single value is an array of one
                    reached.append(value)
            else:
                for item in value if isinstance(value, list) else [value]:  # lax: member of each element
                    if isinstance(item, dict) and step in item:
                        reached.append(item[step])
        values = reached
    if term.value is None:
        return bool(values)

    def flat(items: list[Any]) -> Iterator[Any]:
        for item in items:
            if isinstance(item, list):
                yield from flat(item)
            else:
                yield item

    literal = json.loads(term.literal, parse_float=Decimal, parse_int=Decimal) if term.literal else None
    for value in flat(values):
        if isinstance(value, str) and value == term.value:
            return True
        if term.literal is None:
            continue
        if isinstance(literal, bool) or literal is None:
            if value is literal:
                return True
        elif isinstance(value, int | float) and not isinstance(value, bool) and Decimal(str(value)) == literal:
            return True
    return False


@pytest.fixture
def calls(conn) -> tuple[psycopg.Connection, dict[str, str]]:
    ids = {name: str(enqueue(conn, tool, f"payload:{name}", payload)["id"]) for name, (tool, payload) in CALLS.items()}
    claim(conn, "w-pay", ["pay"])  # inv7, the oldest pay call: running; the others queued
    return conn, ids


def selected(rows) -> set[str]:
    return {str(r.id) for r in rows}


def names(ids: dict[str, str], found: set[str]) -> set[str]:
    by_id = {v: k for k, v in ids.items()}
    return {by_id[i] for i in found}


def reference_ids(conn, text: str) -> set[str]:
    """The calls the reference reading selects: the rest of the filter in memory (`matches`), the
    payload term by `reference_match` over each call's payload and its JSON text."""
    chosen = parse_filter(text)
    rest = chosen.model_copy(update={"payload": None})
    term = chosen.payload_term
    assert term is not None
    payloads = {str(r["id"]): (r["payload"], r["payload_text"])
                for r in conn.execute("select id, payload, payload::text as payload_text from tool_jobs").fetchall()}
    return {str(j.id) for j in reads.jobs(conn, limit=1000)
            if rest.matches(j) and reference_match(term, *payloads[str(j.id)])}


@pytest.mark.parametrize("text", list(EXPECTED))
def test_each_kind_of_term_selects_what_it_says(calls, text):
    conn, ids = calls
    found = selected(reads.jobs(conn, parse_filter(text), limit=100))
    assert names(ids, found) == EXPECTED[text], text
    assert found == reference_ids(conn, text), "SQL = the reference reading"


@pytest.mark.parametrize(("text", "wanted"), [
    ("tool:pay payload:$.amount=120", {"inv7", "inv70", "inv8"}),
    ("tool:search payload:$.amount=120", set()),
    ("state:running payload:$.amount=120", {"inv7"}),
    ("state:queued payload:$.lines.sku=B-2", {"inv8"}),
    ("tool:search payload:inv-7", {"refund"}),
    ("queued tool:pay payload:\"babbage\"", {"inv70"}),
    ("key:payload:inv payload:$.vip=true", {"inv7", "inv8"}),
])
def test_payload_combines_with_the_other_keys(calls, text, wanted):
    conn, ids = calls
    found = selected(reads.jobs(conn, parse_filter(text), limit=100))
    assert names(ids, found) == wanted
    assert found == reference_ids(conn, text)


def test_the_cli_bulk_and_the_past_select_the_same_calls(calls, db):
    conn, ids = calls
    runner = CliRunner()
    now = conn.execute("select now() as t").fetchone()["t"]
    for text in ("payload:$.amount=120", "tool:pay payload:\"ada lovelace\"", "payload:$.lines[0].sku=B-2"):
        want = selected(reads.jobs(conn, parse_filter(text), limit=100))
        assert want
        listed = runner.invoke(app, ["jobs", "--where", text, "--json", "--dsn", db.dsn])
        assert listed.exit_code == 0, listed.output
        assert {r["id"] for r in json.loads(listed.stdout)} == want, "leasectl jobs --where"
        assert selected(bulk.snapshot(conn, where=parse_selection(text))) == want, "bulk --where (its snapshot)"
        assert selected(jobs_at(conn, now, parse_filter(text), limit=100)) == want, "jobs --at (the past)"
    none = runner.invoke(app, ["jobs", "--where", "payload:$.invoice=INV-404", "--dsn", db.dsn])
    assert none.exit_code == 0 and "no calls match" in none.output
    bad = runner.invoke(app, ["jobs", "--where", "payload:$.lines[x]=1", "--dsn", db.dsn])
    assert bad.exit_code == 2, bad.output
    assert "not a JSON path this filter takes at '[x]=1'" in bad.output and "hint: payload:$.invoice=INV-7" in bad.output


def test_pages_of_payload_matches_are_newest_first_and_whole(conn):
    """The payload test is applied outside the ordered subquery: the pages must still be the
    newest matches first, each once, none left out (keyset pages over 45 matches among 90)."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    run(conn, "demo/exact_mode", on=True)
    try:
        for g in range(90):
            call = uuid.uuid4()
            conn.execute("insert into tool_jobs (id, chain_id, tool, idempotency_key, payload, created_at) "
                         "values (%s, %s, 'search', %s, %s, %s)",
                         (call, call, f"page:{g}", json.dumps({"batch": "b1" if g % 2 else "b2", "g": g}),
                          base + timedelta(seconds=g // 3)))  # three calls share each instant: ids break ties
    finally:
        run(conn, "demo/exact_mode", on=False)
    chosen = parse_filter("payload:$.batch=b1")
    pages, before = [], None
    while True:
        page = reads.jobs(conn, chosen, before=before, limit=7)
        if not page:
            break
        pages.append(page)
        before = (page[-1].created_at, page[-1].id)
    keys = [(j.created_at, j.id) for page in pages for j in page]
    assert keys == sorted(keys, reverse=True), "newest first, across pages"
    assert len(keys) == len(set(keys)) == 45
    assert {j.idempotency_key for page in pages for j in page} == {f"page:{g}" for g in range(1, 90, 2)}
    assert [len(p) for p in pages] == [7] * 6 + [3]


# ----------------------------------------------------------------------------- the plan

def plan_of(conn, text: str, limit: int, *, analyze: bool = False) -> dict[str, Any]:
    query = sql.load("views/jobs")
    values = query.bind({**parse_filter(text).sql_values(), "ids": None, "before_created": None, "before_id": None,
                         "limit": limit})
    options = "analyze, timing off, format json" if analyze else "format json"
    plan: dict[str, Any] = conn.execute(f"explain ({options}) {query.text}", values).fetchone()["QUERY PLAN"][0]
    return plan


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def seed_bench_calls(db, count: int) -> None:
    """`count` calls of the payload benchmark (queries/bench/payload_calls.sql), its five tools first,
    on a session without a statement timeout (a batch of 50,000 may take longer than 5 s), analyzed."""
    from tests.bench.payload import UNLIMITED, seed

    with connect(db.dsn, limits=UNLIMITED) as conn:
        seed(conn, count)
        conn.execute("analyze tool_jobs")


def test_the_payload_test_runs_after_the_rest_of_the_filter_and_the_limit_stops_it(conn, db):
    seed_bench_calls(db, 3000)
    # tool:bench_pay selects 30 calls of 3,000; the payload is tested on those only, above the scan
    plan = plan_of(conn, "tool:bench_pay payload:$.currency=EUR", 50, analyze=True)
    tested = [n for n in nodes(plan["Plan"]) if "jsonb_path_exists" in n.get("Filter", "")]
    assert len(tested) == 1, "the payload is tested in one node"
    node = tested[0]
    assert "bench_pay" not in node["Filter"], "not in the same condition as the tool's"
    below = list(nodes(node))[1:]
    assert any("bench_pay" in (n.get("Filter", "") + n.get("Index Cond", "")) for n in below), \
        "the tool's condition is applied below it, first"
    assert not any("jsonb_path_exists" in (n.get("Filter", "") + n.get("Index Cond", "")) for n in below)
    tested_rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
    assert tested_rows == 30, "the payload was tested on the 30 calls tool:bench_pay selects, no more"
    assert node["Actual Rows"] == 10, "a third of them are in EUR"
    # a common match stops the scan at the page's end: 3,000 calls, 5 asked, a few read
    plan = plan_of(conn, "payload:$.max_steps=25", 5, analyze=True)
    node = next(n for n in nodes(plan["Plan"]) if "jsonb_path_exists" in n.get("Filter", ""))
    assert node["Actual Rows"] == 5
    assert node["Actual Rows"] + node.get("Rows Removed by Filter", 0) < 100, "the scan stopped at the page"
    # text, the same shape
    plan = plan_of(conn, "tool:bench_sql payload:analytics", 20, analyze=True)
    node = next(n for n in nodes(plan["Plan"]) if "strpos" in n.get("Filter", ""))
    assert "bench_sql" not in node["Filter"] and node["Actual Rows"] == 20
    assert node["Actual Rows"] + node.get("Rows Removed by Filter", 0) == 20


def test_the_path_and_its_values_are_parameters_not_sql(conn):
    """The statement's text is the same whatever the term: the path and values are bound."""
    query = sql.load("views/jobs")
    assert {"payload_path", "payload_vars", "payload_text"} <= set(query.params)
    for text in ('payload:$.a="x\') or true; drop table tool_jobs; --"', "payload:';drop_table_tool_jobs;--"):
        values = parse_filter(text).sql_values()
        assert reads.jobs(conn, parse_filter(text)) == []
        assert "drop table" not in query.text and values["payload_path"] in (None, '$."a" ? (@ == $v)')
    assert conn.execute("select count(*) as n from tool_jobs").fetchone()["n"] == 0


# ----------------------------------------------------------------------------- who may search

@pytest.fixture
def no_payload_login(db, pg_server, calls):
    """A login whose grants on tool_jobs are column by column, every column but payload (and whatever
    else a session of leasectl reads)."""
    conn, ids = calls
    with pg_server.admin() as admin:
        ensure_login(admin, NO_PAYLOAD_LOGIN)
    columns = [r["column_name"] for r in conn.execute(
        "select column_name from information_schema.columns where table_schema = 'public' "
        "and table_name = 'tool_jobs' and column_name <> 'payload' order by ordinal_position").fetchall()]
    conn.execute(f"grant select on all tables in schema public to {NO_PAYLOAD_LOGIN}")
    conn.execute(f"revoke select on tool_jobs from {NO_PAYLOAD_LOGIN}")
    conn.execute(f"grant select ({', '.join(columns)}) on tool_jobs to {NO_PAYLOAD_LOGIN}")
    return make_conninfo(db.dsn, user=NO_PAYLOAD_LOGIN), ids


def test_a_login_that_may_not_read_payloads_is_refused_before_anything_is_searched(no_payload_login, conn):
    dsn, _ = no_payload_login
    with connect(dsn) as theirs:
        allowed = theirs.execute("select has_column_privilege('public.tool_jobs', 'payload', 'SELECT') as a, "
                                 "has_column_privilege('public.tool_jobs', 'tool', 'SELECT') as b").fetchone()
        assert (allowed["a"], allowed["b"]) == (False, True), "column grants, without payload"
        with pytest.raises(PermissionDenied) as caught:
            reads.jobs(theirs, parse_filter("tool:pay payload:$.customer.tier=gold"))
        # the database's own answer would be "permission denied for table tool_jobs": ours names the privilege
        assert "SELECT privilege on tool_jobs.payload" in str(caught.value)
        assert NO_PAYLOAD_LOGIN in str(caught.value) and "Nothing was searched" in str(caught.value)
        assert theirs.execute("select 1 as one").fetchone()["one"] == 1, "the session goes on"
    result = CliRunner().invoke(app, ["jobs", "--where", "payload:$.customer.tier=gold", "--dsn", dsn])
    assert result.exit_code == 1, result.output  # not allowed: 1, not bad input, not refused by a guard
    assert "SELECT privilege on tool_jobs.payload" in result.output
    for secret in ("Lovelace", "Babbage", "waived", "INV-7", "silver"):  # nothing of any payload leaks
        assert secret not in result.output
    # the owner may: the same search answers
    assert reads.jobs(conn, parse_filter("payload:$.customer.tier=gold"))


def test_a_read_only_session_that_drops_to_the_auditor_role_may_search(calls, db, logins):
    """The role asked is the session's own (current_user): `--read-only` drops a member of
    leasectl_auditor to that role, which reads the whole table."""
    _, ids = calls
    result = CliRunner().invoke(app, ["--read-only", "jobs", "--where", "payload:$.invoice=INV-7", "--json",
                                      "--dsn", make_conninfo(db.dsn, user="lc_test_payload_auditor")])
    assert result.exit_code == 0, result.output
    assert {r["id"] for r in json.loads(result.stdout)} == {ids["inv7"]}


# ----------------------------------------------------------------------------- the statement timeout

@pytest.fixture
def table_locked(db) -> Iterator[None]:
    """Another session holds tool_jobs in ACCESS EXCLUSIVE mode: a read of it waits until its
    statement timeout ends it -- the timeout, whatever makes the statement last."""
    holder = psycopg.connect(db.dsn)
    holder.execute("lock table tool_jobs in access exclusive mode")
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


SHORT = SessionLimits(statement_timeout_ms=300, lock_timeout_ms=0, idle_in_transaction_ms=10_000)


def test_a_search_past_the_statement_timeout_says_so(calls, db, table_locked, monkeypatch):
    with connect(db.dsn, limits=SHORT) as mine:
        with pytest.raises(PayloadSearchTimedOut) as caught:
            reads.jobs(mine, parse_filter("tool:pay payload:$.invoice=INV-7"))
        words = str(caught.value)
        assert words.startswith("the payload search did not finish within the statement timeout of 0.3 s")
        assert "not \"no calls\"" in words and "tool:, state:" in words
        assert caught.value.exit_code == 1
        # without payload: the plain statement timeout, as before
        with pytest.raises(StatementTimedOut) as plain:
            reads.jobs(mine, parse_filter("tool:pay"))
        assert type(plain.value) is StatementTimedOut
    # the CLI: the message and exit 1, no traceback, never "no calls match"
    monkeypatch.setitem(lane.open_session.__kwdefaults__, "limits", SHORT)
    result = CliRunner().invoke(app, ["jobs", "--where", "payload:refund", "--dsn", db.dsn])
    assert result.exit_code == 1, result.output
    assert "error: the payload search did not finish within the statement timeout of 0.3 s" in result.output
    assert "no calls match" not in result.output and "Traceback" not in result.output


def test_a_bulk_snapshot_by_payload_says_so_too(calls, db, table_locked):
    with connect(db.dsn, limits=SHORT) as mine, pytest.raises(PayloadSearchTimedOut):
        bulk.snapshot(mine, where=parse_selection("payload:$.invoice=INV-7"))


@pytest.mark.slow
def test_a_real_search_that_outlasts_the_timeout_says_so(db):
    """No lock this time: 1,000,000 calls of the benchmark (LEASECTL_PAYLOAD_CALLS; 15 % with a
    4 KB context). Under the console's own limits (5 s) a search answers or says it did not --
    never "no calls" by a cut-off scan -- and one narrowed by tool: answers; under a 50 ms timeout
    a text found in none says so; with time to spare the same search answers."""
    seed_bench_calls(db, int(os.environ.get("LEASECTL_PAYLOAD_CALLS", "1000000")))
    with connect(db.dsn) as console_limits:  # the console's and the CLI's session limits
        for text in ("payload:\"no such text\"", "payload:$.invoice=INV-100"):
            try:
                found = [c.id for c in reads.jobs(console_limits, parse_filter(text))]
                assert found == [c.id for c in reads.jobs(console_limits, parse_filter(f"tool:bench_pay {text}"))]
            except PayloadSearchTimedOut as said:
                assert "did not finish within the statement timeout of 5 s" in str(said)
        assert len(reads.jobs(console_limits, parse_filter("tool:bench_pay payload:$.invoice=INV-100"))) == 1
    quick = SessionLimits(statement_timeout_ms=50, lock_timeout_ms=1_000, idle_in_transaction_ms=10_000)
    with connect(db.dsn, limits=quick) as mine, pytest.raises(PayloadSearchTimedOut, match="of 0.05 s"):
        reads.jobs(mine, parse_filter("payload:\"no such text\""))
    with connect(db.dsn, limits=SessionLimits(statement_timeout_ms=120_000)) as mine:
        assert reads.jobs(mine, parse_filter("payload:\"no such text\"")) == []
        assert len(reads.jobs(mine, parse_filter("tool:bench_pay payload:$.invoice=INV-100"))) == 1


@pytest.mark.slow
def test_the_benchmark_runs_and_prints_its_figures(pg_server):
    if pg_server.embedded is None:  # once is enough, as tests/db/test_bench_smoke.py does
        pytest.skip("the benchmarks are smoke-tested on the embedded server")
    done = subprocess.run([sys.executable, "-m", "tests.bench.payload", "--dsn", pg_server.dsn, "--calls", "20000",
                           "--runs", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for line in ("payload path, alone", "payload text, alone", "payload + tool:", "plain tool:",
                 "statement timeout"):
        assert line in done.stdout, (line, done.stdout[-3000:])
