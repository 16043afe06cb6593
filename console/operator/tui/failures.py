"""The one place that handles a failed thread worker (Textual's Worker.StateChanged, state ERROR).

Every database worker of the console -- a screen's poll, a dialog's action, a payload preview, an
export -- ends here when it raises. An error leasectl expects (LeasectlError: unreachable, locked
row, refused) reads as its own message. Anything else is a bug: the log keeps the traceback, the
person reads one line that says nothing was changed by it and where the details are. Nothing is
left waiting ("applying…" for ever), and the console keeps running.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import platformdirs
import psycopg

from console.db.connect import translate_error
from console.shared.errors import DatabaseUnavailable, LeasectlError, RowLocked, StatementTimedOut
from console.shared.text import sanitize

log = logging.getLogger("leasectl.console")


def log_dir() -> Path:
    """Where the console writes its log (console.log) and crash reports: $LEASECTL_LOG_DIR, else the
    user's own log directory (~/.local/state/leasectl/log on Linux). The tests set the variable to a
    directory of their own: a test run must never leave its tracebacks in the user's real log."""
    return Path(os.environ.get("LEASECTL_LOG_DIR") or platformdirs.user_log_dir("leasectl"))


def log_path() -> Path:
    return log_dir() / "console.log"


def ensure_log_file() -> Path:
    """Unexpected errors go to a file of their own (the screen is the console's; stderr would tear
    it); they also reach whatever the process logs to already (the demo's log file)."""
    path = log_path()
    if not any(isinstance(h, logging.FileHandler) and Path(h.baseFilename) == path for h in log.handlers):
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    return path


# what the world does to a session (an outage, a lock, a slow server), as opposed to a bug of ours
CONDITIONS = (DatabaseUnavailable, RowLocked, StatementTimedOut)


def as_expected(error: BaseException | None) -> BaseException | None:
    """A driver error that reached the console untranslated -- a connection lost outside the data
    layer's own `run` -- is named as the data layer names it: an outage reads "database
    unreachable", never "internal error". Logged all the same, so the gap below gets closed; any
    other driver error (our SQL, say) stays a bug."""
    if isinstance(error, psycopg.Error):
        translated = translate_error(error, "the console")
        if isinstance(translated, CONDITIONS):
            log.warning("a database error reached the console untranslated", exc_info=error)
            return translated
    return error


def describe_failure(error: BaseException | None, what: str) -> str:
    """One line for a person; the traceback of anything unexpected goes to the log."""
    error = as_expected(error)
    if isinstance(error, LeasectlError):
        hint = f" ({sanitize(error.hint)})" if error.hint else ""
        return f"{sanitize(str(error))}{hint}"
    log.error("unexpected error in %s", what, exc_info=error)
    name = type(error).__name__ if error is not None else "unknown error"
    return (f"internal error in {what} ({name}: {sanitize(str(error), max_chars=200)}). Nothing was changed by it; "
            f"the details are in {ensure_log_file()}")
