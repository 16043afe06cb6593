"""Traces against a real database (issue 30): a call enqueued from a W3C `traceparent` keeps its
trace (a bad one refused before anything is written), a call made inside another carries its
parent's; the reference worker sends the call's trace with a span of its own to the fenced
receiver over HTTP (threaded and async); with OpenTelemetry each attempt is a span of the call's
trace carrying the call id and fencing token, and without it the worker runs unchanged; `leasectl
show` and the console's detail turn the trace into the context's `trace_url` link."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb
from rich.text import Text
from typer.testing import CliRunner

from console.core.traces import BadTraceContext, parse_traceparent
from console.db.connect import run_one
from console.db.session import ConsoleSession
from console.operator.cli import app
from console.operator.tui.app import LeasectlApp
from console.operator.tui.screens.detail import DetailScreen
from console.shared.contexts import resolve_context
from console.worker import AsyncCallContext, AsyncWorker, CallContext, ToolFailed, Worker, enqueue
from console.worker.receiver import FencedReceiver, ReceiverClient, ReceiverServer
from tests.conftest import ROOT
from tests.helpers import QUICK, SLOW, claim, job
from tests.tui.conftest import SIZE, settle

TOOLS = {"search": ("read_only", QUICK), "erp": ("mutating_verifiable", QUICK), "held": ("read_only", SLOW)}
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{CALLER_SPAN}-01"
OTHER = "0af7651916cd43dd8448eb211c80319c"
TEMPLATE = "https://tempo.example/trace/{trace_id}"


def key() -> str:
    return f"k-{uuid.uuid4().hex}"


def calls(conn: Any) -> int:
    return conn.execute("select count(*) as n from tool_jobs").fetchone()["n"]


# ----------------------------------------------------------------------------- enqueue


def test_a_call_enqueued_from_a_traceparent_keeps_its_trace(conn):
    made = enqueue(conn, "search", key(), {"q": "x"}, traceparent=TRACEPARENT)
    assert made is not None and made.created and job(conn, made.id)["trace_id"] == TRACE
    again = enqueue(conn, "search", key(), None, trace_id=OTHER, traceparent=f"00-{OTHER}-{CALLER_SPAN}-00")
    assert again is not None and job(conn, again.id)["trace_id"] == OTHER
    plain = enqueue(conn, "search", key())
    assert plain is not None and job(conn, plain.id)["trace_id"] is None


@pytest.mark.parametrize(("given", "says"), [
    ({"traceparent": f"00-{'0' * 32}-{CALLER_SPAN}-01"}, "all zeros"),
    ({"traceparent": f"00-{TRACE.upper()}-{CALLER_SPAN}-01"}, "lowercase"),
    ({"traceparent": "garbage"}, "not version-traceid-parentid-flags"),
    ({"trace_id": TRACE[:31]}, "not a W3C trace id"),
    ({"trace_id": OTHER, "traceparent": TRACEPARENT}, "differ"),
])
def test_a_bad_trace_is_refused_before_anything_is_written(conn, given, says):
    before = calls(conn)
    with pytest.raises(BadTraceContext, match=says):
        enqueue(conn, "search", key(), **given)
    assert calls(conn) == before, "never a call without its trace"


def test_a_call_made_inside_another_carries_its_trace(conn):
    """enqueue with parent_id: its parent's trace, unless it names one; a chain's next stage
    (complete_and_enqueue) carries it too."""
    parent = enqueue(conn, "search", key(), traceparent=TRACEPARENT)
    assert parent is not None and claim(conn, "w-1", ["search"])["id"] == parent.id
    child = enqueue(conn, "search", key(), parent_id=parent.id)
    own = enqueue(conn, "search", key(), parent_id=parent.id, trace_id=OTHER)
    assert child is not None and own is not None
    assert (job(conn, child.id)["trace_id"], job(conn, own.id)["trace_id"]) == (TRACE, OTHER)
    assert job(conn, child.id)["parent_id"] == parent.id
    lone = enqueue(conn, "erp", key())
    assert lone is not None and claim(conn, "w-1", ["erp"])["id"] == lone.id
    untraced = enqueue(conn, "search", key(), parent_id=lone.id)
    assert untraced is not None and job(conn, untraced.id)["trace_id"] is None


def test_the_database_gives_a_child_its_parents_trace_whatever_the_client(conn):
    """worker/enqueue.sql itself, as a worker in another language sends it: a call with a parent
    and no trace of its own is in its parent's trace (migration 0024), one naming its own keeps it."""
    parent = enqueue(conn, "search", key(), traceparent=TRACEPARENT)
    assert parent is not None and claim(conn, "w-1", ["search"])["id"] == parent.id

    def raw(trace_id: str | None) -> uuid.UUID:
        row = run_one(conn, "worker/enqueue", tool="search", idempotency_key=key(), payload=Jsonb({}),
                      agent_id=None, session_id=None, deadline_at=None, model=None, provider=None,
                      parent_id=parent.id, trace_id=trace_id)
        assert row is not None
        return row["id"]

    assert job(conn, raw(None))["trace_id"] == TRACE
    assert job(conn, raw(OTHER))["trace_id"] == OTHER


