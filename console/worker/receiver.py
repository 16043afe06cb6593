"""A fenced receiver: a stand-in for an external API that does side effects.

It behaves as docs/seeds.md §000.11 asks of any serious side-effect receiver:

* it remembers the highest fencing token accepted per object and execution (the call: its
  tokens order that call's owners, so another call's token 1 is never "stale" against them) and
  rejects a lower one (`X-Execution-Fence: 41` after 42 changes nothing, even if well
  authenticated); a sender that names no execution is fenced per object;
* it remembers each idempotency key's first result and returns it again on a repeat,
  without a second effect;
* it keeps the W3C `traceparent` a request came with (the sender's trace and span: a worker's
  `ctx.traceparent`) on the effect it performed, as a traced service would start its own span
  under it. A request without one is served as before.

`FencedReceiver` is the in-process logic (used by the demo's threads and by tests);
`ReceiverServer` and `ReceiverClient` put it behind HTTP so workers in other processes
can call it, as the real-process tests do.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StaleFence(Exception):
    """The receiver has accepted a higher token for this object: the sender is a stale owner."""

    def __init__(self, object_id: str, fence: int, highest: int) -> None:
        super().__init__(f"stale fencing token {fence} for {object_id} (highest accepted {highest})")
        self.object_id = object_id
        self.fence = fence
        self.highest = highest


class NoAnswer(Exception):
    """The request may or may not have been applied: the answer was lost or timed out."""


@dataclass
class Effect:
    """One side effect the receiver really performed."""

    seq: int
    object_id: str
    idempotency_key: str
    fence: int
    operation: str
    sender: str
    at: float
    result: dict[str, Any]
    # the W3C traceparent the request came with ("" without one)
    traceparent: str = ""


@dataclass
class Rejection:
    object_id: str
    idempotency_key: str
    fence: int
    highest: int
    sender: str
    at: float


@dataclass
class Response:
    result: dict[str, Any]
    replayed: bool
    effect_seq: int


@dataclass(frozen=True)
class Submission:
    """One request for a side effect, as a receiver takes it in process or over HTTP."""

    object_id: str
    idempotency_key: str
    fence: int
    operation: str
    body: dict[str, Any] | None = None
    sender: str = ""
    execution: str = ""
    traceparent: str = ""  # W3C trace context: the sender's trace and span


class Receiver:
    """What a tool calls, in process (`FencedReceiver`) or over HTTP (`ReceiverClient`): the one
    signature of `submit`; each kind says how it delivers a `Submission`. `traceparent`: the
    handler's `ctx.traceparent` (None or "" when the call has no trace)."""

    def submit(self, *, object_id: str, idempotency_key: str, fence: int, operation: str,
               body: dict[str, Any] | None = None, sender: str = "", execution: str = "",
               traceparent: str | None = None) -> Response:
        return self.deliver(Submission(object_id, idempotency_key, fence, operation, body, sender, execution,
                                       traceparent or ""))

    def deliver(self, r: Submission) -> Response:
        raise NotImplementedError


@dataclass
class FencedReceiver(Receiver):
    name: str = "receiver"
    verifiable: bool = True
    effects: list[Effect] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    replays: int = 0
    _highest: dict[tuple[str, str], int] = field(default_factory=dict)
    _first_result: dict[str, Effect] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def deliver(self, r: Submission) -> Response:
        with self._lock:
            highest = self._highest.get((r.object_id, r.execution), -1)
            if r.fence < highest:
                self.rejections.append(
                    Rejection(r.object_id, r.idempotency_key, r.fence, highest, r.sender, time.time())
                )
                raise StaleFence(r.object_id, r.fence, highest)
            self._highest[(r.object_id, r.execution)] = r.fence
            first = self._first_result.get(r.idempotency_key)
            if first is not None:
                self.replays += 1
                return Response(first.result, replayed=True, effect_seq=first.seq)
            seq = len(self.effects) + 1
            result = {"receiver": self.name, "operation": r.operation, "object_id": r.object_id,
                      "confirmation": f"{self.name}-{seq}", "input": r.body or {}}
            effect = Effect(seq, r.object_id, r.idempotency_key, r.fence, r.operation, r.sender, time.time(),
                            result, r.traceparent)
            self.effects.append(effect)
            self._first_result[r.idempotency_key] = effect
            return Response(result, replayed=False, effect_seq=seq)

    def status(self, idempotency_key: str, *, object_id: str | None = None,
               fence: int | None = None, execution: str = "") -> dict[str, Any] | None:
        """What happened to this key, if the API lets you ask (only a verifiable one does).

        Asking under a fencing token registers it: a new owner that checks the status fences
        the old owner out, exactly as if it had sent a request.
        """
        if not self.verifiable:
            raise NotImplementedError(f"{self.name} offers no way to check an operation's status")
        with self._lock:
            first = self._first_result.get(idempotency_key)
            target = object_id or (first.object_id if first else None)
            if fence is not None and target is not None:
                highest = self._highest.get((target, execution), -1)
                if fence < highest:
                    raise StaleFence(target, fence, highest)
                self._highest[(target, execution)] = fence
            return first.result if first else None

    def highest_fence(self, object_id: str, execution: str = "") -> int | None:
        with self._lock:
            return self._highest.get((object_id, execution))


    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "name": self.name,
                "effects": [asdict(e) for e in self.effects],
                "rejections": [asdict(r) for r in self.rejections],
                "replays": self.replays,
                "highest": {f"{obj}@{execution}" if execution else obj: fence
                            for (obj, execution), fence in self._highest.items()},
            }


