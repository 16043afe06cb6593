"""Chains and deadlines in the grammar and in words (migration 0014; docs/seeds.md §000, §004):
the keys chain: parent: session: trace: priority:, the health past_deadline, the metrics' accept
wait, past_deadline and service grouping, and the exporter's families built from them (no I/O)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from console.core.filters import KEYS, parse_filter, parse_selection
from console.core.health import HEALTH_RANK, HEALTH_URGENCY
from console.core.metrics import BYS, AcceptWaitTotals, LiveRow, MetricsGroup, Scrape, TotalRow, check_by
from console.core.models import HEALTHS, Check, Job, JobSummary
from console.operator import exporter, present
from console.operator.present.words import HEALTH_LABELS, HEALTH_MEANING, STYLE, health_words
from console.shared.errors import BadInput

NOW = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)
FIRST = uuid.UUID("8f1b7c3d-0000-4000-8000-000000000001")
SECOND = uuid.UUID("3c2a0000-0000-4000-8000-000000000002")
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def call(**fields: object) -> JobSummary:
    base = dict(id=SECOND, tool="web_search", side_effect="read_only", state="running", owner_id="w-3",
                fencing_token=2, attempt=1, idempotency_key="report:42:stage:2", session_id="s-9",
                parent_id=FIRST, chain_id=FIRST, stage=1, priority=5, trace_id=TRACE, created_at=NOW,
                health="healthy", db_now=NOW)
    base.update(fields)
    return JobSummary.model_validate(base)


def test_the_chain_keys_parse_match_and_describe_themselves():
    f = parse_filter("chain:8F1B-7c parent:8f1b session:s-9 trace:4BF92F35 priority:5")
    assert (f.chain_prefix, f.parent_prefix, f.session, f.trace_prefix, f.priority) == \
        ("8f1b7c", "8f1b", "s-9", "4bf92f35", 5)
    assert f.matches(call())
    for other in ("chain:3c2a", "parent:3c2a", "session:s-1", "trace:4bf93", "priority:4", "priority:-5"):
        assert not parse_filter(other).matches(call()), other
    assert not parse_filter("chain:8f1b").matches(call(chain_id=None)), "a row without a chain is in none"
    assert parse_filter(f.describe()) == f
    values = f.sql_values()
    assert (values["chain_low"], values["chain_high"]) == (uuid.UUID("8f1b7c00-0000-0000-0000-000000000000"),
                                                           uuid.UUID("8f1b7cff-ffff-ffff-ffff-ffffffffffff"))
    assert (values["session"], values["trace_prefix"], values["priority"]) == ("s-9", "4bf92f35", 5)
    assert {"chain", "parent", "session", "trace", "priority"} <= set(KEYS)


def test_priority_zero_is_a_filter_and_the_grammar_has_no_comparisons():
    zero = parse_filter("priority:0")
    assert not zero.empty and zero.describe() == "priority:0"
    assert parse_selection("priority:0").priority == 0, "an action may select priority 0"
    assert zero.matches(call(priority=0)) and not zero.matches(call())
    for text, says in (("priority:>0", "is not an integer"), ("priority:high", "is not an integer"),
                       ("priority:40000", "out of range"), ("trace:xyz", "not a trace id"),
                       ("trace:" + "a" * 33, "not a trace id"), ("chain:zz", "not an id prefix"),
                       ("parent:g1", "not an id prefix")):
        with pytest.raises(BadInput) as raised:
            parse_filter(text)
        assert says in str(raised.value) and "filter keys:" in (raised.value.hint or ""), text


def test_past_deadline_is_a_health_with_its_rank_words_and_colour():
    assert "past_deadline" in HEALTHS
    assert parse_filter("past_deadline").health == "past_deadline"
    assert parse_filter("health:past_deadline").matches(call(health="past_deadline"))
    assert HEALTH_RANK["past_deadline"] == HEALTH_RANK["lease_expired"] == 1
    assert HEALTH_URGENCY["past_deadline"] == "bad"
    assert HEALTH_LABELS["past_deadline"] == "past deadline"
    assert HEALTH_MEANING["past_deadline"] == "running past its deadline: its lease ended with it; the sweep ends it"
    assert health_words("past_deadline", "running") == ("past deadline", STYLE["bad"])


def render(renderable: object) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_a_call_of_a_chain_in_words():
    job = Job.model_validate({**call(health="past_deadline").model_dump(), "accepted_at": NOW - timedelta(seconds=90),
                              "check": Check(found="unknown", checked_at=NOW, token=2)})
    text = render(present.job_panel(job))
    assert f"stage 1 of chain {str(FIRST)[:8]}, made by {str(FIRST)[:8]}" in text
    assert "5 (higher is claimed first)" in text and TRACE in text and "1m30s before it was made" in text
    assert "the service said unknown" in text and "past deadline" in text
    plain = render(present.job_panel(Job.model_validate({**call(parent_id=None, stage=0, priority=0, trace_id=None,
                                                                health="healthy").model_dump(),
                                                         "accepted_at": NOW})))
    assert "chain" not in plain and "priority" not in plain and "trace" not in plain and "check" not in plain


def test_the_metrics_group_by_service_and_carry_accept_wait_and_past_deadline():
    assert check_by("service") == "service"
    with pytest.raises(BadInput, match="use tool, model, provider or service"):
        check_by("agent")
    assert "service" not in BYS, "screen 7 cycles through the keys the filter grammar can open Calls with"
    group = MetricsGroup.from_row({"key": "acme", "accept_wait_p50": 1.5, "accept_wait_p95": 9.0,
                                   "past_deadline": 2})
    data = group.model_dump(mode="json")
    assert data["accept_wait_seconds"] == {"p50": 1.5, "p95": 9.0} and data["past_deadline"] == 2


def _total(tool: str, le: float, n: int, seconds: float, metric: str = "accept_wait") -> TotalRow:
    return TotalRow(metric=metric, tool=tool, model="m", provider="p", le=le, n=n, seconds=seconds,
                    buckets=[10.0, 30.0])


def test_accept_wait_totals_fold_by_the_watermark():
    kept = AcceptWaitTotals()
    kept.add([_total("a", 30.0, 2, 40.0)], through=7)
    merged = kept.with_tail([_total("a", 30.0, 1, 25.0), _total("b", 10.0, 1, 2.0)])
    assert [(r.tool, r.le, r.n, r.seconds) for r in merged] == [("a", 30.0, 3, 65.0), ("b", 10.0, 1, 2.0)]
    assert kept.through == 7 and [(r.n) for r in kept.with_tail([])] == [2], "the tail is not kept"
    kept.restart()
    assert kept.through == 0 and kept.with_tail([]) == []


def test_the_exporter_families_have_the_new_series_and_the_service_label():
    live = [LiveRow(tool="late", side_effect="read_only", service="bing", model="m", provider="p", state="running",
                    calls=2, past_deadline=1, db_now=NOW),
            LiveRow(tool="plain", side_effect="read_only", model="m", provider="p", state="running", calls=1,
                    db_now=NOW)]
    families = {f.name: f for f in exporter.families_of(Scrape(
        live=live, totals=[_total("late", 30.0, 1, 20.0), _total("late", 1.0, 3, 1.0, metric="queue_wait")]))}
    past = {(s.labels["tool"], s.labels["service"]): s.value for s in families["leasectl_past_deadline_calls"].samples}
    assert past == {("late", "bing"): 1, ("plain", ""): 0}
    accept = families["leasectl_accept_wait_seconds"].samples
    assert {s.labels["service"] for s in accept} == {"bing"}
    assert [s.value for s in accept if s.name.endswith("_count")] == [1]
    assert {s.labels["service"] for s in families["leasectl_queue_wait_seconds"].samples} == {"bing"}
    assert set(families["leasectl_calls"].samples[0].labels) == {"tool", "state"}, "the contract's labels"
    described = {f.name for f in exporter.empty_families()}
    assert {"leasectl_accept_wait_seconds", "leasectl_past_deadline_calls"} <= described
