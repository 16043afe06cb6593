"""The demo's own database, made by another build (a migration changed since, as an unreleased one
may between two builds), is not worked around: the demo says so and how to start afresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.demo import run as demo_run
from console.shared.errors import SchemaError


def test_a_demo_database_from_another_build_says_reset(db, conn, monkeypatch, tmp_path: Path):
    conn.execute("update leasectl_migrations set checksum = 'deadbeef' where version = 1")
    monkeypatch.setattr(demo_run, "prepare_database", lambda options, say: (db.dsn, None))
    monkeypatch.setattr(demo_run.signal, "signal", lambda *args: None)  # the test process keeps its own
    options = demo_run.DemoOptions(data_dir=tmp_path / "demo", tui=False, duration=0.1)
    with pytest.raises(SchemaError) as said:
        demo_run.run_demo(options, lambda *a, **k: None)  # type: ignore[arg-type]
    assert "made by another build of leasectl" in str(said.value)
    assert "leasectl demo --reset" in (said.value.hint or "") and str(tmp_path / "demo") in (said.value.hint or "")
    # a database of the user's (--dsn) is not the demo's to start afresh: the plain refusal
    options = demo_run.DemoOptions(data_dir=tmp_path / "demo", tui=False, duration=0.1, dsn=db.dsn)
    with pytest.raises(SchemaError) as plain:
        demo_run.run_demo(options, lambda *a, **k: None)  # type: ignore[arg-type]
    assert "--reset" not in (plain.value.hint or "") and "changed after it was applied" in str(plain.value)
