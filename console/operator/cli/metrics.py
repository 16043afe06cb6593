"""`leasectl metrics` (the seeds' minimum metrics, by tool, model, provider or service) and `leasectl
metrics serve` (the same for Prometheus)."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Annotated

import typer

from console.operator.cli.common import (
    DsnOption,
    JsonOption,
    app,
    connect_for_reading,
    dsn_option,
    err,
    friendly,
    out,
    print_json,
    read_only_option,
)
from console.shared.config import METRICS_CACHE_SECONDS, METRICS_LISTEN
from console.shared.errors import BadInput
from console.shared.text import sanitize
from console.shared.times import DURATION_FORMS, parse_duration

metrics_app = typer.Typer(name="metrics", add_completion=False, no_args_is_help=False,
                          pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]},
                          help="The seeds' minimum metrics, by tool, model, provider or service; `serve` for "
                               "Prometheus.")
app.add_typer(metrics_app)

WindowOption = Annotated[str, typer.Option("--window", help=f"How far back the history counts ({DURATION_FORMS})")]
ByOption = Annotated[str, typer.Option("--by", help="Group by tool, model, provider or service (the external "
                                                   "service a tool calls)")]


@metrics_app.callback(invoke_without_command=True)
def metrics(ctx: typer.Context, window: WindowOption = "1h", by: ByOption = "tool", as_json: JsonOption = False,
            dsn: DsnOption = None) -> None:
    """Now: running calls, heartbeat ages, lease left, expired leases, unheard cancels, unknown outcomes,
    calls past their deadline. Over the window: renewal failures, reclaims, stale writes refused, queue
    wait, start confirmation and accept wait (p50, p95), lock timeouts apart from statement timeouts."""
    if ctx.invoked_subcommand is not None:
        # `leasectl metrics --dsn X serve` means serve's --dsn; the report's options mean nothing there
        ctx.obj = dsn
        if (window, by, as_json) != ("1h", "tool", False):
            friendly(_refuse)("--window, --by and --json are options of `leasectl metrics`, not of "
                              "`leasectl metrics serve` (it serves every group, over all history)")
        return
    friendly(_show)(window, by, as_json, dsn)


def _refuse(message: str) -> None:
    raise BadInput(message)


def _show(window: str, by: str, as_json: bool, dsn: str | None) -> None:
    # imported here, not above: every other command starts 35 ms sooner without them
    from console.core.metrics import check_by
    from console.db import metrics as metric_reads
    from console.operator.present.metrics import metrics_table

    seconds = parse_duration(window, what="--window")
    chosen = check_by(by)
    with connect_for_reading(dsn) as conn:
        found = metric_reads.report(conn, window_seconds=seconds, by=chosen)
    if as_json:
        print_json(found.contract_json())
        return
    out.print(metrics_table(found))
    if not found.groups:
        err.print("nothing to show: no tool is registered, nothing is live and nothing happened in the window")


@metrics_app.command()
@friendly
def serve(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to serve /metrics on (port 0: any free one)")]
        = METRICS_LISTEN,
    cache: Annotated[float, typer.Option("--cache-seconds", min=0, max=60, help="A burst of scrapes within this "
                                         "many seconds costs one database read")] = METRICS_CACHE_SECONDS,
    dsn: DsnOption = None,
) -> None:
    """Serve the metrics in the Prometheus text format at /metrics (leasectl_up 0 when the database
    does not answer)."""
    from console.operator import exporter  # prometheus_client and http.server: only for serve

    logging.basicConfig(level=logging.WARNING, format="leasectl metrics serve: %(message)s")
    early = ctx.obj if isinstance(ctx.obj, str) else None
    if early is not None and dsn is not None and early != dsn:
        raise BadInput("--dsn is given twice, before `serve` and after it: give it once")
    read_only = read_only_option()
    running = exporter.start(dsn_option(dsn or early), listen, read_only=read_only, cache_seconds=cache,
                             fold_every=None if read_only else exporter.FOLD_EVERY_SECONDS)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # the first line says where: a test or a supervisor that asked for port 0 reads it from here
    print(f"serving {sanitize(running.url)}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        running.stop()
        err.print("stopped")