def test_a_next_stage_carries_the_trace(db, conn):
    first = enqueue(conn, "erp", key(), {"stage": 1}, traceparent=TRACEPARENT)
    assert first is not None

    def handler(ctx: CallContext) -> Any:
        return ctx.next_stage("search", f"{ctx.idempotency_key}:2", {"stage": 2}, result={"ok": True})

    outcome = Worker(db.dsn, "w-1", {"erp": handler}).run_once()
    assert outcome is not None and outcome.next_stage_id is not None
    assert job(conn, outcome.next_stage_id)["trace_id"] == TRACE


# ----------------------------------------------------------------------------- the worker and the receiver


@pytest.fixture
def receiver():
    server = ReceiverServer(FencedReceiver(name="erp-api")).start()
    try:
        yield server
    finally:
        server.stop()


def submit(client: ReceiverClient, ctx: CallContext | AsyncCallContext) -> Any:
    return client.submit(object_id="order-7", idempotency_key=ctx.idempotency_key, fence=ctx.fencing_token,
                         operation="update", sender=ctx.worker_id, execution=str(ctx.call.id),
                         traceparent=ctx.traceparent)


def test_the_worker_sends_the_call_trace_to_the_fenced_receiver(db, conn, receiver):
    """Over HTTP, as the `traceparent` header: the call's trace, a span of the attempt's own (not
    the caller's), sampled; each attempt a new span; a call without a trace sends none."""
    client = ReceiverClient(receiver.url)
    traced = enqueue(conn, "erp", key(), traceparent=TRACEPARENT)
    assert traced is not None
    seen: list[str | None] = []

    def handler(ctx: CallContext) -> Any:
        assert ctx.trace_id == TRACE
        seen.append(ctx.traceparent)
        ctx.start_side_effect()
        reply = submit(client, ctx)
        if len(seen) == 1:
            raise ToolFailed("the service said 503 after it", retryable=True)  # a second attempt follows
        return reply.result

    worker = Worker(db.dsn, "w-1", {"erp": handler})
    assert worker.run_once().status == "requeued"  # type: ignore[union-attr]

    def check_then(ctx: CallContext) -> Any:
        ctx.record_check("done", {"confirmation": "erp-api-1"})  # it ran: the check, then the result
        seen.append(ctx.traceparent)
        submit(client, ctx)  # the replay: same key, the first result, no second effect
        return {"confirmation": "erp-api-1"}

    assert Worker(db.dsn, "w-2", {"erp": check_then}).run_once().status == "succeeded"  # type: ignore[union-attr]
    first, second = (parse_traceparent(s or "") for s in seen)
    assert (first.trace_id, second.trace_id) == (TRACE, TRACE)
    assert first.sampled and second.sampled
    assert len({first.parent_id, second.parent_id, CALLER_SPAN}) == 3, "each attempt a span of its own"
    effects = receiver.receiver.effects
    assert [e.traceparent for e in effects] == [seen[0]], "the receiver got the worker's traceparent"

    untraced = enqueue(conn, "search", key())
    assert untraced is not None
    Worker(db.dsn, "w-1", {"search": lambda ctx: submit(client, ctx).result}).run_once()
    assert receiver.receiver.effects[-1].traceparent == "", "no trace: no traceparent header"


