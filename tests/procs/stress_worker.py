"""A reference worker process for the kill test: after each write the database acknowledged, it
appends one line to its journal file (flushed at once, so a SIGKILL loses nothing acknowledged):

    claim <job> <token> <db_time>      heartbeat <job> <token> <db_time>      complete <job> <token> <db_time>
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading

from console.worker import Worker


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--concurrency", type=int, default=1, help="calls in flight at once (threads)")
    args = parser.parse_args()
    journal = open(args.journal, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    lock = threading.Lock()
    rng = random.Random(os.getpid())
    rng_lock = threading.Lock()

    def observe(kind, job_id, token, db_time):
        with lock:
            journal.write(f"{kind} {job_id} {token} {db_time.isoformat() if db_time else '-'}\n")

    def handler(ctx):
        with rng_lock:  # handlers run on several threads at once with --concurrency
            pause = rng.uniform(0.2, 0.5) if rng.random() < 0.05 else 0.0
        if pause:
            ctx.sleep(pause)  # a few long ones, so kills land mid-call
        return {"by": ctx.worker_id, "token": ctx.fencing_token}

    Worker(args.dsn, args.worker_id, handler, poll_interval=0.02, observer=observe,
           concurrency=args.concurrency).run(threading.Event())
    return 0


if __name__ == "__main__":
    sys.exit(main())
