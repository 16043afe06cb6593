"""The query loader: `:name` becomes a psycopg parameter; nothing else is touched."""

from __future__ import annotations

import re

import pytest

from console.db import sql
from console.db.sql import QueryError, translate


def test_params_casts_strings_comments_and_dollar_quotes():
    text, names = translate(
        "select :a::int, ':not_a_param', \"col:x\", $$ :nope $$, $tag$ :no $tag$ -- :comment\n"
        "/* :block */ from t where x = :b and y = :a and z like 'a%' and arr[1:2] = 1"
    )
    assert names == ("a", "b")
    assert "%(a)s::int" in text and "%(b)s" in text
    assert "':not_a_param'" in text and "$$ :nope $$" in text and "-- :comment" in text
    assert "like 'a%%'" in text, "a literal % must survive psycopg's formatting"
    assert "arr[1:2]" in text


def test_escaped_quotes_and_e_strings():
    text, names = translate("select 'it''s :x', E'\\':y', :z")
    assert names == ("z",)


def test_bind_fails_loudly_on_unknown_and_missing():
    q = sql.load("worker/heartbeat")
    assert q.params == ("job_id", "worker_id", "fencing_token")
    with pytest.raises(QueryError, match="unknown parameter\\(s\\) jobid"):
        q.bind({"jobid": 1, "job_id": 1, "worker_id": "w", "fencing_token": 1})
    with pytest.raises(QueryError, match="missing parameter\\(s\\) fencing_token"):
        q.bind({"job_id": 1, "worker_id": "w"})


def test_missing_file_fails_loudly():
    with pytest.raises(QueryError, match="no query file"):
        sql.load("worker/nope")


def test_unterminated_quote_is_an_error():
    with pytest.raises(QueryError):
        translate("select 'oops")


# The public contract (docs/contract.md §4): file names and their exact parameters.
CONTRACT = {
    "worker/enqueue": {"tool", "idempotency_key", "payload", "agent_id", "session_id", "deadline_at", "model", "provider",
                       "parent_id", "priority", "accepted_at", "trace_id"},
    "worker/complete_and_enqueue": {"job_id", "worker_id", "fencing_token", "result", "next_tool",
                                    "next_idempotency_key", "next_payload"},
    "worker/record_check": {"job_id", "worker_id", "fencing_token", "found", "details"},
    "worker/claim": {"worker_id", "tools"},
    "worker/heartbeat": {"job_id", "worker_id", "fencing_token"},
    "worker/start_side_effect": {"job_id", "worker_id", "fencing_token", "external_request_id"},
    "worker/complete": {"job_id", "worker_id", "fencing_token", "result"},
    "worker/fail": {"job_id", "worker_id", "fencing_token", "error", "retryable"},
    "worker/confirm_cancel": {"job_id", "worker_id", "fencing_token"},
    "worker/report_outcome_unknown": {"job_id", "worker_id", "fencing_token", "error"},
    "worker/record_event": {"job_id", "kind", "actor", "fencing_token", "details"},
    "supervisor/sweep": set(),
    "operator/request_cancel": {"job_id", "seen_state", "seen_token", "operator", "reason"},
    "operator/mark_terminal": {"job_id", "seen_state", "seen_token", "terminal_state", "operator", "reason", "force"},
    "operator/approve_retry": {"job_id", "seen_state", "seen_token", "operator", "reason"},
    # fleet and shutdown
    "agent/register": {"agent_id", "parent_id", "kind"},
    "agent/heartbeat": {"agent_id"},
    "agent/confirm_terminated": {"agent_id"},
    "agent/grant": {"agent_id", "kind", "resource", "issued_by", "expires_at"},
    "supervisor/revoke_grant": {"grant_id", "revoker"},
    "operator/request_shutdown": {"root_agent_id", "mode", "requested_by", "reason", "window_seconds"},
}


# beside the contract's own, optional parameters (bound as null when left out, so a caller of the
# contract's exact parameters is served as before): migration 0018's upgrade path
ADDED_OPTIONAL = {"agent/register": {"replaces"}, "operator/request_shutdown": {"replacement_agent_id"}}


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_contract_files_exist_with_exact_parameters(name):
    q = sql.load(name)
    added = ADDED_OPTIONAL.get(name, set())
    assert set(q.params) == CONTRACT[name] | added
    assert added <= set(q.optional), "what the contract does not name must be optional"


def test_optional_parameters_are_bound_as_null_and_the_others_stay_required():
    enqueue = sql.load("worker/enqueue")
    assert set(enqueue.optional) == {"parent_id", "priority", "accepted_at", "trace_id"}
    given = dict(tool="t", idempotency_key="k", payload=None, agent_id=None, session_id=None, deadline_at=None,
                 model=None, provider=None)
    bound = enqueue.bind(given)
    assert {k: bound[k] for k in enqueue.optional} == dict.fromkeys(enqueue.optional)
    assert enqueue.bind({**given, "priority": 5})["priority"] == 5
    with pytest.raises(QueryError, match="missing parameter.*tool"):
        enqueue.bind({k: v for k, v in given.items() if k != "tool"})