def test_the_async_worker_sends_the_call_trace_too(db, conn, receiver):
    client = ReceiverClient(receiver.url)
    ids = [enqueue(conn, "search", key(), {"i": i}, traceparent=f"00-{uuid.uuid4().hex}-{CALLER_SPAN}-01")
           for i in range(4)]

    async def handler(ctx: AsyncCallContext) -> Any:
        reply = await asyncio.to_thread(submit, client, ctx)
        return {"sent": ctx.traceparent, "confirmation": reply.result["confirmation"]}

    worker = AsyncWorker(db.dsn, "wa", handler, poll_interval=0.05, concurrency=4)
    assert worker.run(threading.Event(), drain=True) == 4
    by_key = {e.idempotency_key: e.traceparent for e in receiver.receiver.effects}
    for made in ids:
        assert made is not None
        row = job(conn, made.id)
        sent = parse_traceparent(by_key[row["idempotency_key"]])
        assert sent.trace_id == row["trace_id"] and sent.parent_id != CALLER_SPAN and sent.sampled
        assert row["result"]["sent"] == str(sent)


# ----------------------------------------------------------------------------- OpenTelemetry


@pytest.fixture
def spans():
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_each_attempt_is_a_span_of_the_call_trace_with_its_id_and_token(db, conn, spans):
    from opentelemetry import trace

    provider, exporter = spans
    made = enqueue(conn, "erp", key(), traceparent=TRACEPARENT)
    assert made is not None
    inside: list[Any] = []

    def handler(ctx: CallContext) -> Any:
        inside.append((trace.get_current_span().get_span_context(), ctx.traceparent))
        return {"ok": True}

    worker = Worker(db.dsn, "w-1", {"erp": handler}, tracer_provider=provider)
    assert worker.run_once().status == "succeeded"  # type: ignore[union-attr]
    (span,) = exporter.get_finished_spans()
    row = job(conn, made.id)
    assert span.attributes["leasectl.call.id"] == str(made.id)
    assert span.attributes["leasectl.call.fencing_token"] == row["fencing_token"]
    assert (span.attributes["leasectl.call.tool"], span.attributes["leasectl.call.attempt"],
            span.attributes["leasectl.worker.id"], span.attributes["leasectl.call.outcome"]) == \
        ("erp", 1, "w-1", "succeeded")
    assert f"{span.context.trace_id:032x}" == TRACE == row["trace_id"]
    # every attempt's parent: the call itself, a remote span of the call's trace named by its id
    assert span.parent.is_remote and span.parent.span_id == (made.id.int >> 64)
    current, sent = inside[0]
    assert current.span_id == span.context.span_id, "the handler runs under the attempt's span"
    assert parse_traceparent(sent).parent_id == f"{span.context.span_id:016x}"


def test_the_async_worker_makes_the_same_spans(db, conn, spans):
    from opentelemetry import trace

    provider, exporter = spans
    made = [enqueue(conn, "search", key(), {"i": i}, traceparent=TRACEPARENT if i % 2 else None) for i in range(6)]

    async def handler(ctx: AsyncCallContext) -> Any:
        await asyncio.sleep(0.01)
        return {"span": f"{trace.get_current_span().get_span_context().span_id:016x}", "sent": ctx.traceparent}

    worker = AsyncWorker(db.dsn, "wa", handler, poll_interval=0.05, concurrency=6, tracer_provider=provider)
    assert worker.run(threading.Event(), drain=True) == 6
    by_call = {s.attributes["leasectl.call.id"]: s for s in exporter.get_finished_spans()}
    assert len(by_call) == 6
    for call in made:
        assert call is not None
        row = job(conn, call.id)
        span = by_call[str(call.id)]
        assert span.attributes["leasectl.call.fencing_token"] == row["fencing_token"]
        assert row["result"]["span"] == f"{span.context.span_id:016x}" == parse_traceparent(row["result"]["sent"]).parent_id
        if row["trace_id"] is not None:
            assert f"{span.context.trace_id:032x}" == row["trace_id"] and span.parent.is_remote
        else:
            assert span.parent is None, "a call without a trace starts one"


