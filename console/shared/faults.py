"""Crash points for the tests that kill a process mid-way (tests/db/test_retention.py): with
LEASECTL_FAULT=NAME in the environment, crash_at(NAME) ends the process with SIGKILL there, as a
power cut or an OOM kill would: no handler, no cleanup, no flush. Unset, it does nothing."""

from __future__ import annotations

import os
import signal

FAULT_ENV = "LEASECTL_FAULT"


def crash_at(point: str) -> None:
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
