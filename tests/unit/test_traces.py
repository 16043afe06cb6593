"""Traces without a database (issue 30): a W3C `traceparent` read by the specification's rules
(console/core/traces.py), a context's `trace_url` checked when the file is read and filled in
URL-safely (console/shared/contexts.py), the trace as a terminal link in a call's fields, and the
worker's span of an attempt (console/worker/tracing.py) with and without OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime

import pytest
from rich.console import Console

from console.core.models import Job
from console.core.traces import (
    BadTraceContext,
    TraceParent,
    new_span_id,
    parse_traceparent,
    trace_id_from,
    traceparent,
)
from console.operator import present
from console.shared.contexts import Context, load_contexts, trace_link
from console.shared.errors import EXIT_BAD_INPUT, BadInput
from console.worker.calls import CallOutcome, ClaimedCall
from console.worker.tracing import CallSpan, call_span_id
from tests.conftest import ROOT

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
HEADER = f"00-{TRACE}-{PARENT}-01"
NOW = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)
CALL = uuid.UUID("8f1b7c3d-0000-4000-8000-000000000001")


# ----------------------------------------------------------------------------- traceparent


def test_a_traceparent_gives_its_trace_parent_and_flags():
    found = parse_traceparent(HEADER)
    assert (found.trace_id, found.parent_id, found.flags, found.sampled) == (TRACE, PARENT, 1, True)
    assert str(found) == HEADER
    assert parse_traceparent(f"  00-{TRACE}-{PARENT}-00\t").sampled is False  # a header's spaces
    # a later version is read as far as version 00 goes, and may carry more after it
    assert parse_traceparent(f"cc-{TRACE}-{PARENT}-01-what-comes-later").trace_id == TRACE
    assert parse_traceparent(f"01-{TRACE}-{PARENT}-09").flags == 9


@pytest.mark.parametrize(("value", "says"), [
    ("", "not version-traceid-parentid-flags"),
    ("00-abc", "not version-traceid-parentid-flags"),
    (f"00-{TRACE}-{PARENT}-01-extra", "exactly 55 characters"),
    (f"00-{TRACE}-{PARENT}-1", "exactly 55 characters"),
    (f"00-{TRACE.upper()}-{PARENT}-01", "lowercase: W3C trace context allows no capitals"),
    (f"00-{'0' * 32}-{PARENT}-01", "all zeros"),
    (f"00-{TRACE}-{'0' * 16}-01", "parent id 0000000000000000 is all zeros"),
    (f"00-{TRACE}-{PARENT.upper()}-01", "not a W3C span id"),
    (f"00-{TRACE[:-1]}g-{PARENT}-01", "not a W3C trace id"),
    (f"00-{TRACE}-{PARENT}-0x", "flags '0x'"),
    (f"ff-{TRACE}-{PARENT}-01", "version ff is invalid"),
    (f"0g-{TRACE}-{PARENT}-01", "version '0g'"),
    (f"01-{TRACE}-{PARENT[:-2]}-01", "shorter than the 55 characters"),
    (f"00_{TRACE}_{PARENT}_01", "not version-traceid-parentid-flags"),
])
def test_a_bad_traceparent_is_bad_input_saying_what_is_wrong(value, says):
    with pytest.raises(BadTraceContext) as info:
        parse_traceparent(value)
    assert says in str(info.value)
    # bad input (exit 2 on the command line), and a ValueError for a library's caller
    assert isinstance(info.value, BadInput) and isinstance(info.value, ValueError)
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_the_trace_an_enqueue_takes():
    assert trace_id_from() is None
    assert trace_id_from(traceparent=HEADER) == TRACE
    assert trace_id_from(trace_id=TRACE) == TRACE
    assert trace_id_from(trace_id=TRACE, traceparent=HEADER) == TRACE  # both, the same trace
    with pytest.raises(BadTraceContext, match="differ"):
        trace_id_from(trace_id="a" * 32, traceparent=HEADER)
    with pytest.raises(BadTraceContext, match="not a W3C trace id"):
        trace_id_from(trace_id="xyz")
    with pytest.raises(BadTraceContext, match="all zeros"):
        trace_id_from(trace_id="0" * 32)
    with pytest.raises(BadTraceContext, match="traceparent must be text"):
        parse_traceparent(42)  # type: ignore[arg-type]


def test_a_traceparent_sent_on_names_the_trace_and_a_fresh_span():
    spans = {new_span_id() for _ in range(200)}
    assert len(spans) == 200 and all(len(s) == 16 and s != "0" * 16 for s in spans)
    sent = traceparent(TRACE, PARENT)
    assert sent == HEADER and parse_traceparent(sent) == TraceParent(TRACE, PARENT, 1)
    assert traceparent(TRACE, PARENT, sampled=False).endswith("-00")
    with pytest.raises(BadTraceContext):
        traceparent("nope", PARENT)


# ----------------------------------------------------------------------------- trace_url


def contexts_file(tmp_path, trace_url: str):
    path = tmp_path / "contexts.toml"
    path.write_text(f'[contexts.prod-eu]\ndsn = "postgresql://x@db/leasectl"\ntrace_url = "{trace_url}"\n')
    return path


def test_a_trace_url_template_fills_in_the_trace_id_url_safely(tmp_path):
    context = load_contexts(contexts_file(tmp_path, "https://tempo.example/trace/{trace_id}"))["prod-eu"]
    assert context.trace_link(TRACE) == f"https://tempo.example/trace/{TRACE}"
    assert context.trace_link(None) is None
    assert Context(name="x", dsn="d").trace_link(TRACE) is None  # no template: no link
    # every place it is named, each percent-encoded (whatever a row could hold)
    template = "http://grafana.local/explore?left={trace_id}&q=traceID%3D{trace_id}"
    assert trace_link(template, "a/b c?&#") == \
        "http://grafana.local/explore?left=a%2Fb%20c%3F%26%23&q=traceID%3Da%2Fb%20c%3F%26%23"


@pytest.mark.parametrize(("template", "says"), [
    ("https://tempo.example/trace/", "has no {trace_id}"),
    ("https://tempo.example/trace/{traceid}", "has no {trace_id}"),
    ("https://tempo.example/{trace_id}/{span_id}", "only {trace_id} is filled in"),
    ("ftp://tempo.example/{trace_id}", "not an http or https URL"),
    ("javascript:alert({trace_id})", "not an http or https URL"),
    ("tempo.example/trace/{trace_id}", "not an http or https URL"),
    ("https:///trace/{trace_id}", "names no host"),
    ("https://tempo.example/trace/{trace_id} x", "spaces or control characters"),
    ("https://tempo.example/\\u001b]8;;{trace_id}", "spaces or control characters"),
])
def test_a_bad_trace_url_is_an_error_naming_the_context(tmp_path, template, says):
    path = contexts_file(tmp_path, template)
    with pytest.raises(BadInput) as info:
        load_contexts(path)
    message = str(info.value)
    assert f"{path}: [contexts.prod-eu]: trace_url:" in message and says in message
    assert info.value.exit_code == EXIT_BAD_INPUT


# ----------------------------------------------------------------------------- the trace in a call's fields


def a_job(trace_id: str | None = TRACE) -> Job:
    return Job.model_validate(dict(id=CALL, tool="web_search", side_effect="read_only", state="running",
                                   owner_id="w-3", fencing_token=2, attempt=1, idempotency_key="k", chain_id=CALL,
                                   trace_id=trace_id, created_at=NOW, accepted_at=NOW, health="healthy",
                                   db_now=NOW))


def test_the_trace_is_a_link_by_the_context_template():
    template = "https://tempo.example/trace/{trace_id}"
    fields = dict(present.call_fields(a_job(), trace_url=template))
    assert fields["trace"].plain == TRACE
    link = fields["trace link"]
    assert link.plain == f"https://tempo.example/trace/{TRACE}"
    assert link.style.link == link.plain  # type: ignore[union-attr]
    assert "trace link" not in dict(present.call_fields(a_job()))  # no template: the id alone
    assert {"trace", "trace link"}.isdisjoint(dict(present.call_fields(a_job(None), trace_url=template)))
    # a terminal that makes links gets one (OSC 8), with the URL as its words
    console = Console(width=160, force_terminal=True, color_system="truecolor", record=False)
    with console.capture() as captured:
        console.print(present.job_panel(a_job(), trace_url=template))
    assert "\x1b]8;id=" in captured.get() and f";https://tempo.example/trace/{TRACE}\x1b\\" in captured.get()


# ----------------------------------------------------------------------------- the worker's span


def a_call(trace_id: str | None = TRACE, *, known: bool = True, token: int = 3, attempt: int = 2) -> ClaimedCall:
    return ClaimedCall(id=CALL, tool="payment_capture", payload={}, fencing_token=token, attempt=attempt,
                       idempotency_key="k", side_effect="mutating_verifiable", lease_seconds=30, heartbeat_seconds=5,
                       jitter_seconds=1, lease_until=NOW, deadline_at=None, agent_id=None,
                       previous_side_effect_at=None, previous_request_id=None, chain_id=CALL, stage=0,
                       trace_id=trace_id, trace_known=known)


def test_an_attempt_sends_the_call_trace_with_a_span_of_its_own():
    first, second = CallSpan(a_call(), "w-1"), CallSpan(a_call(), "w-1")
    sent = parse_traceparent(first.traceparent or "")
    assert (sent.trace_id, sent.sampled, sent.parent_id) == (TRACE, True, first.span_id)
    assert first.span_id != second.span_id, "each attempt is a span of its own"
    assert CallSpan(a_call(None), "w-1").traceparent is None  # no trace: nothing to send on
    assert CallSpan(ClaimedCall.from_row(claim_row(trace_id=TRACE)), "w").trace_id == TRACE


def claim_row(**extra: object) -> dict:
    return {"id": CALL, "tool": "t", "payload": {}, "fencing_token": 1, "attempt": 1, "idempotency_key": "k",
            "side_effect": "read_only", "lease_seconds": 30, "heartbeat_seconds": 5, "jitter_seconds": 1,
            "lease_until": NOW, "deadline_at": None, "agent_id": None, "side_effect_started_at": None,
            "external_request_id": None, **extra}


def test_a_claim_without_the_trace_reads_it_once_when_it_is_needed():
    """A claim statement that does not return trace_id (an older one): the trace is read when
    first needed, once, and never when it is not."""
    asked: list[int] = []
    call = ClaimedCall.from_row(claim_row())
    assert call.trace_known is False and ClaimedCall.from_row(claim_row(trace_id=None)).trace_known is True
    span = CallSpan(call, "w-1", lookup=lambda: asked.append(1) or TRACE)
    assert asked == [] and span.needs_lookup
    assert parse_traceparent(span.traceparent or "").trace_id == TRACE and span.trace_id == TRACE
    assert asked == [1] and not span.needs_lookup
    assert CallSpan(a_call(), "w-1", lookup=lambda: asked.append(2) or None).trace_id == TRACE and asked == [1]

    def broken() -> str:
        raise RuntimeError("database away")

    assert CallSpan(call, "w-1", lookup=broken).traceparent is None  # never fails the call


@pytest.fixture
def spans():
    """An OpenTelemetry SDK tracer provider of the test's own, exporting to memory."""
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_with_opentelemetry_an_attempt_is_a_span_of_the_call_trace(spans):
    from opentelemetry import trace

    provider, exporter = spans
    span = CallSpan(a_call(), "w-1", tracer_provider=provider)
    span.start()
    with span.current():
        current = trace.get_current_span().get_span_context()
    sent = parse_traceparent(span.traceparent or "")
    span.end(CallOutcome(CALL, 3, "succeeded"))
    span.end(CallOutcome(CALL, 3, "failed"))  # once
    (done,) = exporter.get_finished_spans()
    assert done.name == "call payment_capture" and done.kind == trace.SpanKind.CONSUMER
    assert dict(done.attributes) == {
        "leasectl.call.id": str(CALL), "leasectl.call.tool": "payment_capture", "leasectl.call.fencing_token": 3,
        "leasectl.call.attempt": 2, "leasectl.worker.id": "w-1", "leasectl.call.stage": 0,
        "leasectl.call.chain_id": str(CALL), "leasectl.call.outcome": "succeeded"}
    assert f"{done.context.trace_id:032x}" == TRACE
    assert done.parent is not None and done.parent.is_remote and done.parent.span_id == call_span_id(a_call())
    # what the handler sends on and what runs under it are this span
    assert (sent.trace_id, sent.parent_id) == (TRACE, f"{done.context.span_id:016x}")
    assert current.span_id == done.context.span_id
    assert done.status.is_ok


