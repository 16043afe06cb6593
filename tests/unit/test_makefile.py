"""`make help` lists every target with one line each; the targets people run keep their commands."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


def phony_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {name for line in re.findall(r"^\.PHONY:(.*)$", text, re.M) for name in line.split()}


def test_make_help_lists_every_target_with_one_line():
    done = make("help")
    assert done.returncode == 0, done.stderr
    described = dict(re.findall(r"^  (\S+)\s+(\S.*)$", done.stdout, re.M))
    missing = phony_targets() - set(described)
    assert not missing, f"make help does not list {sorted(missing)}:\n{done.stdout}"
    assert described["demo"] and described["test"] and described["help"]


def test_demo_and_test_run_what_they_ran():
    """`make -n` prints the commands without running them: the two commands of the README."""
    demo = make("-n", "demo")
    assert demo.returncode == 0 and demo.stdout.splitlines()[-1].strip() == ".venv/bin/leasectl demo", demo.stdout
    test = make("-n", "test")
    assert test.returncode == 0, test.stderr
    assert 'LEASECTL_MIN_TESTS=350 .venv/bin/python -m pytest -p no:cacheprovider -n 4 ' \
           '-m "not slow and not wheel and not ha and not pooler and not alerting and not browser" tests' in test.stdout
    # the tiers that need a tool of their own run apart, each with its least count of tests
    assert "-m pooler tests/pooler" in test.stdout and "-m ha tests/ha" in test.stdout
    assert "-m alerting tests/alerting" in test.stdout
    assert "LEASECTL_MIN_TESTS=5 .venv/bin/python -m pytest -p no:cacheprovider -m browser tests/browser" in test.stdout
    assert "ruff check" in test.stdout and "lint-imports" in test.stdout