# ------------------------------------------------------------------------------------ HTTP

FENCE_HEADER = "X-Execution-Fence"
EXECUTION_HEADER = "X-Execution-Id"  # the call whose owners the fence orders
KEY_HEADER = "Idempotency-Key"
TRACEPARENT_HEADER = "traceparent"  # W3C trace context


class ReceiverServer:
    """Serve a FencedReceiver on 127.0.0.1. `before_reply(request)` lets a test hold an answer."""

    def __init__(
        self,
        receiver: FencedReceiver,
        *,
        port: int = 0,
        before_reply: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.receiver = receiver
        self.before_reply = before_reply
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                try:
                    fence = int(self.headers.get(FENCE_HEADER, ""))
                except ValueError:
                    self._send(400, {"error": f"missing or bad {FENCE_HEADER}"})
                    return
                key = self.headers.get(KEY_HEADER) or ""
                if not key:
                    self._send(400, {"error": f"missing {KEY_HEADER}"})
                    return
                request = {"object_id": body.get("object_id", ""), "idempotency_key": key,
                           "fence": fence, "operation": body.get("operation", ""),
                           "sender": body.get("sender", ""), "execution": self.headers.get(EXECUTION_HEADER, ""),
                           "traceparent": self.headers.get(TRACEPARENT_HEADER, "")}
                try:
                    response = server.receiver.submit(body=body.get("input"), **request)
                except StaleFence as exc:
                    self._send(409, {"error": str(exc), "highest": exc.highest})
                    return
                if server.before_reply is not None:
                    server.before_reply(request)
                self._send(200, {"result": response.result, "replayed": response.replayed,
                                 "effect_seq": response.effect_seq})

            def do_GET(self) -> None:
                if self.path.startswith("/status/"):
                    key = self.path[len("/status/"):]
                    fence_text = self.headers.get(FENCE_HEADER)
                    try:
                        result = server.receiver.status(
                            key, fence=int(fence_text) if fence_text else None,
                            execution=self.headers.get(EXECUTION_HEADER, ""))
                    except NotImplementedError as exc:
                        self._send(501, {"error": str(exc)})
                        return
                    except StaleFence as exc:
                        self._send(409, {"error": str(exc), "highest": exc.highest})
                        return
                    self._send(200, {"result": result})
                elif self.path == "/snapshot":
                    self._send(200, server.receiver.snapshot())
                else:
                    self._send(404, {"error": "not found"})

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="receiver", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ReceiverServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class ReceiverClient(Receiver):
    """What a worker's tool uses to call a ReceiverServer."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def deliver(self, r: Submission) -> Response:
        data = json.dumps({"object_id": r.object_id, "operation": r.operation, "input": r.body or {},
                           "sender": r.sender}).encode()
        request = urllib.request.Request(
            f"{self.url}/requests", data=data, method="POST",
            headers={"Content-Type": "application/json", FENCE_HEADER: str(r.fence),
                     KEY_HEADER: r.idempotency_key, EXECUTION_HEADER: r.execution,
                     **({TRACEPARENT_HEADER: r.traceparent} if r.traceparent else {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                payload = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 409:
                detail = json.loads(exc.read() or b"{}")
                raise StaleFence(r.object_id, r.fence, int(detail.get("highest", -1))) from None
            raise NoAnswer(f"receiver answered HTTP {exc.code}") from None
        except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
            raise NoAnswer(f"no answer from the receiver: {exc}") from None
        return Response(payload["result"], replayed=payload["replayed"],
                        effect_seq=payload["effect_seq"])

    def status(self, idempotency_key: str, *, fence: int | None = None, execution: str = "") -> dict[str, Any] | None:
        headers = {FENCE_HEADER: str(fence), EXECUTION_HEADER: execution} if fence is not None else {}
        request = urllib.request.Request(f"{self.url}/status/{idempotency_key}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                return json.loads(reply.read())["result"]
        except urllib.error.HTTPError as exc:
            if exc.code == 501:
                raise NotImplementedError("this receiver cannot report an operation's status") from None
            if exc.code == 409:
                detail = json.loads(exc.read() or b"{}")
                raise StaleFence(idempotency_key, fence or -1, int(detail.get("highest", -1))) from None
            raise NoAnswer(f"receiver answered HTTP {exc.code}") from None
        except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
            raise NoAnswer(f"no answer from the receiver: {exc}") from None

    def snapshot(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/snapshot", timeout=self.timeout) as reply:
            return json.loads(reply.read())
