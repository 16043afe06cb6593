"""docs/grafana-dashboard.json: it loads, its panels are well formed, and every PromQL expression
names only series the exporter serves -- names derived from the exporter's own metric
definitions (console.operator.exporter.empty_families, what its describe() answers), never from a
list kept here -- and every family the exporter serves is on some panel. The alerting tier
(tests/alerting/test_dashboard_queries.py) runs every expression in a real Prometheus scraping the
real exporter."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.operator import exporter

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
# Grafana's variables, replaced by what a query may hold there before the expression is read
VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "${context}": ".*", "$context": ".*",
             "${tool}": ".*", "$tool": ".*"}
# series Prometheus makes itself for every target: allowed beside the exporter's
PROMETHEUS_SERIES = {"up"}
# words of PromQL that are neither metrics nor functions (a function is a name followed by "(")
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
            "atan2", "inf", "nan"}


def exporter_series() -> dict[str, str]:
    """Every series name the exporter can serve -> its family, from its own definitions: a gauge by
    its name, a counter with _total, a histogram's _bucket, _sum and _count."""
    names: dict[str, str] = {}
    for family in exporter.empty_families():
        if family.type == "counter":
            names[f"{family.name}_total"] = family.name
        elif family.type == "histogram":
            names.update({f"{family.name}{suffix}": family.name for suffix in ("_bucket", "_sum", "_count")})
        else:
            names[family.name] = family.name
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label matchers,
    ranges, label lists (by, without, on, ignoring, group_*) and function names are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    found = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word, before = match.group(), text[:match.start()]
        if before and (before[-1].isdigit() or before[-1] == "."):
            continue  # the exponent or unit of a number: 1e3, 5m
        if text[match.end():].lstrip().startswith("(") or word.lower() in KEYWORDS:
            continue
        found.add(word)
    return found


def substituted(expr: str) -> str:
    for name, value in sorted(VARIABLES.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a variable the dashboard does not define: {expr}"
    return expr


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def expressions(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL with Grafana's variables replaced) of every target; and the metric of
    each query variable's label_values(METRIC{...}, label)."""
    found = [(panel["title"], substituted(target["expr"]))
             for panel in panels(dashboard) for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            selector = re.fullmatch(r"label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\)", query)
            assert selector, f"variable {variable['name']}: {query}"
            found.append((f"variable {variable['name']}", substituted(selector.group(1))))
    return found


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (le, tool) (rate(leasectl_queue_wait_seconds_bucket{context=~".*", tool="a{b}"}[5m]))',
     {"leasectl_queue_wait_seconds_bucket"}),
    ("histogram_quantile(0.95, sum(rate(x_bucket[1m])) by (le)) > 1e3", {"x_bucket"}),
    ("sum(rate(a_sum[5m])) / on (tool) group_left (service) sum(rate(a_count[5m] offset 5m))", {"a_sum", "a_count"}),
    ('up{job="leasectl"} == 0 and leasectl_up', {"up", "leasectl_up"}),
    ("leasect_calls", {"leasect_calls"}),  # a typo is a name too: the test below refuses it
])
def test_the_reader_finds_the_metric_names(expr, names):
    assert metric_names(expr) == names


def test_the_series_names_come_from_the_exporter():
    names = exporter_series()
    assert "leasectl_calls" in names and "leasectl_queue_wait_seconds_bucket" in names
    assert "leasectl_renewal_failures_total" in names and "leasectl_outcome_unknown_call" in names


def test_the_dashboard_loads_and_its_panels_are_well_formed():
    dashboard = load()
    assert dashboard["uid"] == "leasectl-overview" and dashboard["title"]
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "context", "tool"}
    for panel in panels(dashboard):
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"{panel['title']}: no query"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip(), panel["title"]


def test_every_expression_names_only_series_the_exporter_serves():
    known = set(exporter_series()) | PROMETHEUS_SERIES
    unknown = {(title, expr, name) for title, expr in expressions(load()) for name in metric_names(expr) - known}
    assert not unknown, f"not served by leasectl metrics serve: {sorted(unknown)}"
    for title, expr in expressions(load()):
        assert metric_names(expr), f"{title}: {expr} selects no metric"


def test_every_family_the_exporter_serves_is_on_a_panel():
    series = exporter_series()
    shown = {series[name] for _, expr in expressions(load()) for name in metric_names(expr) if name in series}
    missing = set(series.values()) - shown
    assert not missing, f"the dashboard shows nothing of {sorted(missing)}"


def test_every_expression_keeps_the_context_filter():
    """One dashboard for several databases: every query follows the Context variable."""
    for title, expr in expressions(load()):
        if title.startswith("variable context"):
            continue
        for name in metric_names(expr):
            selectors = re.findall(rf"(?<![A-Za-z0-9_:]){name}(\{{[^}}]*\}})?", expr)
            assert selectors and all('context=~".*"' in s for s in selectors), f"{title}: {name} in {expr}"