def test_the_api_alone_makes_no_span_and_reads_nothing():
    """opentelemetry-api installed but no tracer provider configured: no span is started (nor the
    trace read for one): the worker pays nothing for a tracer that records nothing."""
    trace = pytest.importorskip("opentelemetry.trace")
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a global tracer provider is set in this process")
    asked: list[int] = []
    span = CallSpan(ClaimedCall.from_row(claim_row()), "w-1", lookup=lambda: asked.append(1) or TRACE)
    span.start()
    with span.current():
        assert not trace.get_current_span().get_span_context().is_valid
    span.end(CallOutcome(CALL, 1, "succeeded"))
    assert span.records is False and asked == []


def test_a_failed_attempt_and_a_call_without_trace(spans):
    provider, exporter = spans
    failed = CallSpan(a_call(), "w-1", tracer_provider=provider)
    failed.start()
    failed.end(CallOutcome(CALL, 3, "result_rejected", "complete.sql: zero rows"))
    lone = CallSpan(a_call(None), "w-1", tracer_provider=provider)
    lone.start()
    sent = parse_traceparent(lone.traceparent or "")  # a trace of its own, sent on
    lone.end(error=RuntimeError("boom"))
    rejected, raised = exporter.get_finished_spans()
    assert rejected.status.description == "result_rejected: complete.sql: zero rows"
    assert not rejected.status.is_ok and rejected.attributes["leasectl.call.outcome"] == "result_rejected"
    assert raised.parent is None and f"{raised.context.trace_id:032x}" == sent.trace_id
    assert [e.name for e in raised.events] == ["exception"] and not raised.status.is_ok


