"""A page that reaches a person: a call entering outcome_unknown, seen by `leasectl metrics serve`,
scraped by a real Prometheus running docs/alerts.yml, sent to a real Alertmanager running
docs/alertmanager.yml, and delivered by its webhook to a receiver on loopback -- within the rule's
`for:` plus one evaluation interval (plus one scrape, the exporter's cache and Alertmanager's
group_wait), with the command that opens the call in its annotations. Then that command, run as the
on-call engineer would, opens the call.

Also: the example Alertmanager configuration passes `amtool check-config` and routes by severity,
and the `command` annotation is right with the context from the target, from Prometheus' external
labels, and with neither."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.parse
from datetime import datetime

import pytest

from tests.alerting.conftest import ALERTMANAGER_YML, GROUP_WAIT_SECONDS, Pager, alertmanager_config
from tests.conftest import ROOT
from tests.db.test_exporter_prometheus import EXPORTER_CACHE_SECONDS, http_get, query, start_exporter
from tests.helpers import SLOW, claim, enqueue, register_tool, report_unknown, start_side_effect, wait_until

pytestmark = pytest.mark.alerting

ALERTS = ROOT / "docs" / "alerts.yml"
RULE = "LeasectlOutcomeUnknownCall"
CONTEXT = "prod-eu"
# prometheus_server's global config (tests/db/test_exporter_prometheus.py): both every second
SCRAPE_SECONDS = 1.0
EVALUATION_SECONDS = 1.0
# Beyond the intervals: the scrape's read, two HTTP posts (Prometheus to Alertmanager, Alertmanager
# to the pager) and processes scheduled late on a busy two-core machine. Measured: well under this.
SLACK_SECONDS = 2.0


def rule_for_seconds(alert: str) -> float:
    """The `for:` of one rule of docs/alerts.yml, in seconds (no YAML library needed)."""
    lines = ALERTS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"- alert: {alert}")
    for line in lines[start + 1:]:
        if line.strip().startswith("- alert:"):
            break
        found = re.fullmatch(r"\s*for:\s*(\d+)([smh])\s*", line)
        if found:
            return float(found.group(1)) * {"s": 1, "m": 60, "h": 3600}[found.group(2)]
    raise AssertionError(f"{alert} has no `for:` in {ALERTS}")


def _timestamp(text: str) -> float:
    """An RFC 3339 time from Prometheus or Alertmanager (nanoseconds, Z) as a Unix time."""
    head, _, fraction = text.rstrip("Z").partition(".")
    fraction, _, zone = fraction.partition("+")
    stamp = datetime.fromisoformat(f"{head}.{(fraction or '0')[:6]:0<6}+{zone or '00:00'}")
    return stamp.timestamp()


# ----------------------------------------------------------------------------- the example configuration


def test_amtool_accepts_the_example_alertmanager_configuration(amtool):
    checked = subprocess.run([amtool, "check-config", str(ALERTMANAGER_YML)], capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout and "2 inhibit rules" in checked.stdout, checked.stdout


@pytest.mark.parametrize(("labels", "receiver"), [
    (["alertname=LeasectlOutcomeUnknownCall", "severity=page", "context=prod-eu", "tool=payment_capture"],
     "leasectl-pager"),
    (["alertname=LeasectlDatabaseUnreachable", "severity=page"], "leasectl-pager"),
    (["alertname=LeasectlExpiredLeases", "severity=warning", "context=prod-eu"], "leasectl-tickets"),
    (["alertname=SomethingElse"], "leasectl-tickets"),
])
def test_the_example_routes_pages_to_the_pager_and_warnings_to_tickets(amtool, labels, receiver):
    routed = subprocess.run([amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_YML}",
                             f"--verify.receivers={receiver}", *labels], capture_output=True, text=True, timeout=60)
    assert routed.returncode == 0 and routed.stdout.strip() == receiver, routed.stdout + routed.stderr


def test_the_tier_runs_the_example_but_for_its_urls_and_group_wait(amtool, tmp_path):
    config = alertmanager_config("http://127.0.0.1:1")
    assert "pager.example.com" not in config and "http://127.0.0.1:1/pager" in config
    path = tmp_path / "alertmanager.yml"
    path.write_text(config)
    checked = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(("target_labels", "external_labels", "command"), [
    ('context="prod-eu",', {}, "leasectl --context prod-eu show 0b9e6c1e-1111-4a2b-9c3d-5e6f7a8b9c0d"),
    ("", {"context": "prod-us"}, "leasectl --context prod-us show 0b9e6c1e-1111-4a2b-9c3d-5e6f7a8b9c0d"),
    ('context="prod-eu",', {"context": "prod-us"}, "leasectl --context prod-eu show 0b9e6c1e-1111-4a2b-9c3d-5e6f7a8b9c0d"),
    ("", {}, "leasectl show 0b9e6c1e-1111-4a2b-9c3d-5e6f7a8b9c0d"),
], ids=["target-label", "external-label", "target-label-wins", "no-context"])
def test_the_command_annotation_names_the_context_and_the_call(promtool, tmp_path, target_labels, external_labels,
                                                              command):
    """promtool's rule unit test: the context from the target's label, else from Prometheus'
    external labels, else no --context at all (LEASECTL_CONTEXT or the default then)."""
    call = "0b9e6c1e-1111-4a2b-9c3d-5e6f7a8b9c0d"
    series = (f'leasectl_outcome_unknown_call{{{target_labels}id="{call}",tool="payment_capture",'
              'side_effect="mutating_unverifiable",job="leasectl",instance="127.0.0.1:9464"}')
    expected_labels = {"severity": "page", "id": call, "tool": "payment_capture", "side_effect": "mutating_unverifiable"}
    if target_labels:
        expected_labels["context"] = "prod-eu"
    case = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            **({"external_labels": external_labels} if external_labels else {}),
            "input_series": [{"series": series, "values": "1x10"}],
            "alert_rule_test": [
                {"eval_time": "45s", "alertname": RULE, "exp_alerts": []},  # pending: for 1m
                {"eval_time": "75s", "alertname": RULE, "exp_alerts": [{
                    "exp_labels": expected_labels,
                    "exp_annotations": {
                        "summary": f"payment_capture call {call} has an unknown outcome (mutating_unverifiable)",
                        "command": command,
                        "description": "Its side effect started and its answer was lost; nothing retries it on its "
                                       "own. Open it with the command above, check outside (the provider, the ERP), "
                                       "then approve a retry or mark it terminal (screen 3, Approvals)."}}]},
            ],
        }],
    }
    path = tmp_path / "command_test.yml"
    path.write_text(json.dumps(case))  # JSON is YAML
    tested = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr


# ----------------------------------------------------------------------------- the page, for real


def _prometheus_alerts(base: str, alertname: str) -> list[dict]:
    try:
        answer = json.loads(http_get(f"{base}/api/v1/alerts"))
    except OSError:
        return []
    return [a for a in answer["data"]["alerts"] if a["labels"]["alertname"] == alertname]


def _alertmanager_alerts(address: str, alertname: str) -> list[dict]:
    flt = urllib.parse.quote(f'alertname="{alertname}"')
    return json.loads(http_get(f"http://{address}/api/v2/alerts?filter={flt}"))


def _evaluated_since(base: str, since: float) -> bool:
    """Prometheus evaluated the leasectl rules after `since` (a Unix time)."""
    try:
        groups = json.loads(http_get(f"{base}/api/v1/rules"))["data"]["groups"]
    except OSError:
        return False
    return any(g["name"] == "leasectl" and _timestamp(g["lastEvaluation"]) > since for g in groups)


def test_an_unknown_outcome_pages_a_person_within_for_plus_one_evaluation(db, pager: Pager, alertmanager_server,
                                                                          prometheus_server, tmp_path):
    held = rule_for_seconds(RULE)
    bound = held + EVALUATION_SECONDS + SCRAPE_SECONDS + EXPORTER_CACHE_SECONDS + GROUP_WAIT_SECONDS
    with db.connect() as conn:
        register_tool(conn, "payment_capture", "mutating_unverifiable", **SLOW)
        register_tool(conn, "web_search", "read_only", **SLOW)
        enqueue(conn, "web_search", "search:1")  # another tool, queued: series, no page
        job = enqueue(conn, "payment_capture", "order:1042:capture")
    call_id = str(job["id"])
    exporter, url = start_exporter(db.dsn)
    try:
        alertmanager = alertmanager_server(alertmanager_config(pager.url))
        base = prometheus_server(urllib.parse.urlparse(url).netloc, labels={"context": CONTEXT},
                                 alertmanager=alertmanager)
        # ready before the call moves: Prometheus scrapes leasectl, knows the Alertmanager, evaluates
        wait_until(lambda: query(base, f'leasectl_up{{context="{CONTEXT}"}} == 1'), timeout=60, interval=0.1,
                   what=f"Prometheus to scrape the exporter (log: {tmp_path / 'prometheus.log'})")
        wait_until(lambda: json.loads(http_get(f"{base}/api/v1/alertmanagers"))["data"]["activeAlertmanagers"],
                   timeout=30, interval=0.1, what="Prometheus to find the Alertmanager")
        scraped = time.time()
        wait_until(lambda: _evaluated_since(base, scraped), timeout=30, interval=0.1, what="a rule evaluation")
        assert not query(base, "leasectl_outcome_unknown_call"), "nothing waits yet"

        with db.connect() as conn:  # a worker: claims, starts the side effect, loses the answer
            claimed = claim(conn, "worker-7", ["payment_capture"])
            assert claimed is not None and str(claimed["id"]) == call_id
            assert start_side_effect(conn, claimed, "worker-7") is not None
            entered = time.time()  # before the statement: the measured delay is never flattered
            assert report_unknown(conn, claimed, "worker-7") is not None

        found = wait_until(lambda: pager.find(RULE), timeout=bound + 5, interval=0.05,
                           what=f"the page for {call_id} at the webhook within {bound:.1f}s (+5s) "
                                f"(logs: {tmp_path / 'prometheus.log'}, {tmp_path / 'alertmanager.log'})")
        delivery, alert = found[0]
        active = next(a for a in _prometheus_alerts(base, RULE) if a["labels"]["id"] == call_id)

        # what reached the person: the pager's route, one call, and the command that opens it
        assert delivery.path == "/pager/hooks/leasectl", "severity page goes to the pager receiver"
        assert delivery.body["receiver"] == "leasectl-pager" and delivery.body["status"] == "firing"
        assert delivery.body["groupLabels"] == {"alertname": RULE, "context": CONTEXT, "tool": "payment_capture"}
        assert len(found) == 1 and alert["status"] == "firing"
        assert alert["labels"] == {"alertname": RULE, "severity": "page", "context": CONTEXT, "id": call_id,
                                   "tool": "payment_capture", "side_effect": "mutating_unverifiable"}
        command = alert["annotations"]["command"]
        assert command == f"leasectl --context {CONTEXT} show {call_id}"
        assert call_id in alert["annotations"]["summary"]

        # when: fired after `for:`, and delivered within for: + one evaluation (+ scrape, cache, group_wait)
        received = delivery.received_at
        fired = _timestamp(alert["startsAt"])
        pending_from = _timestamp(active["activeAt"])
        total = received - entered
        print(f"\nalerting tier: entered outcome_unknown -> pending {pending_from - entered:.2f}s, "
              f"pending -> fired {fired - pending_from:.2f}s (for: {held:g}s), fired -> webhook received "
              f"{received - fired:.2f}s (group_wait {GROUP_WAIT_SECONDS:g}s); entered -> received {total:.2f}s, "
              f"bound {bound:.1f}s (for + eval + scrape + cache + group_wait) + {SLACK_SECONDS:g}s slack")
        assert fired - pending_from >= held - 0.01, "the rule held for its `for:` before firing"
        assert total >= held, "not before `for:`"
        assert pending_from - entered <= SCRAPE_SECONDS + EVALUATION_SECONDS + EXPORTER_CACHE_SECONDS + SLACK_SECONDS
        assert received - fired <= GROUP_WAIT_SECONDS + SLACK_SECONDS
        assert total <= bound + SLACK_SECONDS, f"delivered {total:.2f}s after the call entered outcome_unknown"

        # the count for the same tool pages nobody while its calls page one by one (the example's inhibit rule)
        counted = wait_until(lambda: _alertmanager_alerts(alertmanager, "LeasectlOutcomeUnknown"), timeout=10,
                             what="the count's alert at Alertmanager")
        assert counted[0]["labels"]["tool"] == "payment_capture"
        assert counted[0]["status"]["state"] == "suppressed" and counted[0]["status"]["inhibitedBy"], counted
        time.sleep(max(0.0, received + GROUP_WAIT_SECONDS + 1.0 - time.time()))
        assert not pager.find("LeasectlOutcomeUnknown"), "the inhibited count reached the pager"
    finally:
        exporter.terminate()
        exporter.wait(timeout=15)

    # the command in the page opens the call, for an engineer whose contexts.toml names the database prod-eu
    config = tmp_path / "config"
    (config / "leasectl").mkdir(parents=True)
    (config / "leasectl" / "contexts.toml").write_text(f'[contexts.{CONTEXT}]\ndsn = "{db.dsn}"\n')
    argv = shlex.split(command)
    assert argv[0] == "leasectl"
    env = {k: v for k, v in os.environ.items() if k not in ("LEASECTL_DSN", "DATABASE_URL", "LEASECTL_CONTEXT")}
    opened = subprocess.run([sys.executable, "-m", "console", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env={**env, "XDG_CONFIG_HOME": str(config), "COLUMNS": "200",
                                             "NO_COLOR": "1"})
    assert opened.returncode == 0, opened.stdout + opened.stderr
    assert f"call {call_id[:8]}" in opened.stdout and "order:1042:capture" in opened.stdout, opened.stdout
    assert "outcome unknown" in opened.stdout, opened.stdout
