"""The exporter against the real Prometheus tools (Debian's prometheus package; `make test`
installs it through `make tools`): `promtool check metrics` on the real output, a real Prometheus
server on loopback scraping `leasectl metrics serve` and answering a query through its HTTP API,
and the example alert rules (docs/alerts.yml) checked, unit-tested and evaluated by that server.

The alerting tier (tests/alerting) shares the helpers below: tool_path, free_port, http_get,
start_exporter, query and the prometheus_server fixture."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.demo.scenario import load_fixed_scenario
from console.operator import exporter
from tests.conftest import ROOT
from tests.helpers import enqueue, register_tool, wait_until

ALERTS = ROOT / "docs" / "alerts.yml"
MISSING = "Debian's prometheus package (promtool, prometheus) is not installed and could not be: `make tools` installs it"


def tool_path(name: str, missing: str = MISSING) -> str:
    """The binary's path, or the test skips saying why (`missing`)."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if found is None:
        pytest.skip(f"{name} not found: {missing}")
    return found


@pytest.fixture
def promtool() -> str:
    return tool_path("promtool")


@pytest.fixture
def prometheus_bin() -> str:
    return tool_path("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def test_promtool_check_metrics_passes_on_the_real_output(db, promtool):
    with db.connect() as conn:
        load_fixed_scenario(conn)
        # hostile label values: quotes, a backslash, a newline, non-ASCII; prometheus_client escapes them
        register_tool(conn, 'we"ird\\tool\nname', "read_only")
        enqueue(conn, 'we"ird\\tool\nname', model="модель-ü", provider='pro"vider')
    running = exporter.start(db.dsn, "127.0.0.1:0", cache_seconds=0, fold_every=None)
    try:
        text = http_get(running.url)
    finally:
        running.stop()
    for family in ("leasectl_up", "leasectl_calls", "leasectl_oldest_heartbeat_age_seconds",
                   "leasectl_min_lease_left_seconds", "leasectl_expired_leases", "leasectl_cancel_unheard_calls",
                   "leasectl_outcome_unknown_calls", "leasectl_renewal_failures_total", "leasectl_reclaims_total",
                   "leasectl_stale_writes_rejected_total", "leasectl_db_timeouts_total",
                   "leasectl_queue_wait_seconds", "leasectl_start_confirm_seconds"):
        assert f"# TYPE {family} " in text, family
    assert 'tool="we\\"ird\\\\tool\\nname"' in text
    assert 'le="86400.0"' in text and 'le="+Inf"' in text, "buckets reach a day: long tool calls fit"
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "" and checked.stderr.strip() == "", checked.stdout + checked.stderr


def test_promtool_check_metrics_passes_when_the_database_is_down(promtool):
    running = exporter.start("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", "127.0.0.1:0",
                             cache_seconds=0, fold_every=None)
    try:
        text = http_get(running.url)
    finally:
        running.stop()
    assert "leasectl_up 0.0" in text
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr


def test_the_alert_rules_are_valid(promtool):
    checked = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = sum(1 for line in ALERTS.read_text().splitlines() if line.strip().startswith("- alert:"))
    assert rules == 10 and f"SUCCESS: {rules} rules found" in checked.stdout, checked.stdout


def _description(alert: str) -> str:
    """The folded `description: >-` of one rule of docs/alerts.yml (no YAML library needed)."""
    lines = ALERTS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"- alert: {alert}")
    i = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("description:"))
    inline = lines[i].split("description:", 1)[1].strip()
    if inline != ">-":
        return inline
    body = []
    for line in lines[i + 1:]:
        if not line.startswith(" " * 12):
            break
        body.append(line.strip())
    return " ".join(body)


