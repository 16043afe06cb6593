"""`leasectl metrics serve`: the seeds' metrics in the Prometheus text format, for the alerts that
wake the on-call engineer.

* A custom collector reads the database on scrape (queries/metrics/live.sql and totals.sql, one
  snapshot) and keeps the answer for a few seconds: a burst of scrapes (two Prometheus servers, a
  person with curl) costs one read. `describe()` names every family, so registering the collector
  never queries.
* prometheus_client writes the exposition format (names, escaping of label values, HELP/TYPE,
  histogram buckets); leasectl never hand-writes it. A private CollectorRegistry: no process
  metrics of ours mixed in, and tests get a registry of their own.
* Counters are totals over the whole history (append-only job_events plus the rollup of
  migration 0008), so they never go backwards across scrapes or exporter restarts. A background
  thread folds what is a minute old into the rollup every 30 s (off the hot path: no worker write
  is added), so a scrape reads the rollup and a short tail, whatever the size of the history.
  The exporter also never reports less than it reported before for a series (a guard, should a
  call's labels change under it).
* The database unreachable at scrape time: HTTP 200 with `leasectl_up 0` and no other series
  (like postgres_exporter's pg_up): Prometheus' own `up` then still says the exporter answers,
  and an alert on `leasectl_up == 0` says the database is what is down. Nothing stale is served
  as if it were fresh: a scrape answered from the cache first asks the database whether it is
  there (meta/ping, one round trip), so `leasectl_up` is the truth of that scrape, never of an
  earlier one; and the values carry `leasectl_data_age_seconds` (0 when read for this scrape).
* Idle connections cost a file descriptor, not a thread (ParkingWSGIServer, below).
* Owners never become labels: tool, model, provider, service (the tool's, tools.service), state,
  side_effect, cause. Call ids become one, in one family only and bounded: the calls waiting in
  outcome_unknown (leasectl_outcome_unknown_call, at most LISTED_UNKNOWN of them; console/core/metrics.py says why), so
  that an alert can carry the command that opens the call.
* leasectl_accept_wait_seconds is not in migration 0008's rollup (it would take a migration): the
  exporter folds it itself by the rollup's watermark (console.core.metrics.AcceptWaitTotals), so
  it too is a total over the whole history, read once at the first scrape, then only its tail.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from console.core.metrics import LISTED_UNKNOWN, AcceptWaitTotals, Scrape, TotalRow, WaitingCalls
from console.db import metrics
from console.db.connect import ping
from console.db.lane import Lane
from console.shared.config import METRICS_CACHE_SECONDS, METRICS_LISTEN
from console.shared.errors import BadInput, LeasectlError, PermissionDenied, ReadOnlySession
from console.shared.text import sanitize

log = logging.getLogger("leasectl.exporter")

DEFAULT_LISTEN = METRICS_LISTEN
CACHE_SECONDS = METRICS_CACHE_SECONDS
FOLD_EVERY_SECONDS = 30.0
FOLD_LAG_SECONDS = 60.0
STATES = ("queued", "running", "cancel_requested", "outcome_unknown")
CAUSES = ("lock_timeout", "statement_timeout")
CALL_LABELS = ["tool", "model", "provider", "service"]
COUNTERS = {  # metric in the history -> (family name without _total, help)
    "renewal_failures": ("leasectl_renewal_failures",
                         "Heartbeats answered with zero rows: the lease was lost (heartbeat_lost)."),
    "reclaims": ("leasectl_reclaims", "Calls taken over after a lost lease: reclaimed by a new owner, or "
                                      "requeued by the sweep once the lease had run out."),
    "stale_writes_rejected": ("leasectl_stale_writes_rejected",
                              "Writes refused for a stale fencing token (result_rejected, receiver_rejected)."),
}
HISTOGRAMS = {
    "queue_wait": ("leasectl_queue_wait_seconds", "From entering the queue (enqueue or requeue) to the claim."),
    "start_confirm": ("leasectl_start_confirm_seconds",
                      "From the claim to the journaled start of the external request (tool_request_started)."),
    "accept_wait": ("leasectl_accept_wait_seconds",
                    "From the call's acceptance upstream (accepted_at) to its claim from the queue."),
}
GAUGES = {
    "leasectl_up": ("1 when this scrape reached the database (its read, or a ping when the values come from the "
                    "cache), 0 when it did not (then nothing else is reported).", []),
    "leasectl_calls": ("Calls not finished, by tool and state (queued, running, cancel_requested, "
                       "outcome_unknown).", ["tool", "state"]),
    "leasectl_oldest_heartbeat_age_seconds": ("Age of the stalest heartbeat among calls holding a lease.",
                                              CALL_LABELS),
    "leasectl_min_lease_left_seconds": ("The least lease time left among calls holding a lease (negative: "
                                        "expired that long ago).", CALL_LABELS),
    "leasectl_expired_leases": ("Calls whose lease ran out, not yet reclaimed or swept.", CALL_LABELS),
    "leasectl_cancel_unheard_calls": ("Calls in cancel_requested for longer than 2H + J: nobody heard the "
                                      "cancel.", CALL_LABELS),
    "leasectl_past_deadline_calls": ("Calls running past their deadline: their lease ended with it; the sweep "
                                     "ends them.", CALL_LABELS),
    "leasectl_outcome_unknown_calls": ("Calls waiting in outcome_unknown for a human: a side effect may "
                                       "have happened.", ["tool", "side_effect"]),
    "leasectl_orphaned_agents": ("Agents whose ancestor is terminated or silent while they still run calls, hold "
                                 "grants or heartbeat (seed 003's orphans; the supervisor proposes a shutdown).", []),
    "leasectl_outcome_unknown_call": (f"1 for each call waiting in outcome_unknown, by id: at most {LISTED_UNKNOWN} "
                                      "series, the longest waiting first (alerts carry `leasectl show ID` from "
                                      "the id).", ["id", "tool", "side_effect"]),
    "leasectl_outcome_unknown_unlisted_calls": (f"Calls waiting in outcome_unknown beyond the {LISTED_UNKNOWN} "
                                                "that have a leasectl_outcome_unknown_call series of their own.",
                                                []),
}
# not from a read: how old the values of this answer are (a scrape within the cache gets them again)
AGE = ("leasectl_data_age_seconds", "Seconds since the database read these values come from: 0 when read for "
                                    "this scrape, more when served from the exporter's cache (--cache-seconds). "
                                    "leasectl_up is 1 only when this very scrape reached the database.")


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:9464` for IPv6; port 0 picks a free one); bad input otherwise."""
    shown = sanitize(text, max_chars=80)
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host:
        raise BadInput(f"--listen '{shown}' is not HOST:PORT", hint=f"e.g. {DEFAULT_LISTEN} or [::1]:9464")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise BadInput(f"--listen '{shown}': the port must be a number from 0 to 65535")
    return host, int(port_text)


