"""A TCP proxy in front of the test PostgreSQL that a test can cut, to make the database
unreachable for one client (a worker, the console) while it stays up for everyone else."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class DbProxy:
    # how long a pump waits for bytes before it looks at the proxy's state again
    _poll_seconds = 0.5

    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "/var/run/postgresql")
        port = int(params.get("port") or 5432)
        if host.startswith("/"):
            self._target: tuple[int, object] = (socket.AF_UNIX, os.path.join(host, f".s.PGSQL.{port}"))
        else:
            self._target = (socket.AF_INET, (host, port))
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.dsn = make_conninfo(dsn, host="127.0.0.1", port=str(self.port))
        self._cut = threading.Event()
        self._closed = threading.Event()
        # when each client connection arrived (time.monotonic()), refused ones included: the times a
        # client tried to reach the database, for the tests of reconnection
        self.arrivals: list[float] = []
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept_loop, daemon=True, name="db-proxy").start()

    def cut(self) -> None:
        """Drop every open connection and refuse new ones: the database is gone for this client."""
        self._cut.set()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.arrivals.append(time.monotonic())
            if self._turned_away(client):
                continue
            family, address = self._target
            upstream = socket.socket(family, socket.SOCK_STREAM)
            try:
                upstream.connect(address)  # type: ignore[arg-type]
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    # The two hooks below are where a proxy that fails in another way differs (test_outage.py's
    # goes silent instead of refusing).

    def _turned_away(self, client: socket.socket) -> bool:
        """Whether a new connection ends here: while cut, it is refused."""
        if self._cut.is_set():
            client.close()
            return True
        return False

    def _stalled(self, a: socket.socket, b: socket.socket) -> bool:
        """Whether an open connection stops passing bytes (and is done with): never, here."""
        return False

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        sockets = [a, b]
        try:
            while not self._stalled(a, b):
                readable, _, _ = select.select(sockets, [], [], self._poll_seconds)
                if self._closed.is_set():
                    return
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    (b if s is a else a).sendall(data)
        except (OSError, ValueError):  # ValueError: a socket closed by cut() under select()
            return
        finally:
            for s in sockets:
                with contextlib.suppress(OSError):
                    s.close()
