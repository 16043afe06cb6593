"""docs/grafana-dashboard.json against a real Prometheus scraping the real exporter over the demo's
fixed scenario: every expression parses and answers, and every series name it uses is one the
exporter really serves (its names read from Prometheus, not from a list). The unit test
(tests/unit/test_grafana_dashboard.py) checks the same names against the exporter's definitions
without any server."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse

import pytest

from console.demo.scenario import load_fixed_scenario
from tests.db.test_exporter_prometheus import http_get, query, start_exporter
from tests.helpers import wait_until
from tests.unit.test_grafana_dashboard import PROMETHEUS_SERIES, exporter_series, expressions, load, metric_names

pytestmark = pytest.mark.alerting


def _answer(base: str, expr: str) -> dict:
    """Prometheus' answer to an instant query; a query it refuses fails with its reason."""
    try:
        text = http_get(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}")
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"Prometheus refused {expr}: {exc.read().decode()}") from None
    answer = json.loads(text)
    assert answer["status"] == "success", answer
    return answer["data"]


def test_every_dashboard_expression_answers_in_a_real_prometheus(db, prometheus_server, tmp_path):
    with db.connect() as conn:
        load_fixed_scenario(conn)
    exporter, url = start_exporter(db.dsn)
    try:
        base = prometheus_server(urllib.parse.urlparse(url).netloc, labels={"context": "demo"})
        wait_until(lambda: query(base, 'leasectl_up{context="demo"} == 1'), timeout=60, interval=0.1,
                   what=f"Prometheus to scrape the exporter (log: {tmp_path / 'prometheus.log'})")
        time.sleep(2.5)  # a few more scrapes: rate() over them has two samples at least
        served = set(json.loads(http_get(f"{base}/api/v1/label/__name__/values"))["data"])
        answered = {expr: _answer(base, expr) for _, expr in expressions(load())}
    finally:
        exporter.terminate()
        exporter.wait(timeout=15)

    leasectl = {name for name in served if name.startswith("leasectl_")}
    assert leasectl <= set(exporter_series()), f"served but not in the exporter's definitions: {leasectl - set(exporter_series())}"
    used = {name for _, expr in expressions(load()) for name in metric_names(expr)}
    assert served >= PROMETHEUS_SERIES
    assert used <= served, f"the dashboard uses names the real exporter did not serve: {sorted(used - served)}"
    # the panels of what needs a person show the scenario's two calls in outcome_unknown
    waiting = next(d for expr, d in answered.items() if expr.startswith("sum(leasectl_outcome_unknown_calls"))
    assert float(waiting["result"][0]["value"][1]) == 2
    listed = next(d for expr, d in answered.items() if "(leasectl_outcome_unknown_call{" in expr)
    assert {r["metric"]["context"] for r in listed["result"]} == {"demo"} and len(listed["result"]) == 2