def test_the_alert_rules_fire_on_the_seeds_signals(promtool, tmp_path):
    """promtool's rule unit tests: an unknown outcome pages after a minute, an unheard cancel and
    orphaned agents after two, and none fires on zero."""
    case = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'leasectl_outcome_unknown_calls{tool="payment_capture",side_effect="mutating_unverifiable"}',
                 "values": "0 1 1 1 1"},
                {"series": 'leasectl_outcome_unknown_calls{tool="web_search",side_effect="read_only"}',
                 "values": "0 0 0 0 0"},
                {"series": 'leasectl_cancel_unheard_calls{tool="web_search",model="m",provider="p"}',
                 "values": "0 1 1 1 1"},
                {"series": "leasectl_orphaned_agents", "values": "0 2 2 2 2"},
            ],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "LeasectlOutcomeUnknown", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "LeasectlOutcomeUnknown", "exp_alerts": [{
                    "exp_labels": {"severity": "page", "tool": "payment_capture",
                                   "side_effect": "mutating_unverifiable"},
                    "exp_annotations": {
                        "summary": "1 payment_capture call(s) with an unknown outcome (mutating_unverifiable)",
                        "description": _description("LeasectlOutcomeUnknown")}}]},
                {"eval_time": "2m", "alertname": "LeasectlCancelUnheard", "exp_alerts": []},
                {"eval_time": "4m", "alertname": "LeasectlCancelUnheard", "exp_alerts": [{
                    "exp_labels": {"severity": "page", "tool": "web_search"},
                    "exp_annotations": {
                        "summary": "1 cancel(s) of web_search calls unheard for longer than 2H + J",
                        "description": _description("LeasectlCancelUnheard")}}]},
                {"eval_time": "2m", "alertname": "LeasectlOrphanedAgents", "exp_alerts": []},
                {"eval_time": "4m", "alertname": "LeasectlOrphanedAgents", "exp_alerts": [{
                    "exp_labels": {"severity": "page"},
                    "exp_annotations": {
                        "summary": "2 orphaned agent(s): their ancestor is terminated or silent while they still run",
                        "description": _description("LeasectlOrphanedAgents")}}]},
            ],
        }],
    }
    path = tmp_path / "alerts_test.yml"
    path.write_text(json.dumps(case))  # JSON is YAML
    tested = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr


# ----------------------------------------------------------------------------- a real Prometheus


EXPORTER_CACHE_SECONDS = 0.5  # start_exporter's --cache-seconds: how stale a scrape's values may be


def start_exporter(dsn: str) -> tuple[subprocess.Popen, str]:
    """`leasectl metrics serve` as a user runs it, on a free port it reports on its first line."""
    proc = subprocess.Popen([sys.executable, "-m", "console", "metrics", "serve", "--listen", "127.0.0.1:0",
                             "--cache-seconds", str(EXPORTER_CACHE_SECONDS), "--dsn", dsn], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        proc.kill()
        raise AssertionError(f"the exporter did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split()[1]


@pytest.fixture
def prometheus_server(prometheus_bin, tmp_path) -> Iterator:
    """start(target) runs a Prometheus scraping `target` every second with docs/alerts.yml, and
    answers its base URL; `labels` go to the target (the `context` label, say), `alertmanager`
    (HOST:PORT) is where its alerts go, `rule_files` replace docs/alerts.yml."""
    started: list[subprocess.Popen] = []

    def start(target: str, *, labels: dict[str, str] | None = None, alertmanager: str | None = None,
              rule_files: list[Path] | None = None) -> str:
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in rule_files or [ALERTS]],
            "scrape_configs": [{"job_name": "leasectl", "metrics_path": "/metrics",
                                "static_configs": [{"targets": [target], "labels": labels or {}}]}],
            **({"alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}}
               if alertmanager else {}),
        }))
        log = (tmp_path / "prometheus.log").open("w")
        proc = subprocess.Popen([prometheus_bin, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        started.append(proc)
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def query(base: str, promql: str) -> list[dict]:
    try:
        answer = json.loads(http_get(f"{base}/api/v1/query?query={urllib.parse.quote(promql)}"))
    except OSError:
        return []  # not listening yet
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_a_real_prometheus_scrapes_the_exporter_and_answers_a_query(db, prometheus_server, tmp_path):
    with db.connect() as conn:
        load_fixed_scenario(conn)  # two calls wait in outcome_unknown: an ERP update and a payment
    proc, url = start_exporter(db.dsn)
    try:
        base = prometheus_server(urllib.parse.urlparse(url).netloc)
        found = wait_until(lambda: query(base, "leasectl_outcome_unknown_calls"), timeout=90,
                           what="Prometheus to scrape leasectl (log: " + str(tmp_path / "prometheus.log") + ")")
        values = {(r["metric"]["tool"], r["metric"]["side_effect"]): float(r["value"][1]) for r in found}
        assert values[("payment_capture", "mutating_unverifiable")] == 1
        assert values[("erp_update_order", "mutating_verifiable")] == 1
        assert values[("web_search", "read_only")] == 0
        assert all(r["metric"]["job"] == "leasectl" for r in found)
        total = query(base, "sum(leasectl_outcome_unknown_calls)")
        assert float(total[0]["value"][1]) == 2
        # the example rule sees the same: the unknown outcomes are pending (for: 1m) or firing
        alerts = wait_until(lambda: [a for a in json.loads(http_get(f"{base}/api/v1/alerts"))["data"]["alerts"]
                                     if a["labels"]["alertname"] == "LeasectlOutcomeUnknown"], timeout=60,
                            what="the LeasectlOutcomeUnknown rule to be evaluated")
        assert {a["labels"]["tool"] for a in alerts} == {"payment_capture", "erp_update_order"}
        up = query(base, 'up{job="leasectl"}')
        assert float(up[0]["value"][1]) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    time.sleep(0)
    assert re.match(r"http://127\.0\.0\.1:\d+/metrics", url)