# ----------------------------------------------------------------------------- the database side


def exporter_lane(dsn: str, *, read_only: bool = False, application_name: str = "leasectl-exporter") -> Lane:
    """The exporter's own session (leasectl's limits, application_name leasectl-exporter; the
    schema checked on every connection), made again after a loss (console.db.lane). One for reads;
    the folder thread has another."""
    return Lane(dsn, application_name=application_name, read_only=read_only, check_schema=True)


# ----------------------------------------------------------------------------- the collector


def _label(value: str | None) -> str:
    return "" if value is None else value


def families_of(scrape: Scrape, waiting: WaitingCalls | None = None) -> list[Metric]:
    """Every family /metrics shows, built from one read (no I/O here: tested on its own). Without
    `waiting` (the calls in outcome_unknown one by one) none is listed: all are counted unlisted."""
    out: dict[str, GaugeMetricFamily] = {name: GaugeMetricFamily(name, doc, labels=labels)
                              for name, (doc, labels) in GAUGES.items()}
    out["leasectl_up"].add_metric([], 1)
    out["leasectl_orphaned_agents"].add_metric([], scrape.orphaned_agents)
    waiting = waiting or scrape.waiting  # the scrape's own, read in its snapshot
    if waiting is None:
        waiting = WaitingCalls((), sum(r.calls for r in scrape.live if r.state == "outcome_unknown"))
    for call in waiting.listed[:LISTED_UNKNOWN]:
        out["leasectl_outcome_unknown_call"].add_metric([call.id, call.tool, call.side_effect], 1)
    out["leasectl_outcome_unknown_unlisted_calls"].add_metric(
        [], max(waiting.waiting - min(len(waiting.listed), LISTED_UNKNOWN), 0))
    calls: dict[tuple[str, str], int] = defaultdict(int)
    holders: dict[tuple[str, str, str, str], dict[str, float]] = {}
    unknown: dict[tuple[str, str], int] = {}
    services = {row.tool: _label(row.service) for row in scrape.live}
    for row in scrape.live:
        unknown.setdefault((row.tool, row.side_effect), 0)
        for state in STATES:
            calls.setdefault((row.tool, state), 0)
        if row.state is None:
            continue
        calls[(row.tool, row.state)] += row.calls
        if row.state == "outcome_unknown":
            unknown[(row.tool, row.side_effect)] += row.calls
        if row.state in ("running", "cancel_requested"):
            key = (row.tool, _label(row.model), _label(row.provider), services[row.tool])
            agg = holders.setdefault(key, {"expired": 0, "unheard": 0, "past_deadline": 0})
            agg["expired"] += row.expired_leases
            agg["unheard"] += row.cancel_unheard
            agg["past_deadline"] += row.past_deadline
            if row.oldest_heartbeat_age_seconds is not None:
                agg["oldest"] = max(agg.get("oldest", row.oldest_heartbeat_age_seconds),
                                    row.oldest_heartbeat_age_seconds)
            if row.min_lease_left_seconds is not None:
                agg["least"] = min(agg.get("least", row.min_lease_left_seconds), row.min_lease_left_seconds)
    for (tool, state), n in sorted(calls.items()):
        out["leasectl_calls"].add_metric([tool, state], n)
    for (tool, side_effect), n in sorted(unknown.items()):
        out["leasectl_outcome_unknown_calls"].add_metric([tool, side_effect], n)
    for labels, agg in sorted(holders.items()):
        if "oldest" in agg:
            out["leasectl_oldest_heartbeat_age_seconds"].add_metric(list(labels), agg["oldest"])
        if "least" in agg:
            out["leasectl_min_lease_left_seconds"].add_metric(list(labels), agg["least"])
        out["leasectl_expired_leases"].add_metric(list(labels), agg["expired"])
        out["leasectl_cancel_unheard_calls"].add_metric(list(labels), agg["unheard"])
        out["leasectl_past_deadline_calls"].add_metric(list(labels), agg["past_deadline"])
    return [*out.values(), *_history_families(scrape.totals, services)]


