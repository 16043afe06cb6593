"""The real `leasectl` command in a real terminal (tmux), driven by keys, read from the screen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import claim, enqueue, job, register_tool

pytestmark = [pytest.mark.tmux, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

LEASECTL = Path(sys.executable).parent / "leasectl"


class Terminal:
    def __init__(self, command: list[str]) -> None:
        self.name = f"leasectl-test-{uuid.uuid4().hex[:8]}"
        shell = " ".join(f"'{part}'" for part in command)
        # A tmux server that was already running starts the command with its own environment, not
        # the test's: the log directory the tests chose (tests/conftest.py) is passed explicitly.
        log_dir = os.environ["LEASECTL_LOG_DIR"]
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "140", "-y", "45",
                        # COLUMNS/LINES from the test runner would override the real terminal size
                        f"env -u COLUMNS -u LINES TERM=xterm-256color LEASECTL_LOG_DIR='{log_dir}' {shell}; sleep 5"],
                       check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True,
                              text=True, check=False).stdout

    def keys(self, *keys: str) -> None:
        for key in keys:
            subprocess.run(["tmux", "send-keys", "-t", self.name, key], check=True)
            time.sleep(0.15)

    def type(self, text: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, "-l", text], check=True)
        time.sleep(0.2)

    def wait_for(self, text: str, timeout: float = 15) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared; the screen shows:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True, check=False)


def test_real_console_in_tmux(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", lease_seconds=60, heartbeat_seconds=5, missed_heartbeats=2,
                      jitter_seconds=5)
        e = enqueue(conn, "search", "tmux:1")
        claim(conn, "w-tmux")
    short = str(e["id"])[:8]
    term = Terminal([str(LEASECTL), "--dsn", db.dsn, "--operator", "tess"])
    try:
        # the header's own words (the footer says "1 Triage" too, and can be drawn first)
        screen = term.wait_for("tess@")
        assert "1 Triage" in screen and "read-write" in screen
        term.keys("2")
        term.wait_for("page 1 · ")
        term.wait_for(short)
        term.keys("/")
        term.wait_for("filter keys")  # the filter box is open (its hint shows), as a person would see
        term.type(f"id:{short}")
        term.keys("Enter")
        term.wait_for(f"filter id:{short}")
        term.keys("c")
        term.wait_for("why are you doing this?")  # the reason field is there
        time.sleep(0.5)  # a person reads the dialog first (it ignores keys typed before it appeared)
        term.type("done with it")
        term.keys("Enter")
        term.wait_for("APPLIED")
        with db.connect() as conn:
            assert job(conn, e["id"])["state"] == "cancel_requested"
        term.keys("Escape")
        deadline = time.monotonic() + 10
        while "APPLIED" in term.screen():
            assert time.monotonic() < deadline, "the dialog did not close"
            time.sleep(0.1)
        term.keys("q")
        deadline = time.monotonic() + 10
        while "1 Triage" in term.screen() or "2 Calls" in term.screen():
            assert time.monotonic() < deadline, "q did not quit:\n" + term.screen()
            time.sleep(0.2)
    finally:
        term.close()


def test_unreachable_database_shows_a_banner_not_a_traceback():
    term = Terminal([str(LEASECTL), "--dsn", "postgresql://nobody@127.0.0.1:1/x?connect_timeout=1"])
    try:
        screen = term.wait_for("DATABASE UNREACHABLE")
        assert "Traceback" not in screen
        term.keys("q")
    finally:
        term.close()