def test_without_opentelemetry_the_worker_imports_and_sends_its_traceparent():
    """opentelemetry not importable (a worker installed without the extra): console.worker loads,
    no span is made, and an attempt still sends the call's trace on."""
    code = textwrap.dedent(f"""
        import sys
        sys.modules["opentelemetry"] = None  # import opentelemetry... raises ImportError
        import uuid
        import console.worker
        from console.worker import tracing
        from console.worker.calls import ClaimedCall
        assert tracing.OTEL is False
        call = ClaimedCall(id=uuid.uuid4(), tool="t", payload={{}}, fencing_token=1, attempt=1, idempotency_key="k",
                           side_effect="read_only", lease_seconds=30, heartbeat_seconds=5, jitter_seconds=1,
                           lease_until=None, deadline_at=None, agent_id=None, previous_side_effect_at=None,
                           previous_request_id=None, trace_id="{TRACE}")
        span = tracing.CallSpan(call, "w-1")
        span.start()
        with span.current():
            pass
        span.end()
        print(span.traceparent)
        print(sorted(m for m, found in sys.modules.items()
                     if found is not None and m.split(".")[0] in ("opentelemetry", "textual", "rich")))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    sent, modules = done.stdout.splitlines()
    assert parse_traceparent(sent).trace_id == TRACE
    assert modules == "[]", "a worker needs no UI and no OpenTelemetry"