def test_a_worker_without_opentelemetry_runs_unchanged(db, conn):
    """opentelemetry not importable in the worker's process: both workers take calls to their end,
    and still send the call's trace on."""
    ids = [enqueue(conn, "search", key(), {"i": i}, traceparent=TRACEPARENT) for i in range(3)]
    script = textwrap.dedent("""
        import sys
        sys.modules["opentelemetry"] = None
        import threading
        from console.worker import AsyncWorker, Worker, tracing
        assert not tracing.OTEL

        async def later(ctx):
            return {"sent": ctx.traceparent, "by": "async"}

        done = Worker(sys.argv[1], "w-plain", lambda ctx: {"sent": ctx.traceparent, "by": "threads"}).run_once()
        assert done.status == "succeeded", done
        print(AsyncWorker(sys.argv[1], "w-async", later, poll_interval=0.05).run(threading.Event(), drain=True))
        print(sorted(m for m, found in sys.modules.items() if found is not None and m.startswith("opentelemetry")))
    """)
    ran = subprocess.run([sys.executable, "-c", script, db.dsn], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["2", "[]"]
    results = [job(conn, made.id)["result"] for made in ids if made is not None]
    assert sorted(r["by"] for r in results) == ["async", "async", "threads"]
    assert {parse_traceparent(r["sent"]).trace_id for r in results} == {TRACE}


# ----------------------------------------------------------------------------- the link: show, show --json, detail


@pytest.fixture
def config_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("LEASECTL_CONTEXT", raising=False)
    return tmp_path


def contexts(home: Path, db, trace_url: str | None = TEMPLATE) -> None:
    path = home / "leasectl" / "contexts.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    line = f'trace_url = "{trace_url}"\n' if trace_url is not None else ""
    path.write_text(f'[contexts.tempo]\ndsn = "{db.dsn}"\n{line}[contexts.bare]\ndsn = "{db.dsn}"\n')


def test_show_turns_the_trace_into_the_context_link(db, conn, config_home):
    contexts(config_home, db)
    traced = enqueue(conn, "search", key(), traceparent=TRACEPARENT)
    plain = enqueue(conn, "search", key())
    assert traced is not None and plain is not None
    link = f"https://tempo.example/trace/{TRACE}"

    def show(*args: str) -> Any:
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    shown = json.loads(show("--context", "tempo", "show", str(traced.id), "--json"))
    assert (shown["trace_id"], shown["trace_url"]) == (TRACE, link)
    assert json.loads(show("--context", "tempo", "show", str(plain.id), "--json"))["trace_url"] is None
    assert json.loads(show("--context", "bare", "show", str(traced.id), "--json"))["trace_url"] is None
    assert json.loads(show("show", str(traced.id), "--json", "--dsn", db.dsn))["trace_url"] is None
    words = show("--context", "tempo", "show", str(traced.id))
    # the URL may fold in its cell (and carry a terminal's link and colour escapes, if it thinks it has one)
    plain = re.sub(r"\x1b\][^\x1b]*\x1b\\|\x1b\[[0-9;]*m", "", words)
    folded = "".join(ch for ch in plain if not ch.isspace() and ch != "│")
    assert "trace link" in plain and link in folded and TRACE in plain
    assert "trace link" not in show("--context", "bare", "show", str(traced.id))


def test_a_bad_trace_url_stops_show_naming_the_context(db, conn, config_home):
    contexts(config_home, db, trace_url="ftp://tempo.example/{trace_id}")
    traced = enqueue(conn, "search", key(), traceparent=TRACEPARENT)
    assert traced is not None
    result = CliRunner().invoke(app, ["--context", "tempo", "show", str(traced.id), "--json"])
    assert result.exit_code == 2 and "[contexts.tempo]: trace_url" in result.output
    assert "not an http or https URL" in result.output and "Traceback" not in result.output


async def test_the_detail_screen_shows_the_trace_as_a_link(db, conn, config_home):
    contexts(config_home, db)
    traced = enqueue(conn, "held", key(), traceparent=TRACEPARENT)
    assert traced is not None
    context = resolve_context("tempo")
    session = ConsoleSession(context.dsn, operator="dana", context=context)
    console = LeasectlApp(session, listen=False)
    async with console.run_test(size=SIZE) as pilot:
        await settle(pilot)
        detail = DetailScreen(traced.id)
        await console.push_screen(detail)
        await settle(pilot, lambda: detail.loaded_once and detail.detail is not None)
        grid = detail.query_one("#fields").content
        labels = [cell.plain for cell in grid.columns[0]._cells]
        value = grid.columns[1]._cells[labels.index("trace link")]
        assert isinstance(value, Text) and value.plain == f"https://tempo.example/trace/{TRACE}"
        assert value.style.link == value.plain, "a link the terminal can open"
