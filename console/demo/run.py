"""`leasectl demo`: an embedded PostgreSQL, a simulated fleet, and the console on top of it."""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from psycopg.conninfo import make_conninfo

from console.db.connect import connect, run, run_one
from console.db.migrate import migrate
from console.demo.fleet import Fleet
from console.shared.dsn import masked_dsn
from console.shared.errors import BadInput, SchemaError


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("leasectl")) / "demo"


@dataclass
class DemoOptions:
    data_dir: Path
    reset: bool = False
    seed: int = 7
    tui: bool = True
    dsn: str | None = None
    duration: float | None = None
    tempo: float = 1.0
    operator: str = "operator"


def prepare_database(options: DemoOptions, say: Callable[[str], None]) -> tuple[str, object | None]:
    """The DSN of a migrated demo database (and the embedded server that holds it, if any)."""
    if options.dsn:
        return options.dsn, None
    from console.demo.embedded import clients, start_server, stop_orphan

    pgdata = options.data_dir / "pgdata"
    if options.reset and options.data_dir.exists():
        if clients(pgdata):
            raise BadInput(f"another demo is using {options.data_dir}: stop it first, then --reset")
        if stop_orphan(pgdata):
            say("reset: stopped the server a previous demo left running")
        shutil.rmtree(options.data_dir)
        say(f"reset: removed {options.data_dir}")
    first = not (pgdata / "PG_VERSION").exists()
    if first:
        say(f"creating the demo's PostgreSQL in {pgdata} (first run only)")
    server = start_server(pgdata)
    admin = server.get_uri()
    with connect(admin) as conn:
        if run_one(conn, "demo/database_exists") is None:
            run(conn, "demo/create_database")
    return make_conninfo(admin, dbname="leasectl_demo"), server


def run_demo(options: DemoOptions, say: Announcer, open_console: Callable[[str], None] | None = None) -> None:
    """Run the fleet; with `open_console`, hand it the DSN and stop the fleet when it returns.

    The console is passed in by the caller so that this package stays headless (no Textual).
    """
    # a closed terminal (SIGHUP) or a kill (SIGTERM) ends the demo like Ctrl-C: workers stop and
    # the embedded server is shut down on the way out, instead of being left running
    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    dsn, _server = prepare_database(options, say)
    with connect(dsn) as conn:
        try:
            migrate(conn)
        except SchemaError as exc:
            if options.dsn is not None:  # a database of the user's: never the demo's to start afresh
                raise
            # the demo's database is the demo's own: one a build from before made (a migration since
            # changed, a schema newer than this one) is started afresh, never worked around
            raise SchemaError(f"the demo's database was made by another build of leasectl: {exc}",
                              hint="`leasectl demo --reset` starts the demo afresh (it removes only the demo's "
                                   f"data directory, {options.data_dir})") from None
    fleet = Fleet(dsn, seed=options.seed, tempo=options.tempo, say=say)
    with connect(dsn) as conn:
        fleet.prepare(conn)
    fleet.start()
    # the embedded server's DSN has no password (it pastes as it is); one given with --dsn is masked
    shown = masked_dsn(dsn)
    say(f"fleet running (seed {options.seed}, tempo {options.tempo}); database: {shown}")
    say(f"in another terminal:  leasectl --dsn '{shown}'")
    if say.log_path is not None:
        say(f"the fleet's log: {say.log_path}")
    try:
        if open_console is not None:
            say.quiet = True
            open_console(dsn)
        else:
            _wait(options.duration)
    finally:
        say("stopping the workers (the data stays)")
        fleet.shutdown()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait(duration: float | None) -> None:
    try:
        threading.Event().wait(timeout=duration)
    except KeyboardInterrupt:
        pass


def log_to_file(directory: Path) -> Path:
    """With the console on screen, the fleet's messages go to a file (they would tear the screen)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "demo.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return path


class Announcer:
    """Says what the demo does: on the terminal until the console takes the screen, then only in
    the log file (printing over a running console would tear it)."""

    def __init__(self, start: float, log_path: Path | None = None) -> None:
        self.start = start
        self.log_path = log_path
        self.quiet = False
        self._log = logging.getLogger("leasectl.demo")

    def __call__(self, text: str) -> None:
        if self.log_path is not None:
            self._log.info(text)
        if not self.quiet:
            print(f"[{time.monotonic() - self.start:6.1f}s] {text}", flush=True)

