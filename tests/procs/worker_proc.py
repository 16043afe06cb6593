"""A reference worker in its own OS process, for tests that freeze (SIGSTOP) or kill it.

    python -m tests.procs.worker_proc --dsn DSN --worker-id W1 --receiver URL [--max-calls N] [--concurrency N]

The handler is a fenced tool: it records its side effect before calling out, passes the fencing
token and idempotency key to the receiver, then does `work_seconds` of uncooperative work (a
blocking sleep, the kind a SIGSTOP freezes in the middle of). A verifiable tool that was
reclaimed checks the operation's status (under its own, newer token) before doing anything.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
import uuid

from console.worker import CallContext, Worker
from console.worker.receiver import ReceiverClient


def make_handler(receiver_url: str):
    client = ReceiverClient(receiver_url)

    def handler(ctx: CallContext) -> dict:
        payload = ctx.payload or {}
        obj = payload.get("object", str(ctx.call.id))
        if ctx.call.previous_request_id and ctx.call.side_effect == "mutating_verifiable":
            found = client.status(ctx.idempotency_key, fence=ctx.fencing_token)
            # what the service said, recorded before anything is sent again (worker/record_check.sql)
            ctx.record_check("done" if found is not None else "not_done",
                             {"confirmation": found["confirmation"]} if found is not None else None)
            if found is not None:
                return {"confirmation": found["confirmation"], "by": ctx.worker_id, "verified": True}
        if ctx.call.side_effect == "read_only":
            request_id = f"req-{uuid.uuid4().hex[:8]}"
            ctx.record_event("tool_request_started", {"external_request_id": request_id})
        else:
            request_id = ctx.start_side_effect()
        reply = client.submit(object_id=obj, idempotency_key=ctx.idempotency_key, fence=ctx.fencing_token,
                              operation=ctx.call.tool, sender=ctx.worker_id, body={"request": request_id},
                              traceparent=ctx.traceparent)
        print(f"SENT {ctx.call.id} {ctx.fencing_token}", flush=True)
        time.sleep(float(payload.get("work_seconds", 0)))
        return {"confirmation": reply.result["confirmation"], "by": ctx.worker_id}

    return handler


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--receiver", required=True)
    parser.add_argument("--tools", nargs="*")
    parser.add_argument("--max-calls", type=int)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--concurrency", type=int, default=1, help="calls in flight at once (threads)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(message)s")
    worker = Worker(args.dsn, args.worker_id, make_handler(args.receiver), tools=args.tools,
                    poll_interval=0.05, concurrency=args.concurrency)
    stop = threading.Event()
    timer = threading.Timer(args.seconds, stop.set)
    timer.start()
    worker.run(stop, max_calls=args.max_calls)
    timer.cancel()
    print("EXIT", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