def _history_families(totals: list[TotalRow], services: dict[str, str]) -> list[Metric]:
    """The counters and histograms; each series labelled with its tool's service as it is now
    (a tool no longer registered: '')."""
    counters = {m: CounterMetricFamily(name, doc, labels=CALL_LABELS) for m, (name, doc) in COUNTERS.items()}
    timeouts = CounterMetricFamily("leasectl_db_timeouts", "Database errors met by workers and operator actions, "
                                   "by cause: lock_timeout (waiting for a row lock) apart from statement_timeout "
                                   "(a heavy statement).", labels=["cause"])
    histograms = {m: HistogramMetricFamily(name, doc, labels=CALL_LABELS) for m, (name, doc) in HISTOGRAMS.items()}
    counted: dict[tuple[str, str, str, str], int] = defaultdict(int)
    causes = dict.fromkeys(CAUSES, 0)
    observed: dict[tuple[str, str, str, str], dict[float, int]] = defaultdict(lambda: defaultdict(int))
    sums: dict[tuple[str, str, str, str], float] = defaultdict(float)
    bounds: list[float] = []
    for t in totals:
        key = (t.metric, t.tool, t.model, t.provider)
        if t.metric in COUNTERS:
            counted[key] += t.n
        elif t.metric in ("lock_timeouts", "statement_timeouts"):
            causes[t.metric.removesuffix("s")] += t.n
        elif t.metric in HISTOGRAMS:
            bounds = t.buckets
            observed[key][t.le] += t.n
            sums[key] += t.seconds
    for (metric, *labels), n in sorted(counted.items()):
        counters[metric].add_metric([*labels, services.get(labels[0], "")], n)
    for cause, n in causes.items():
        timeouts.add_metric([cause], n)
    for key, per_bucket in sorted(observed.items()):
        cumulative, buckets = 0, []
        for bound in [*bounds, float("inf")]:
            cumulative += per_bucket.get(bound, 0)
            buckets.append((_le(bound), cumulative))
        histograms[key[0]].add_metric([*key[1:], services.get(key[1], "")], buckets, sums[key])
    return [*counters.values(), timeouts, *histograms.values()]


