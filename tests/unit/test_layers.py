"""The data layer is headless (harlequin's rule): proven by import-linter and by a clean import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_import_linter_contracts_hold():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint_imports)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout, result.stdout


def test_data_layer_imports_without_textual():
    code = ("import sys, console.db.connect, console.db.migrate, console.worker, console.receiver; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('textual',) or m.startswith('console.tui')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# the user-facing layers; every other module of the package must be under the headless contract
UI_MODULES = {"console.tui", "console.cli", "console.cli_render", "console.__main__"}


def test_every_module_below_the_ui_is_under_the_headless_contract():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = config["tool"]["importlinter"]["contracts"][0]
    covered = set(contract["source_modules"])
    package = ROOT / "console"
    modules = {f"console.{path.stem}" for path in package.glob("*.py") if path.stem != "__init__"}
    modules |= {f"console.{path.parent.name}" for path in package.glob("*/__init__.py")}
    uncovered = sorted(modules - covered - UI_MODULES)
    assert not uncovered, f"add these to the headless contract in pyproject.toml (or to UI_MODULES): {uncovered}"
