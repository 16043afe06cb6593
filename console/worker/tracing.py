"""A call attempt as a span of the call's trace (W3C trace context; OpenTelemetry when installed).

Every attempt a worker makes at a call is one span, whose trace is the call's `trace_id` (set at
enqueue, from the caller's `traceparent`, and carried to a chain's next stage). The handler sends
it on as `ctx.traceparent`: version 00, the call's trace, this attempt's span id, sampled
(console.core.traces) -- what the fenced receiver takes as its `traceparent` header.

With `opentelemetry-api` installed (`pip install 'leasectl[otel]'`) the span is a real one,
started through the worker's `tracer_provider` (Worker(..., tracer_provider=...)), else the global
one, whatever SDK and exporter the process configured:

* name `call <tool>`, kind CONSUMER, from the claim's end to the call's outcome;
* attributes `leasectl.call.id`, `leasectl.call.tool`, `leasectl.call.fencing_token`,
  `leasectl.call.attempt`, `leasectl.worker.id`, `leasectl.call.chain_id`, `leasectl.call.stage`,
  and at the end `leasectl.call.outcome` (CallOutcome.status; status ERROR unless succeeded or
  cancelled);
* its parent is remote: the call's trace, with a span id derived from the call's id (the database
  keeps the caller's trace, not the caller's span, so every attempt of a call shares one parent,
  "the call", which no process records). A call with no trace starts a trace of its own;
* it is the current span while the handler runs (on the handler's own thread or task), so that an
  instrumented client in the handler nests under it and propagates it.

Without OpenTelemetry (nothing to import), or with its API and no tracer provider configured, the
worker is unchanged: no span is made, and `ctx.traceparent` still carries the call's trace with a
fresh span id for the attempt.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from console.core.traces import BadTraceContext, new_span_id, traceparent
from console.worker.calls import CallOutcome, ClaimedCall

log = logging.getLogger("leasectl.worker")

try:  # optional: the `otel` extra
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace

    OTEL = True
except ImportError:  # not installed (or blocked): the worker runs without spans
    OTEL = False

TRACER_NAME = "leasectl.worker"
# how an attempt ended that is not an error of the attempt
FINE_OUTCOMES = ("succeeded", "cancelled")


def recording(tracer_provider: Any = None) -> bool:
    """Spans are wanted: OpenTelemetry is installed and a tracer provider is configured (the one
    given, else a global one an SDK set). The API alone, with no provider set, records nothing:
    the worker then makes no span at all."""
    if not OTEL:
        return False
    provider = tracer_provider if tracer_provider is not None else otel_trace.get_tracer_provider()
    return not isinstance(provider, (otel_trace.ProxyTracerProvider, otel_trace.NoOpTracerProvider))


def call_span_id(call: ClaimedCall) -> int:
    """The span id every attempt of `call` names as its (remote) parent: 64 bits of the call's id."""
    return (call.id.int >> 64) or 1