def _le(bound: float) -> str:
    if bound == float("inf"):
        return "+Inf"
    return repr(float(bound))


def empty_families() -> list[Metric]:
    """The families without samples: what describe() answers (registration never queries)."""
    return [*(GaugeMetricFamily(name, doc, labels=labels) for name, (doc, labels) in GAUGES.items()),
            GaugeMetricFamily(*AGE),
            *(CounterMetricFamily(name, doc, labels=CALL_LABELS) for name, doc in COUNTERS.values()),
            CounterMetricFamily("leasectl_db_timeouts", "Database errors by cause.", labels=["cause"]),
            *(HistogramMetricFamily(name, doc, labels=CALL_LABELS) for name, doc in HISTOGRAMS.values())]


class LeasectlCollector:
    """Reads on scrape, at most once per `cache_seconds` (failures are cached too: a dead database
    is not hammered by a burst of scrapes). A scrape answered from cached values first calls
    `alive` (a round trip, no table read): if the database does not answer, that scrape says
    `leasectl_up 0` and nothing else, and that failure is what the cache holds from then on.
    Cached values carry their age (leasectl_data_age_seconds)."""

    def __init__(self, read: Callable[[], Scrape], *,
                 alive: Callable[[], object] | None = None,
                 cache_seconds: float = CACHE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._alive = alive
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._lock = threading.Lock()
        # when the answer was made, its families, and whether the database answered it
        self._cached: tuple[float, list[Metric], bool] | None = None
        self._highest: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.reads = 0
        self.last_error: str | None = None

    def describe(self) -> Iterator[Metric]:
        return iter(empty_families())

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # scrapes that arrive together wait for the one read in flight
            now = self._clock()
            if self._cached is None or now - self._cached[0] >= self.cache_seconds:
                self._cached = (now, *self._families())
            elif self._cached[2] and self._alive is not None:
                try:
                    self._alive()
                except Exception as exc:  # noqa: BLE001 - whatever failed, the database did not answer
                    self._cached = (now, self._down(exc), False)
            made, families, answered = self._cached
            if not answered:
                return iter(families)
            age = GaugeMetricFamily(*AGE)
            age.add_metric([], max(now - made, 0.0))
            return iter([*families, age])

    def _families(self) -> tuple[list[Metric], bool]:
        self.reads += 1
        try:
            answer = self._read()
        except Exception as exc:  # noqa: BLE001 - whatever failed (logged in _down): leasectl_up 0, never a 500
            return self._down(exc), False
        if self.last_error is not None:
            log.warning("database answers again")
        self.last_error = None
        families = families_of(answer)
        self._never_backwards(families)
        return families, True

    def _down(self, exc: Exception) -> list[Metric]:
        if not isinstance(exc, LeasectlError):
            log.error("the metrics read failed unexpectedly", exc_info=exc)
        elif self.last_error != str(exc):
            log.warning("database read failed, reporting leasectl_up 0: %s", sanitize(str(exc)))
        self.last_error = str(exc)
        up = GaugeMetricFamily("leasectl_up", GAUGES["leasectl_up"][0])
        up.add_metric([], 0)
        return [up]

    def _never_backwards(self, families: Iterable[Metric]) -> None:
        """A counter's sample (a total, a bucket, a sum, a count) is never less than one reported
        before by this exporter. From the database they only grow; this guards against a label set
        changing under a series (a call's row rewritten or removed before its events were folded)."""
        for family in families:
            if family.type not in ("counter", "histogram"):
                continue
            for i, sample in enumerate(family.samples):
                key = (sample.name, tuple(sorted(sample.labels.items())))
                before = self._highest.get(key)
                if before is not None and sample.value < before:
                    log.warning("%s%s went down from %s to %s: reporting %s", sample.name, dict(key[1]),
                                before, sample.value, before)
                    family.samples[i] = sample._replace(value=before)
                else:
                    self._highest[key] = sample.value
            if family.type == "histogram":
                _keep_cumulative(family)


def _keep_cumulative(family: Metric) -> None:
    """A clamped bucket can stand above the next one up (a bucket new since the last scrape has no
    past to hold it); a histogram's buckets never fall as `le` rises and its +Inf bucket is its
    _count. Raise each bucket to the one below it, and _count and +Inf to the higher of the two."""
    buckets: dict[tuple[tuple[str, str], ...], list[int]] = defaultdict(list)
    counts: dict[tuple[tuple[str, str], ...], int] = {}
    for i, sample in enumerate(family.samples):
        series = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        if sample.name.endswith("_bucket"):
            buckets[series].append(i)
        elif sample.name.endswith("_count"):
            counts[series] = i
    for series, positions in buckets.items():
        running = 0.0
        ordered = sorted(positions, key=lambda j: float(family.samples[j].labels["le"]))
        for i in ordered:
            running = max(running, family.samples[i].value)
            family.samples[i] = family.samples[i]._replace(value=running)
        if series in counts:
            count, inf = counts[series], ordered[-1]
            total = max(family.samples[count].value, running)
            family.samples[count] = family.samples[count]._replace(value=total)
            family.samples[inf] = family.samples[inf]._replace(value=total)


def make_registry(collector: LeasectlCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    return registry


# ----------------------------------------------------------------------------- the rollup, off the hot path


class Folder(threading.Thread):
    """Every `every` seconds, fold the history that is a minute old into the rollup (migration
    0008). A session that may not fold (read-only, the auditor) is told once; the counters stay
    right, a scrape only reads a longer tail."""

    def __init__(self, db: Lane, stop: threading.Event, *, every: float = FOLD_EVERY_SECONDS,
                 lag: float = FOLD_LAG_SECONDS) -> None:
        super().__init__(name="leasectl-fold", daemon=True)
        self.db = db
        self.stop_event = stop
        self.every = every
        self.lag = lag
        self.folds = 0

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.db.run(lambda conn: metrics.fold(conn, lag_seconds=self.lag))
                self.folds += 1
            except (ReadOnlySession, PermissionDenied) as exc:
                log.warning("this session may not fold the metric totals (%s); scrapes read the whole tail "
                            "of the history instead", sanitize(str(exc)))
                return
            except LeasectlError as exc:
                log.info("fold skipped: %s", sanitize(str(exc)))
            self.stop_event.wait(self.every)


# ----------------------------------------------------------------------------- HTTP


REQUEST_THREADS = 4  # requests answered at once; the collector reads one at a time anyway
REQUEST_TIMEOUT_SECONDS = 10.0  # for the rest of a request once its first bytes came
IDLE_SECONDS = 60.0  # a connection silent this long is closed


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_SECONDS  # StreamRequestHandler sets it on the socket: a stalled request ends

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def _parking_limit() -> int:
    """How many idle connections may wait: well under the process's file-descriptor limit, so that
    a flood of them never stops the exporter from accepting (or the database from connecting)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 256
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(16, min(1024, soft // 2))


class ParkingWSGIServer(WSGIServer):
    """The HTTP server of /metrics: an idle connection costs a file descriptor, not a thread.

    Why not prometheus_client's own server (ThreadingWSGIServer, what start_http_server uses): it
    starts a thread per accepted connection, and that thread blocks reading a request that may
    never come -- idle sockets from a load balancer's pool, a port scanner or a slowloris held one
    thread each (1,500 idle sockets: 1,502 threads). A bounded pool alone would not do either:
    its threads would all wait on idle sockets while a real scrape queued behind them.

    So one thread (serve_forever) accepts connections and parks them in a selector until bytes
    arrive; only then does one of REQUEST_THREADS threads read and answer the request, with
    wsgiref's handler and prometheus_client's WSGI app unchanged (content negotiation, gzip,
    name[] filters) and a read timeout, so a request that stalls halfway frees its thread. A
    connection silent for `idle_seconds` is closed, and when `max_parked` wait the oldest goes.
    Standard library only (selectors, concurrent.futures): no new dependency."""

    idle_seconds = IDLE_SECONDS
    # the listen backlog: socketserver's 5 makes a burst of connections wait on TCP's one-second
    # retransmission when this thread is slow to be scheduled
    request_queue_size = 128

    def __init__(self, server_address: Any, handler_class: Any, bind_and_activate: bool = True) -> None:
        # before the bind: a port in use makes socketserver call server_close() from __init__
        self.max_parked = _parking_limit()
        self._pool = ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="leasectl-exporter-request")
        self._parked: dict[socket.socket, tuple[Any, float]] = {}  # connection -> (client, parked since)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        super().__init__(server_address, handler_class, bind_and_activate)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        try:
            with selectors.DefaultSelector() as selector:
                self.socket.setblocking(False)  # a client gone before it is accepted must not block this thread
                selector.register(self.socket, selectors.EVENT_READ)
                while not self._stopping.is_set():
                    for key, _ in selector.select(min(poll_interval, self.idle_seconds)):
                        if key.fileobj is self.socket:
                            self._accept(selector)
                        else:
                            self._dispatch(selector, key.fileobj)  # type: ignore[arg-type]
                    self._close_idle(selector)
                for conn in list(self._parked):
                    self._unpark(selector, conn)
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        self._stopping.set()
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            conn, client = self.socket.accept()
        except BlockingIOError:
            return
        except OSError as exc:  # out of file descriptors, say: make room, and never spin on it
            log.warning("cannot accept a connection: %s", exc)
            if self._parked:
                self._unpark(selector, min(self._parked, key=lambda c: self._parked[c][1]))
            else:
                self._stopping.wait(0.1)
            return
        conn.setblocking(True)
        if len(self._parked) >= self.max_parked:
            self._unpark(selector, min(self._parked, key=lambda c: self._parked[c][1]))
        self._parked[conn] = (client, time.monotonic())
        selector.register(conn, selectors.EVENT_READ)

    def _dispatch(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        client, _ = self._parked.pop(conn)
        selector.unregister(conn)
        try:
            self._pool.submit(self._answer, conn, client)
        except RuntimeError:  # the pool is shut down: we are stopping
            self.shutdown_request(conn)

    def _answer(self, conn: socket.socket, client: Any) -> None:
        try:
            self.finish_request(conn, client)
        except Exception:  # a client that left or stalled: its problem, not a traceback
            log.debug("request from %s ended early", client, exc_info=True)
        finally:
            self.shutdown_request(conn)

    def _unpark(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        self._parked.pop(conn, None)
        try:
            selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        self.shutdown_request(conn)

    def _close_idle(self, selector: selectors.BaseSelector) -> None:
        oldest = time.monotonic() - self.idle_seconds
        for conn in [c for c, (_, since) in self._parked.items() if since <= oldest]:
            self._unpark(selector, conn)


def _app(registry: CollectorRegistry) -> Callable:
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"leasectl metrics exporter: see /metrics\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: leasectl serves /metrics\n"]

    return app


@dataclass
class Exporter:
    """The HTTP server, its collector and the folder, started together, stopped together."""

    server: ParkingWSGIServer
    collector: LeasectlCollector
    folder: Folder | None
    stop_event: threading.Event
    threads: list[threading.Thread]
    lanes: list[Lane]

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def stop(self) -> None:
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()
        for lane in self.lanes:
            lane.close()


def start(dsn: str, listen: str = DEFAULT_LISTEN, *, read_only: bool = False, cache_seconds: float = CACHE_SECONDS,
          fold_every: float | None = FOLD_EVERY_SECONDS, fold_lag: float = FOLD_LAG_SECONDS) -> Exporter:
    """Listen on HOST:PORT and serve /metrics; `fold_every=None` leaves the rollup alone."""
    host, port = parse_listen(listen)
    reads = exporter_lane(dsn, read_only=read_only)
    accept = AcceptWaitTotals()  # this exporter's fold of leasectl_accept_wait_seconds
    # reads: a connection killed while idle (a server restart) is made again and read once more
    # (Lane.read), so a database that answers is never reported down
    collector = LeasectlCollector(lambda: reads.read(lambda conn: metrics.scrape(conn, accept)),
                                  alive=lambda: reads.read(ping), cache_seconds=cache_seconds)
    registry = make_registry(collector)

    class Server(ParkingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    try:
        server = make_server(host, port, _app(registry), Server, handler_class=_QuietHandler)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        # the address given cannot be used: bad input (exit 2), like an address that does not parse
        raise BadInput(f"cannot listen on {sanitize(listen, max_chars=80)}: {reason}",
                       hint="another process may hold the port; choose another with --listen HOST:PORT") from None
    stop = threading.Event()
    serving = threading.Thread(target=server.serve_forever, name="leasectl-exporter", daemon=True)
    serving.start()
    lanes = [reads]
    folder = None
    if fold_every is not None:
        folds = exporter_lane(dsn, read_only=read_only, application_name="leasectl-exporter-fold")
        lanes.append(folds)
        folder = Folder(folds, stop, every=fold_every, lag=fold_lag)
        folder.start()
    return Exporter(server, collector, folder, stop, [serving, *([folder] if folder else [])], lanes)
