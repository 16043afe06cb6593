"""No function of the schema resolves a name through a login's temporary schema (migration 0012).

PostgreSQL searches the session's temporary schema *first* for relations and types unless
`search_path` names `pg_temp` explicitly, and any login may create temporary tables by default. A
guard that reads `tools` unqualified under `search_path = pg_catalog, public` reads the caller's
`create temp table tools` instead: that is how a worker once requeued its own started payment.

So every function of the schema is listed from `pg_proc` and held to one rule: a SECURITY DEFINER
function, a trigger function, and any function whose body reads a table or a catalog runs with
`search_path = pg_catalog, public, pg_temp` *and* names every relation and every leasectl function
with its schema. A plain SQL function that reads nothing may stay without the setting: a SET clause
stops PostgreSQL inlining it (into the row level security policy that every heartbeat evaluates,
say), and with nothing to read there is nothing to shadow. `tests/db/test_shadows.py` attacks the
same rule from a login's session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

SAFE_PATH = "search_path=pg_catalog, public, pg_temp"


@dataclass(frozen=True)
class Function:
    name: str
    signature: str
    language: str
    security_definer: bool
    trigger: bool
    config: tuple[str, ...]
    body: str


def _functions(conn) -> list[Function]:
    rows = conn.execute(
        "select p.proname as name, p.oid::regprocedure::text as signature, l.lanname as language, "
        "       p.prosecdef as security_definer, p.prorettype = 'trigger'::regtype as trigger, "
        "       coalesce(p.proconfig, '{}') as config, p.prosrc as body "
        "from pg_proc p join pg_language l on l.oid = p.prolang "
        "where p.pronamespace = 'public'::regnamespace and p.prokind = 'f' order by 1").fetchall()
    return [Function(r["name"], r["signature"], r["language"], r["security_definer"], r["trigger"],
                     tuple(r["config"]), r["body"]) for r in rows]


def _relations(conn) -> set[str]:
    rows = conn.execute(
        "select c.relname from pg_class c "
        "where c.relnamespace in ('public'::regnamespace, 'pg_catalog'::regnamespace) "
        "  and c.relkind in ('r', 'v', 'm', 'p', 'f')").fetchall()
    return {r["relname"] for r in rows}


_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_LITERAL = re.compile(r"'(?:[^']|'')*'")


def code_of(body: str) -> str:
    """The body without comments and string literals: what PostgreSQL resolves as names."""
    return _LITERAL.sub("''", _COMMENT.sub(" ", body))


def relation_references(code: str, relations: set[str]) -> list[tuple[str, bool]]:
    """(name, qualified) for every word of the body that names a table, view or catalog."""
    found = []
    for m in re.finditer(r"(\.\s*)?\b([a-z_][a-z0-9_]*)\b(\s*\()?", code, re.I):
        dot, word, call = m.group(1), m.group(2).lower(), m.group(3)
        if word in relations and not call:
            found.append((word, bool(dot)))
    return found


def unqualified_calls(code: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"(?<![.\w])(leasectl_\w+)\s*\(", code, re.I)]


def reads_something(fn: Function, relations: set[str]) -> bool:
    return bool(relation_references(code_of(fn.body), relations))


def needs_safe_path(fn: Function, relations: set[str]) -> bool:
    return fn.security_definer or fn.trigger or reads_something(fn, relations)


def test_the_rule_sees_what_it_must(db):
    """The checker itself: it must catch the shapes that were exploitable."""
    with db.connect() as c:
        relations = _relations(c)
    assert {"tools", "tool_jobs", "job_events", "agents", "pg_class", "pg_roles"} <= relations
    code = code_of("select side_effect from tools where name = 'tool_jobs' -- job_events\n"
                   "and exists (select 1 from pg_catalog.pg_class) and leasectl_subtree(x) "
                   "and public.leasectl_now()")
    assert relation_references(code, relations) == [("tools", False), ("pg_class", True)]
    assert unqualified_calls(code) == ["leasectl_subtree"]


def test_every_function_that_reads_or_guards_runs_with_pg_temp_last_and_qualified_names(db):
    with db.connect() as c:
        functions = _functions(c)
        relations = _relations(c)
    assert len(functions) > 30, "the schema's functions were listed"
    problems = []
    for fn in functions:
        code = code_of(fn.body)
        if needs_safe_path(fn, relations):
            paths = [s for s in fn.config if s.startswith("search_path=")]
            if paths != [SAFE_PATH]:
                why = "SECURITY DEFINER" if fn.security_definer else "trigger" if fn.trigger else "reads a table"
                problems.append(f"{fn.signature} ({why}): {paths or 'no search_path'}")
        loose = sorted({name for name, qualified in relation_references(code, relations) if not qualified})
        if loose:
            problems.append(f"{fn.signature}: relation(s) not schema-qualified: {', '.join(loose)}")
        calls = sorted(set(unqualified_calls(code)))
        if calls:
            problems.append(f"{fn.signature}: leasectl function(s) called without schema: {', '.join(calls)}")
    assert problems == [], "\n".join(problems)


def test_what_stays_inlinable_reads_nothing(db):
    """The functions left without the setting are exactly the ones PostgreSQL may inline, and each
    reads nothing: if one starts reading a table, the test above makes it take the setting."""
    with db.connect() as c:
        functions = _functions(c)
        relations = _relations(c)
    bare = {fn.name for fn in functions if not fn.config}
    assert "leasectl_worker_id_bound" in bare, "the identity test of every heartbeat's policy stays inlinable"
    for fn in functions:
        if fn.name in bare:
            assert fn.language == "sql" and not fn.security_definer and not fn.trigger, fn.signature
            assert not reads_something(fn, relations), fn.signature


@pytest.mark.parametrize("login_group", ["leasectl_worker", "leasectl_operator", "leasectl_supervisor",
                                         "leasectl_auditor"])
def test_no_group_may_create_objects_that_would_come_before_pg_catalog(db, login_group):
    """A function that reads nothing is still parsed under its caller's search_path when it is
    inlined; pg_catalog comes first unless a login puts a schema of its own before it, which needs
    CREATE on some schema of the database."""
    with db.connect() as c:
        rows = c.execute(
            "select n.nspname from pg_namespace n "
            "where n.nspname not like 'pg\\_%%' and n.nspname <> 'information_schema' "
            "  and has_schema_privilege(%s, n.oid, 'CREATE')", (login_group,)).fetchall()
        may_create_schema = c.execute("select has_database_privilege(%s, current_database(), 'CREATE') as ok",
                                      (login_group,)).fetchone()["ok"]
    assert [r["nspname"] for r in rows] == []
    assert may_create_schema is False
