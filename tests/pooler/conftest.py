"""A real PgBouncer in transaction mode in front of the test PostgreSQL (tests/conftest.py's
`pg_server`), started once per test session (per xdist worker) from an ini of its own in a
temporary directory, on a free loopback port.

`make test` installs Debian's pgbouncer when it is missing and it can (`make pgbouncer`: root and
apt-get); where it cannot, every test here skips and says why.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.conftest import Database, Server

# small on purpose: many clients (every worker's two lanes, the console's, the supervisor's) share
# a few server connections, so that a statement prepared on one, or a setting left on one, meets
# another client's transaction -- the failures a transaction pooler causes show up at once
POOL_SIZE = 3
# the logins the tests connect as (trust: PgBouncer only needs to know their names)
USERS = ("postgres", "pooled_worker", "pooled_operator")


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None)


@dataclass
class Bouncer:
    port: int
    log: Path

    def dsn_for(self, database: Database) -> str:
        """The test database's DSN through PgBouncer."""
        return make_conninfo(database.dsn, host="127.0.0.1", port=str(self.port))

    def admin(self) -> psycopg.Connection:
        """PgBouncer's own console (SHOW POOLS, SHOW SERVERS...): simple queries only."""
        return psycopg.connect(f"host=127.0.0.1 port={self.port} dbname=pgbouncer user=postgres", autocommit=True,
                               prepare_threshold=None)

    def show(self, what: str) -> list[dict]:
        with self.admin() as admin:
            cur = admin.cursor(row_factory=psycopg.rows.dict_row)
            cur.execute(f"show {what}".encode())  # bytes: the simple query protocol, all PgBouncer's console speaks
            return cur.fetchall()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as(server: Server) -> str | None:
    """PgBouncer refuses to run as root: as root it runs as the server's own user (the embedded
    server's socket directory is that user's alone), else as postgres or nobody."""
    if os.geteuid() != 0:
        return None
    for name in (getattr(server.embedded, "system_user", None), "postgres", "nobody"):
        if name:
            try:
                pwd.getpwnam(name)
            except KeyError:
                continue
            return name
    return None


def _ini(directory: Path, server: Server, port: int) -> str:
    target = conninfo_to_dict(server.dsn)
    host = str(target.get("host") or "/var/run/postgresql")
    return f"""[databases]
* = host={host} port={target.get('port') or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


@pytest.fixture(scope="session", autouse=True)
def pgbouncer_binary_path() -> str:
    """Asked first (autouse): without pgbouncer every test skips before a server is started for it."""
    binary = pgbouncer_binary()
    if binary is None:
        pytest.skip("pgbouncer is not installed: `make pgbouncer` installs it (as root, with apt-get), "
                    "or install it yourself (Debian and Ubuntu: apt-get install pgbouncer)")
    return binary


@pytest.fixture(scope="session")
def pgbouncer(pgbouncer_binary_path: str, pg_server: Server) -> Iterator[Bouncer]:
    binary = pgbouncer_binary_path
    directory = Path(tempfile.mkdtemp(prefix="leasectl-pgbouncer-"))
    password = str(conninfo_to_dict(pg_server.dsn).get("password") or "")
    (directory / "userlist.txt").write_text("".join(f'"{u}" "{password}"\n' for u in USERS))
    user = _run_as(pg_server)
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (directory, *directory.iterdir()):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    process = None
    try:
        for _attempt in range(3):  # a free port can be taken between asking and listening
            port = _free_port()
            (directory / "pgbouncer.ini").write_text(_ini(directory, pg_server, port))
            if user is not None:
                os.chown(directory / "pgbouncer.ini", pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
            process = subprocess.Popen([binary, *(["-u", user] if user else []), str(directory / "pgbouncer.ini")],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if _answers(port, process):
                break
            process.terminate()
            process.wait(5)
            process = None
        if process is None:
            log = directory / "pgbouncer.log"
            pytest.skip(f"pgbouncer did not start: {log.read_text()[-800:] if log.exists() else 'no log'}")
        yield Bouncer(port, directory / "pgbouncer.log")
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(directory, ignore_errors=True)


def _answers(port: int, process: subprocess.Popen) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


@pytest.fixture
def pooled(db: Database, pgbouncer: Bouncer) -> str:
    """The test database's DSN through PgBouncer in transaction mode."""
    return pgbouncer.dsn_for(db)
