"""The package's rooms and who may call whom, proven by import-linter and by clean imports.

Roles (River's layout): the operator's tools on top, the demo, the control plane and the worker
side beside each other, the data layer below them, the shared rules at the bottom; the console's
app over its screens over their widgets. Below the console nothing imports Textual (harlequin's rule).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import ROOT

CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_import_linter_contracts_hold():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint_imports)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in result.stdout, result.stdout


def test_headless_parts_import_without_textual():
    code = ("import sys, console.db.connect, console.db.migrate, console.worker, console.worker.receiver, "
            "console.control.supervisor, console.operator.cli, console.operator.present, console.demo.run; "
            "bad = [m for m in sys.modules if m.split('.')[0] == 'textual' or m.startswith('console.operator.tui')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _layers(name_start: str) -> list[str]:
    contract = next(c for c in CONTRACTS if c["name"].startswith(name_start))
    return [part.strip() for layer in contract["layers"] for part in layer.split("|")]


def test_every_room_of_the_package_has_its_layer():
    """A new top-level folder (or module) must be placed in the roles contract, not slip past it."""
    rooms = {f"console.{p.parent.name}" for p in (ROOT / "console").glob("*/__init__.py")}
    rooms |= {f"console.{p.stem}" for p in (ROOT / "console").glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert rooms == set(_layers("Roles")), "place every folder of console/ in the roles contract of pyproject.toml"


def test_every_part_of_the_console_has_its_layer():
    tui = ROOT / "console" / "operator" / "tui"
    parts = {f"console.operator.tui.{p.parent.name}" for p in tui.glob("*/__init__.py")}
    parts |= {f"console.operator.tui.{p.stem}" for p in tui.glob("*.py") if p.stem != "__init__"}
    assert parts == set(_layers("The console's own layers"))
