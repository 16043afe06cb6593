"""The alerting tier: a real Prometheus and a real Alertmanager (Debian's prometheus and
prometheus-alertmanager; `make tools` installs them when it can) on loopback, with the project's
docs/alerts.yml and docs/alertmanager.yml, and an HTTP server of the test's own as the pager.

Every test here is marked `alerting` (`make test` runs them apart: `-m alerting tests/alerting`).
A missing binary skips the test and says why; under `make test-alerting`
(LEASECTL_ALERTING_REQUIRED=1) it fails instead.

The Prometheus side (the binaries, the exporter, the server fixture) is shared with
tests/db/test_exporter_prometheus.py rather than copied.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.db.test_exporter_prometheus import free_port, http_get, prometheus_server, tool_path  # noqa: F401
from tests.helpers import wait_until

ALERTMANAGER_YML = ROOT / "docs" / "alertmanager.yml"
MISSING = ("Debian's prometheus and prometheus-alertmanager packages (prometheus, promtool, "
           "prometheus-alertmanager, amtool) are not installed and could not be: `make tools` installs them")
# the example's receivers, which the tier points at its own server (the paths say which receiver)
PAGER_URL = "https://pager.example.com"
TICKETS_URL = "https://tickets.example.com"
# Alertmanager's wait before the first notification of a group, here (the example says 30s)
GROUP_WAIT_SECONDS = 1.0


def binary(*names: str) -> str:
    """The first of `names` on PATH (or in /usr/bin); skipped, or failed under
    LEASECTL_ALERTING_REQUIRED, when none is there."""
    for name in names:
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if found:
            return found
    if os.environ.get("LEASECTL_ALERTING_REQUIRED"):
        pytest.fail(f"{' or '.join(names)} not found: {MISSING}")
    return tool_path(names[0], MISSING)  # skips, saying why


@pytest.fixture
def prometheus_bin() -> str:  # the shared prometheus_server fixture asks for it: required here too
    return binary("prometheus")


@pytest.fixture
def promtool() -> str:
    return binary("promtool")


@pytest.fixture
def amtool() -> str:
    return binary("amtool")


@pytest.fixture
def alertmanager_bin() -> str:
    return binary("prometheus-alertmanager", "alertmanager")  # Debian names its server prometheus-alertmanager


# ----------------------------------------------------------------------------- the pager


@dataclass
class Delivery:
    """One POST of Alertmanager's webhook, as the receiver saw it."""

    path: str
    received_at: float  # time.time() when its body was read
    body: dict[str, Any]


@dataclass
class Pager:
    url: str
    deliveries: list[Delivery] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def find(self, alertname: str) -> list[tuple[Delivery, dict]]:
        with self.lock:
            return [(d, a) for d in self.deliveries for a in d.body.get("alerts", [])
                    if a["labels"].get("alertname") == alertname]


@pytest.fixture
def pager() -> Iterator[Pager]:
    """A webhook receiver on loopback: records every POST (path, arrival, JSON body) and answers 200."""
    holder: list[Pager] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            arrived = time.time()
            with holder[0].lock:
                holder[0].deliveries.append(Delivery(self.path, arrived, json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Pager(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, name="test-pager", daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------------------- Alertmanager


def alertmanager_config(pager_url: str, *, group_wait: float = GROUP_WAIT_SECONDS) -> str:
    """docs/alertmanager.yml as it is, but for its receivers' URLs (the pager here: /pager and
    /tickets) and a short group_wait. Text replaced, each exactly once: the example drifting from
    what the tier runs fails here, not silently."""
    text = ALERTMANAGER_YML.read_text()
    for old, new in ((PAGER_URL, f"{pager_url}/pager"), (TICKETS_URL, f"{pager_url}/tickets"),
                     ("group_wait: 30s", f"group_wait: {group_wait:g}s")):
        assert text.count(old) == 1, f"docs/alertmanager.yml should say {old!r} once"
        text = text.replace(old, new)
    return text


@pytest.fixture
def alertmanager_server(alertmanager_bin: str, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """start(config text) runs Alertmanager on a free loopback port (no cluster gossip) and answers
    its HOST:PORT once it says it is ready."""
    started: list[subprocess.Popen] = []

    def start(config: str) -> str:
        path = tmp_path / "alertmanager.yml"
        path.write_text(config)
        address = f"127.0.0.1:{free_port()}"
        log = (tmp_path / "alertmanager.log").open("w")
        proc = subprocess.Popen([alertmanager_bin, f"--config.file={path}", f"--storage.path={tmp_path / 'am'}",
                                 f"--web.listen-address={address}", "--cluster.listen-address="],
                                stdout=log, stderr=subprocess.STDOUT)
        started.append(proc)

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"alertmanager exited: {(tmp_path / 'alertmanager.log').read_text()}")
            try:
                http_get(f"http://{address}/-/ready")
            except OSError:
                return False
            return True

        wait_until(ready, timeout=30, interval=0.1, what=f"Alertmanager on {address} (log: {tmp_path / 'alertmanager.log'})")
        return address

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