@pytest.mark.parametrize("name", sql.all_query_names())
def test_every_query_file_says_what_it_does_and_what_zero_rows_mean(name):
    q = sql.load(name)
    assert q.purpose, f"{q.path} has no '-- Purpose:' line"
    assert q.zero_rows, f"{q.path} has no '-- Zero rows:' line"
    declared = re.search(r"^-- Parameters:(.*(?:\n--   .*)*)", q.source, re.M)
    assert declared, f"{q.path} has no '-- Parameters:' line"
    for name in q.params:
        assert re.search(rf"\b{name}\b", declared.group(1)), f"{q.path}: header does not list {name}"


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_fused_complete_and_claim_keeps_claim_and_complete_identical():
    claim = sql.load("worker/claim").source
    fused = sql.load("worker/complete_and_claim").source
    ctes = claim[claim.index("with expired as (") + len("with "):claim.index("update tool_jobs j")]
    update = claim[claim.index("update tool_jobs j"):]
    # apart on purpose (migration 0016): the fused claim does not count the call it completes under
    # the caps, and takes its slots after the completion, which frees that call's slot
    fused_ctes = _normalise(fused).replace(
        "-- (here only: the completion runs first, so the slot of the call it ends is free) "
        "when (select count(*) from completed) < 0 then false ", "").replace(" and r.id <> :job_id::uuid", "")
    assert _normalise(ctes) in fused_ctes, "claim.sql's CTEs drifted"
    assert _normalise(update) in _normalise(fused), "claim.sql's update drifted"
    complete = sql.load("worker/complete").source
    where = complete[complete.index("where id"):complete.index("returning")]
    assert _normalise(where) in _normalise(fused), "complete.sql's guard drifted"


def test_claim_many_keeps_claim_identical_but_for_its_limits():
    """claim_many.sql is claim.sql for up to max_calls calls: the same conditions, word for word."""
    claim = sql.load("worker/claim").source
    many = sql.load("worker/claim_many").source
    body = _normalise(claim[claim.index("with expired as ("):])
    many_body = _normalise(many[many.index("with expired as ("):])
    # apart on purpose: each branch takes up to what is left of max_calls, and the queue is read
    # beside the expired leases, not only when there is none
    expected = body.replace("order by j.lease_until limit 1",
                            "order by j.lease_until limit greatest(coalesce(:max_calls::integer, 0), 0)", 1)
    expected = expected.replace(" and not exists (select 1 from expired)", "", 1)
    expected = expected.replace(
        "order by j.priority desc, j.created_at limit 1",
        "order by j.priority desc, j.created_at -- (here only) what the expired leases left of max_calls "
        "limit greatest(coalesce(:max_calls::integer, 0) - (select count(*) from expired), 0)", 1)
    assert expected != body
    assert many_body == expected, "claim_many.sql drifted from claim.sql"


def test_complete_many_keeps_complete_s_guard():
    """Each result of a group is written under exactly complete.sql's guard, its own token for :fencing_token."""
    complete = sql.load("worker/complete").source
    many = _normalise(sql.load("worker/complete_many").source)
    guard = _normalise(complete[complete.index("where id"):complete.index("returning")])
    conditions = guard.removeprefix("where ").split(" and ")
    assert len(conditions) == 5
    for condition in conditions:
        expected = "j." + condition.replace(":job_id::uuid", "done.id").replace(":fencing_token::bigint",
                                                                               "done.fencing_token")
        assert expected in many, expected


def test_complete_and_enqueue_keeps_complete_and_enqueue_identical():
    """The fused stage end is complete.sql's guarded write and enqueue.sql's function: one text each."""
    fused = _normalise(sql.load("worker/complete_and_enqueue").source)
    complete = sql.load("worker/complete").source
    write = complete[complete.index("update tool_jobs"):complete.index("returning")]
    assert _normalise(write) in fused, "complete.sql's guarded write drifted"
    assert "leasectl_enqueue(" in fused and "leasectl_enqueue(" in sql.load("worker/enqueue").source


def test_the_text_sent_drops_comments_and_runs_of_space_but_never_a_literal():
    text = sql.compact(
        "select 'a  -- not a comment  /* nor this */',   \"two  spaces\", $$ keep\n  -- this $$,\n"
        "  E'it\\'s  --', $t$ /* here */ $t$ -- a comment\n/* a block\n comment */ from   t\twhere x = 1")
    assert text == ("select 'a  -- not a comment  /* nor this */', \"two  spaces\", $$ keep\n  -- this $$,\n"
                    "E'it\\'s  --', $t$ /* here */ $t$\nfrom t where x = 1")
    assert sql.compact("select 1--x\n+2") == "select 1\n+2", "a comment still separates what it stood between"
    # two literals are one string across a line break only: the break stays
    assert sql.compact("select 'a'  \n  -- more\n  'b', 'c'   'd'") == "select 'a'\n'b', 'c' 'd'"


@pytest.mark.parametrize("name", ["worker/claim", "worker/claim_many", "worker/complete_and_claim",
                                  "worker/complete_many", "worker/heartbeat_many", "worker/complete_and_enqueue"])
def test_the_workers_statements_fit_psycopg_s_parse_cache(name):
    """psycopg parses a query's placeholders again at every execution past 4,096 characters; a
    worker's claim sent with its comments was 6,700-7,700 (every claim paid the parse)."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    query = sql.load(name)
    assert len(query.text.encode()) <= MAX_CACHED_STATEMENT_LENGTH
    assert query.text.startswith(f"/* queries/{name}.sql */ "), "pg_stat_activity names the file"