class CallSpan:
    """One attempt at a call: its trace, its span id, its `traceparent`; with OpenTelemetry, its span.

    `lookup` reads the call's trace from the database, for a claim whose row did not carry it (a
    claim statement from before trace_id was returned): asked once, when the trace is first needed.
    """

    def __init__(self, call: ClaimedCall, worker_id: str, *, lookup: Callable[[], str | None] | None = None,
                 tracer_provider: Any = None) -> None:
        self.call = call
        self.worker_id = worker_id
        self.tracer_provider = tracer_provider  # None: OpenTelemetry's global one
        # a span is made only where one is recorded (an SDK's provider): nothing to read or start else
        self.records = recording(tracer_provider)
        self._lookup = None if call.trace_known else lookup
        self._trace_id = call.trace_id
        self._span_id = new_span_id()
        self._lock = threading.Lock()
        self._span: Any = None  # the OpenTelemetry span while it runs
        self._started = False
        self._ended = False

    @property
    def needs_lookup(self) -> bool:
        """The call's trace is not known yet: the first use reads it (a round trip)."""
        return self._lookup is not None

    @property
    def trace_id(self) -> str | None:
        """The call's W3C trace id (32 hex digits), or None when it has none."""
        if self._lookup is not None:
            with self._lock:
                lookup, self._lookup = self._lookup, None
                if lookup is not None:
                    try:
                        self._trace_id = lookup()
                    except Exception as exc:  # noqa: BLE001 - a trace is never worth failing a call
                        log.warning("trace of call %s not read: %s", self.call.short_id, exc)
        return self._trace_id

    @property
    def span_id(self) -> str:
        """This attempt's span id: the recorded span's, else a fresh random one."""
        found = self._span_context()
        return f"{found.span_id:016x}" if found is not None else self._span_id

    @property
    def traceparent(self) -> str | None:
        """`00-<trace>-<this attempt's span>-<flags>`: what to send a service with the request, so
        that what it does joins the call's trace. None when the call has no trace (and no
        OpenTelemetry span began one)."""
        found = self._span_context()
        if found is not None:
            return f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"
        trace_id = self.trace_id
        if trace_id is None:
            return None
        try:
            return traceparent(trace_id, self._span_id, sampled=True)
        except BadTraceContext:  # not a W3C trace (the database checks it): nothing to send on
            return None

    def _span_context(self) -> Any:
        """The recorded span's context, when OpenTelemetry records this attempt."""
        span = self._span
        if span is None or not span.is_recording():
            return None
        found = span.get_span_context()
        return found if found.is_valid else None

    # ------------------------------------------------------------------ OpenTelemetry
    def start(self) -> None:
        """Begin the attempt's span (with OpenTelemetry and a tracer provider; otherwise nothing).
        Reads the call's trace first when the claim did not carry it: off an event loop, then."""
        if not self.records or self._started:
            return
        self._started = True
        try:
            tracer = otel_trace.get_tracer(TRACER_NAME, tracer_provider=self.tracer_provider)
            self._span = tracer.start_span(
                f"call {self.call.tool}", context=self._parent(), kind=otel_trace.SpanKind.CONSUMER,
                attributes=self._attributes())
        except Exception as exc:  # noqa: BLE001 - a tracer's trouble never stops a call
            log.warning("no span for call %s: %s", self.call.short_id, exc)
            self._span = None

    def _parent(self) -> Any:
        """The call's trace as a remote parent (its span: the call's own, derived from its id); an
        empty context (a new trace) for a call without one."""
        trace_id = self.trace_id
        if trace_id is None:
            return otel_context.Context()
        try:
            number = int(trace_id, 16)
        except ValueError:
            return otel_context.Context()
        parent = otel_trace.SpanContext(trace_id=number, span_id=call_span_id(self.call), is_remote=True,
                                        trace_flags=otel_trace.TraceFlags(otel_trace.TraceFlags.SAMPLED))
        return otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(parent), otel_context.Context())

    def _attributes(self) -> dict[str, Any]:
        call = self.call
        found: dict[str, Any] = {"leasectl.call.id": str(call.id), "leasectl.call.tool": call.tool,
                                 "leasectl.call.fencing_token": call.fencing_token,
                                 "leasectl.call.attempt": call.attempt, "leasectl.worker.id": self.worker_id,
                                 "leasectl.call.stage": call.stage}
        if call.chain_id is not None:
            found["leasectl.call.chain_id"] = str(call.chain_id)
        return found

    def _current(self) -> Any:
        """What the handler runs under: the recorded span, else this attempt's ids as a span that
        records nothing (an instrumented client then sends what ctx.traceparent says)."""
        if self._span is not None and self._span.is_recording():
            return self._span
        trace_id = self.trace_id
        if trace_id is None:
            return self._span
        try:
            ids = otel_trace.SpanContext(trace_id=int(trace_id, 16), span_id=int(self._span_id, 16),
                                         is_remote=False,
                                         trace_flags=otel_trace.TraceFlags(otel_trace.TraceFlags.SAMPLED))
        except ValueError:
            return self._span
        return otel_trace.NonRecordingSpan(ids)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The attempt's span as the current one (on this thread or task) while the handler runs."""
        if not OTEL or not self._started:
            yield
            return
        span = self._current()
        if span is None:
            yield
            return
        token = otel_context.attach(otel_trace.set_span_in_context(span))
        try:
            yield
        finally:
            otel_context.detach(token)

    def end(self, outcome: CallOutcome | None = None, error: BaseException | None = None) -> None:
        """End the span with the call's outcome (or the error that ended the attempt). Once."""
        if self._ended:
            return
        self._ended = True
        span, self._span = self._span, None
        if span is None:
            return
        try:
            if error is not None:
                span.record_exception(error)
                span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            elif outcome is not None:
                span.set_attribute("leasectl.call.outcome", outcome.status)
                if outcome.status not in FINE_OUTCOMES:
                    span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR,
                                                      f"{outcome.status}: {outcome.detail}".rstrip(": ")))
            span.end()
        except Exception as exc:  # noqa: BLE001 - a tracer's trouble never stops a call
            log.warning("span of call %s not ended: %s", self.call.short_id, exc)


__all__ = ["OTEL", "TRACER_NAME", "CallSpan", "call_span_id", "recording"]
