"""The per-call series the page's command comes from: leasectl_outcome_unknown_call{id, tool,
side_effect} 1 for each call waiting in outcome_unknown, at most exporter.LISTED_UNKNOWN of them, the
longest waiting first, and leasectl_outcome_unknown_unlisted_calls for the rest -- bounded, and
stable (a listed call stays listed until it leaves the state, so its alert does not flap).
These need the database only, not Prometheus: they run in the alerting tier beside the page they serve."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.core.metrics import LiveRow, Scrape, WaitingCall, WaitingCalls
from console.operator import exporter
from tests.db.test_exporter_prometheus import http_get
from tests.helpers import SLOW, claim, enqueue, mark_terminal, register_tool, report_unknown, start_side_effect

pytestmark = pytest.mark.alerting

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _scrape(dsn: str) -> dict[str, list]:
    """The real exporter's /metrics, by family: its samples."""
    running = exporter.start(dsn, "127.0.0.1:0", cache_seconds=0, fold_every=None)
    try:
        text = http_get(running.url)
    finally:
        running.stop()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _listed(families: dict[str, list]) -> list[str]:
    return [s.labels["id"] for s in families["leasectl_outcome_unknown_call"]]


def _unlisted(families: dict[str, list]) -> float:
    return families["leasectl_outcome_unknown_unlisted_calls"][0].value


def _into_outcome_unknown(conn, job: dict, worker: str) -> None:
    claimed = claim(conn, worker, [job["tool"]])
    assert claimed is not None and claimed["id"] == job["id"]
    assert start_side_effect(conn, claimed, worker) is not None
    assert report_unknown(conn, claimed, worker) is not None


def test_each_waiting_call_has_a_series_with_its_id(db):
    with db.connect() as conn:
        register_tool(conn, "pay", "mutating_unverifiable", **SLOW)
        register_tool(conn, "search", "read_only", **SLOW)
        waiting = enqueue(conn, "pay", "pay:1")
        _into_outcome_unknown(conn, waiting, "w-1")
        enqueue(conn, "search", "search:1")
    families = _scrape(db.dsn)
    [sample] = families["leasectl_outcome_unknown_call"]
    assert sample.labels == {"id": str(waiting["id"]), "tool": "pay", "side_effect": "mutating_unverifiable"}
    assert sample.value == 1
    assert _unlisted(families) == 0


def test_no_call_waiting_means_no_series_and_zero_unlisted(db):
    with db.connect() as conn:
        register_tool(conn, "pay", "mutating_unverifiable", **SLOW)
        enqueue(conn, "pay", "pay:1")
    families = _scrape(db.dsn)
    assert families["leasectl_outcome_unknown_call"] == []
    assert _unlisted(families) == 0


def test_the_series_are_capped_the_longest_waiting_listed_and_the_rest_counted(db):
    cap = exporter.LISTED_UNKNOWN
    with db.connect() as conn:
        register_tool(conn, "pay", "mutating_unverifiable", **SLOW)
        # created first, but it enters outcome_unknown last: it waits the least, so it is not listed
        early = enqueue(conn, "pay", "pay:early")
        claimed_early = claim(conn, "w-early", ["pay"])
        assert claimed_early is not None and start_side_effect(conn, claimed_early, "w-early") is not None
        made = []
        for n in range(cap + 2):
            job = enqueue(conn, "pay", f"pay:{n}")
            _into_outcome_unknown(conn, job, f"w-{n}")
            made.append(str(job["id"]))
        assert report_unknown(conn, claimed_early, "w-early") is not None

    families = _scrape(db.dsn)
    assert _listed(families) == made[:cap], "the longest waiting, in the order they entered"
    assert _unlisted(families) == 3, "the rest, counted: two of the batch and the early call"
    total = sum(s.value for s in families["leasectl_outcome_unknown_calls"])
    assert total == cap + 3 == len(_listed(families)) + _unlisted(families)

    # a person settles the first: the next longest waiting takes its place; the others stay listed
    with db.connect() as conn:
        assert mark_terminal(conn, made[0], "outcome_unknown", 1, "failed") is not None
    families = _scrape(db.dsn)
    assert _listed(families) == made[1:cap + 1]
    assert _unlisted(families) == 2
    assert str(early["id"]) not in _listed(families)


def test_the_families_never_list_more_than_the_cap_and_count_all_when_not_read():
    cap = exporter.LISTED_UNKNOWN
    many = WaitingCalls(tuple(WaitingCall(f"id-{n}", "pay", "mutating_unverifiable")
                              for n in range(cap + 10)), waiting=cap + 25)
    live = [LiveRow(tool="pay", side_effect="mutating_unverifiable", state="outcome_unknown", calls=cap + 25,
                    db_now=NOW)]
    families = {f.name: f for f in exporter.families_of(Scrape(live=live, totals=[]), many)}
    assert len(families["leasectl_outcome_unknown_call"].samples) == cap
    assert families["leasectl_outcome_unknown_unlisted_calls"].samples[0].value == 25
    # a reader that did not list them (no per-call read): all are counted, none listed
    alone = {f.name: f for f in exporter.families_of(Scrape(live=live, totals=[]))}
    assert alone["leasectl_outcome_unknown_call"].samples == []
    assert alone["leasectl_outcome_unknown_unlisted_calls"].samples[0].value == cap + 25
    described = {f.name for f in exporter.empty_families()}
    assert {"leasectl_outcome_unknown_call", "leasectl_outcome_unknown_unlisted_calls"} <= described
