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
