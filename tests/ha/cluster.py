"""A real high-availability cluster on loopback, from Debian's packages: one etcd, two PostgreSQL 15
nodes under Patroni in synchronous mode (`make ha-tools` installs patroni and etcd-server).

    with PatroniCluster(tmp) as cluster:
        cluster.dsn            # both nodes, target_session_attrs=read-write: whoever is primary
        cluster.switchover()   # patronictl switchover, waited for
        cluster.kill_primary() # kill -9 of the primary's Patroni and PostgreSQL, waited for failover

PostgreSQL refuses to run as root: when the tests run as root, Patroni runs as the `postgres`
system user (Debian's postgresql-common creates it) with the cluster's files handed to it.
Timings are short on purpose (ttl 10 s, loop_wait 1 s): the test measures leasectl's behaviour
across a failover, not Patroni's defaults.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

PG_BIN = Path("/usr/lib/postgresql/15/bin")
TTL = 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing_tools() -> list[str]:
    missing = [tool for tool in ("patroni", "patronictl", "etcd") if shutil.which(tool) is None]
    if not (PG_BIN / "postgres").exists():
        missing.append(str(PG_BIN / "postgres"))
    return missing


class PatroniCluster:
    def __init__(self, base: Path, nodes: int = 2) -> None:
        self.base = base
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.nodes = [{"name": f"node{i + 1}", "pg": free_port(), "api": free_port()} for i in range(nodes)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.as_user = "postgres" if os.geteuid() == 0 else None
        self.logs: dict[str, Path] = {}

    # ------------------------------------------------------------------ addresses

    @property
    def dsn(self) -> str:
        hosts = ",".join("127.0.0.1" for _ in self.nodes)
        ports = ",".join(str(n["pg"]) for n in self.nodes)
        return (f"host={hosts} port={ports} user=postgres password=ha dbname=postgres "
                f"target_session_attrs=read-write connect_timeout=3")

    def node_dsn(self, name: str, dbname: str = "postgres") -> str:
        node = self._node(name)
        return f"host=127.0.0.1 port={node['pg']} user=postgres password=ha dbname={dbname} connect_timeout=3"

    def multi_dsn(self, dbname: str) -> str:
        return self.dsn.replace("dbname=postgres", f"dbname={dbname}")

    def _node(self, name: str) -> dict[str, Any]:
        return next(n for n in self.nodes if n["name"] == name)

    # ------------------------------------------------------------------ life

    def __enter__(self) -> PatroniCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if self.as_user:
            # the tests' tmp dirs are root's: postgres must reach its own files through them
            os.chmod(self.base, 0o777)
            for parent in self.base.parents:
                if str(parent).startswith("/tmp/") or str(parent) == "/tmp":
                    os.chmod(parent, os.stat(parent).st_mode | 0o011)
        etcd_dir = self.base / "etcd"
        self._spawn("etcd", ["etcd", "--name", "ha", "--data-dir", str(etcd_dir),
                             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                             "--listen-peer-urls", f"http://127.0.0.1:{self.etcd_peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.etcd_peer}",
                             "--initial-cluster", f"ha=http://127.0.0.1:{self.etcd_peer}"], as_user=False)
        self._wait(lambda: self._http_ok(f"http://127.0.0.1:{self.etcd_port}/health"), 30, "etcd to answer")
        for node in self.nodes:
            self._write_config(node)
        self.start_node(self.nodes[0]["name"])
        self._wait(lambda: self.primary() == self.nodes[0]["name"], 90, "the first node to lead")
        for node in self.nodes[1:]:
            self.start_node(node["name"])
        self._wait(lambda: self.sync_standby() is not None, 90, "a synchronous standby")

    def start_node(self, name: str) -> None:
        self._spawn(name, ["patroni", str(self.base / f"{name}.yml")], as_user=True)

    def stop(self) -> None:
        for name in list(self.procs):
            if name != "etcd":
                self._terminate(name)
        self._terminate("etcd")
        # a PostgreSQL that outlived its Patroni (kill -9 of Patroni alone) must not outlive the test
        for node in self.nodes:
            pid_file = self.base / node["name"] / "postmaster.pid"
            if pid_file.exists():
                try:
                    os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
                except (OSError, ValueError):
                    pass

    def _terminate(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def _spawn(self, name: str, argv: list[str], *, as_user: bool) -> None:
        log = self.base / f"{name}.log"
        self.logs[name] = log
        if as_user and self.as_user:
            argv = ["runuser", "-u", self.as_user, "--", *argv]
        with open(log, "ab") as out:
            self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.base,
                                                start_new_session=True)

    def _write_config(self, node: dict[str, Any]) -> None:
        data_dir = self.base / node["name"]
        config = {
            "scope": "leasectl-ha",
            "name": node["name"],
            "restapi": {"listen": f"127.0.0.1:{node['api']}", "connect_address": f"127.0.0.1:{node['api']}"},
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": 1, "retry_timeout": 4, "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "postgresql": {"use_pg_rewind": True,
                                   "parameters": {"wal_level": "replica", "hot_standby": "on", "wal_log_hints": "on",
                                                  "max_wal_senders": 8, "max_replication_slots": 8,
                                                  "max_connections": 100}},
                },
                "initdb": [{"encoding": "UTF8"}, {"auth-host": "md5"}, {"auth-local": "trust"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node['pg']}",
                "connect_address": f"127.0.0.1:{node['pg']}",
                "data_dir": str(data_dir),
                "bin_dir": str(PG_BIN),
                "pgpass": str(self.base / f"{node['name']}.pgpass"),
                "authentication": {"superuser": {"username": "postgres", "password": "ha"},
                                   "replication": {"username": "replicator", "password": "ha"},
                                   "rewind": {"username": "postgres", "password": "ha"}},
                "parameters": {"unix_socket_directories": str(self.base)},
                "pg_hba": ["local all all trust", "host replication replicator 127.0.0.1/32 md5",
                           "host all all 127.0.0.1/32 md5"],
            },
        }
        # YAML is a superset of JSON: Patroni reads this as it is
        path = self.base / f"{node['name']}.yml"
        path.write_text(json.dumps(config, indent=2))
        if self.as_user:
            user = pwd.getpwnam(self.as_user)
            os.chown(path, user.pw_uid, user.pw_gid)
            os.chown(self.base, user.pw_uid, user.pw_gid)

    # ------------------------------------------------------------------ state

    def _http_ok(self, url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def members(self) -> list[dict[str, Any]]:
        for node in self.nodes:
            if self.procs.get(node["name"]) is None or self.procs[node["name"]].poll() is not None:
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{node['api']}/cluster", timeout=2) as answer:
                    return list(json.loads(answer.read())["members"])
            except (OSError, ValueError, KeyError):
                continue
        return []

    def primary(self) -> str | None:
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return str(member["name"])
        return None

    def sync_standby(self) -> str | None:
        for member in self.members():
            if member.get("role") == "sync_standby" and member.get("state") in ("running", "streaming"):
                return str(member["name"])
        return None

    def _wait(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.3)
        tails = {name: log.read_text(errors="replace")[-1500:] for name, log in self.logs.items() if log.exists()}
        raise TimeoutError(f"waited {timeout:.0f} s for {what}; members {self.members()}; logs: {tails}")

    # ------------------------------------------------------------------ trouble

    def switchover(self) -> tuple[str, str]:
        """patronictl switchover to the synchronous standby; returns (old, new) primary."""
        old, new = self.primary(), self.sync_standby()
        assert old and new, self.members()
        config = self.base / f"{old}.yml"
        argv = ["patronictl", "-c", str(config), "switchover", "--leader", old, "--candidate", new, "--force"]
        if self.as_user:
            argv = ["runuser", "-u", self.as_user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        self._wait(lambda: self.primary() == new, 60, f"{new} to lead after the switchover")
        # the old primary follows again as the synchronous standby: until then, in synchronous
        # mode, nobody may be promoted (a later kill would leave the cluster without a leader)
        self._wait(lambda: self.sync_standby() == old, 120, f"{old} to follow as the synchronous standby")
        return old, new

    def kill_primary(self) -> tuple[str, str, float]:
        """kill -9 of the primary's Patroni and its PostgreSQL (the machine lost, as far as the
        cluster can tell); waits for the standby to lead. Returns (old, new, seconds to a new leader)."""
        old = self.primary()
        assert old and self.sync_standby(), self.members()
        pid_file = self.base / old / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        killed_at = time.monotonic()
        proc = self.procs.pop(old)
        os.killpg(proc.pid, signal.SIGKILL)
        os.kill(postmaster, signal.SIGKILL)
        proc.wait(10)
        self._wait(lambda: (self.primary() or old) != old, TTL * 6, "a new leader after the kill")
        new = self.primary()
        assert new is not None
        return old, new, time.monotonic() - killed_at

    def rejoin(self, name: str) -> None:
        """Start a killed node's Patroni again: it rejoins as a replica (pg_rewind)."""
        self.start_node(name)
        self._wait(lambda: any(m["name"] == name and m.get("state") in ("running", "streaming")
                               for m in self.members()), 120, f"{name} to rejoin")
