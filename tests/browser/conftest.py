"""The browser tier: the real `leasectl serve` (a subprocess, on a free loopback port, its users file
written by the real `leasectl serve users add`) on a real database, driven by Debian's headless
chromium through its chromedriver (tests/browser/harness.py reads the terminal the tab received).

Every test here is marked `browser` (`make test` runs them apart: `-m browser tests/browser`). No
chromium or chromedriver: the tests skip and say why; under `make test-browser`
(LEASECTL_BROWSER_REQUIRED=1) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.harness import MISSING, Serve, Tab, add_user, browser_paths, chrome, start_serve

# the two people of the tier: an operator who acts, a viewer who may only look; each their own login
ALICE, ALICE_PASSWORD, ALICE_LOGIN = "alice", "correct horse battery", "web_alice"
VICTOR, VICTOR_PASSWORD, VICTOR_LOGIN = "victor", "viewer password 1", "web_victor"
LOGINS = {ALICE_LOGIN: "leasectl_operator", VICTOR_LOGIN: "leasectl_auditor"}


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    """(chromium, chromedriver): skipped when missing, failed under LEASECTL_BROWSER_REQUIRED."""
    paths = browser_paths()
    if paths is None:
        if os.environ.get("LEASECTL_BROWSER_REQUIRED"):
            pytest.fail(f"chromium or chromedriver not found: {MISSING}")
        pytest.skip(f"chromium or chromedriver not found: {MISSING}")
    return paths


@pytest.fixture(scope="module")
def users_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """alice (operator, login web_alice) and victor (viewer, login web_victor), as an admin adds them."""
    path = tmp_path_factory.mktemp("web-users") / "users.toml"
    add_user(path, ALICE, "operator", ALICE_PASSWORD, ALICE_LOGIN)
    add_user(path, VICTOR, "viewer", VICTOR_PASSWORD, VICTOR_LOGIN)
    return path


@pytest.fixture
def serve(db: Any, logins: Any, users_file: Path, tmp_path: Path, chromium: tuple[str, str]
          ) -> Iterator[Callable[..., Serve]]:
    """start(*options) runs `leasectl --dsn <the test's database> serve --listen 127.0.0.1:<free>
    --users <users_file> *options`; stopped (SIGINT, as Ctrl+C) after the test, its log printed
    (pytest shows it when the test fails)."""
    started: list[Serve] = []

    def start(*options: str) -> Serve:
        server = start_serve(db.dsn, users_file, tmp_path / f"serve-{len(started)}.log", *options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
        print(f"---- leasectl serve on {server.port} ----\n{server.log_text()}")


@pytest.fixture
def tabs(chromium: tuple[str, str]) -> Iterator[Callable[[Serve], Tab]]:
    """open(server) is a fresh headless chromium (its own cookies) on that server; quit after the test."""
    drivers: list[Any] = []

    def open_tab(server: Serve) -> Tab:
        driver = chrome(*chromium)
        drivers.append(driver)
        return Tab(driver, server.url)

    yield open_tab
    for driver in drivers:
        try:
            driver.quit()
        except Exception:  # noqa: BLE001 - a browser that died already is quit
            pass

