"""Crash points for the tests that kill a process mid-way (tests/db/test_retention.py,
tests/db/test_bulk_operations.py): with LEASECTL_FAULT=NAME in the environment, crash_at(NAME) ends
the process with SIGKILL there, as a power cut or an OOM kill would: no handler, no cleanup, no
flush. Unset, it does nothing.

The points: retention:before_write, retention:written, retention:verified, retention:detached,
retention:dropped (console/operator/retention.py, console/db/retention.py); bulk:mid_batch (a bulk
operation's worker half-way through a batch after an earlier one committed: calls acted on and
settled, not committed) and bulk:between_batches (right after a batch committed) in
console/db/bulk.py."""

from __future__ import annotations

import os
import signal

FAULT_ENV = "LEASECTL_FAULT"


def crash_at(point: str) -> None:
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
