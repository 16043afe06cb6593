"""Benchmark: the history partitioned by month (migration 0021, issue 29) against the same history
in one table (as before 0021), both in one server, measured in the same run.

    python -m tests.bench.history [--dsn DSN] [--events 10000000] [--rounds 5] [--seconds 20]
                                  [--slice 2] [--workers 4] [--runs 200]

Two databases in one server: one migrated with every migration but 0021 (job_events one table, as
it was, under the same newest statements: the claim of 0026 needs its function), one to
the newest (job_events partitioned by month: a partition a month, the default partition, two
months ahead). Both get the same history: `events` events (ten per finished call, one call every
25 s, so 10,000,000 events span ten months up to an hour ago), seeded side by side in exact mode
by the audit benchmark's queries/audit/bench_seed_calls.sql and bench_seed_events.sql (the rows
exactly as the triggers write them; on the partitioned database each month's partition is created
first, admin/create_event_partition.sql, so no row lands in job_events_default); then VACUUM
ANALYZE and a CHECKPOINT.

Then `rounds` rounds. In each, the reads on both databases back to back (the one that goes first
alternating from round to round: A B, B A, ...; a CHECKPOINT before each), then the writes on
both, alternated (after a CHECKPOINT):

  audit owner          who held a random call at a random instant of its life: the call's
                       history (views/job_history.sql, what `leasectl audit owner` reads) replayed
                       to the instant (console.core.ownership.owner_at); `runs` calls a round, the
                       same calls and instants on both databases, new ones each round. On the
                       partitioned database also as the CLI asks it since 0021
                       (console.db.audit.owner_answer: in one snapshot, where the online history
                       begins, from the archive register, then the history), of as many other calls
  audit actions        the operator journal as `leasectl audit actions` asks it
                       (console.db.audit.operator_actions, newest 100): no filter, --operator X,
                       --since T, and both; X one of the operators who acted (the seed names 40,
                       of whom 6 act: a quiet one's journal is empty, nothing to measure), T a
                       random instant of the history; `runs` of each a round, the same on both
  write path           `workers` threads, each with a connection to each database: enqueue a
                       call, claim one, complete it (queries/worker/enqueue.sql, claim.sql,
                       complete.sql through console.worker.statements, as the reference worker
                       sends them: three commits and three journal rows a call, the rows written
                       by trigger into job_events, on 0021 into the current month's partition),
                       `seconds` on each database, in slices of `slice` seconds alternated
                       between the two (A B A B ...: a change in the machine's pace, a shared
                       disk's fsync above all, falls on both alike); calls completed per second

The audit connections run under the CLI's limits (AUDIT_LIMITS) and, like the one-shot CLI, never
prepare a statement: every query is planned as `leasectl audit` plans it (planning over the
partitions included). Medians, p95, the count over 10 ms and the slowest are over every round.
The write figure is the median of the rounds' calls/s; the ratio partitioned / one table the
median of the rounds' ratios (each round's slices interleaved), with the lowest round's. Memory
stays bounded whatever `events`: the history is written by the server from generate_series, 10,000
calls a statement, and the benchmark holds only its sample of calls.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from console.core.audit import AUDIT_LIMITS
from console.core.ownership import OwnerAt, owner_at
from console.db import audit as audit_db
from console.db import reads as reads_db
from console.db.connect import Conn, connect, run
from console.shared.times import Instant
from console.worker import statements
from tests.bench.audit import BENCH_TOOL, EVENTS_PER_CALL, UNLIMITED, verdict
from tests.bench.common import BenchServer, bench_server, percentile, print_header
from tests.bench.protocol import NOOP_TOOL
from tests.db.history import BATCH, seed_calls

SPACING = timedelta(seconds=25)  # bench_seed_events.sql: call g starts at base + 25 s x g
LAST_EVENT = timedelta(seconds=100)  # ... and its last event is 100 s later
UNPARTITIONED, PARTITIONED = "unpartitioned", "partitioned"
ACTIONS = ("actions", "actions --operator", "actions --since", "actions --operator --since")
OPERATOR_KINDS = ("operator_cancel", "operator_mark_terminal", "operator_approve_retry", "operator_action_failed")


@dataclass
class Side:
    """One of the two databases and what was measured on it."""

    label: str
    version: int
    dsn: str
    seed_seconds: float = 0.0
    owner_ms: list[float] = field(default_factory=list)
    checked_ms: list[float] = field(default_factory=list)
    held: int = 0
    actions_ms: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in ACTIONS})
    rows: dict[str, list[int]] = field(default_factory=lambda: {name: [] for name in ACTIONS})
    rates: list[float] = field(default_factory=list)
    journal_per_call: list[float] = field(default_factory=list)


def _load() -> str:
    return "load average " + " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _note(text: str) -> None:
    """Progress, on stderr: stdout is the report, to paste as it is."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def months_between(first: datetime, last: datetime) -> list[date]:
    """The first day of each month (UTC) from the one of `first` to the one of `last`."""
    month, end = date(first.year, first.month, 1), date(last.year, last.month, 1)
    out = []
    while month <= end:
        out.append(month)
        month = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    return out


# ---------------------------------------------------------------------------------------- seeding


def seed(side: Side, calls: int, base: datetime, months: list[date]) -> None:
    """The audit benchmark's history of `calls` calls from `base`, in exact mode; on the partitioned
    database each month's partition first. Then VACUUM ANALYZE."""
    t0 = time.perf_counter()
    with connect(side.dsn, limits=UNLIMITED) as conn:
        run(conn, "admin/register_tool", **BENCH_TOOL)
        run(conn, "admin/register_tool", **NOOP_TOOL)
        every = max(1, calls // BATCH // 10) * BATCH

        def progress(done: int) -> None:
            if done % every == 0 or done == calls:
                _note(f"{side.label}: {done * EVENTS_PER_CALL:,} events seeded ({time.perf_counter() - t0:.0f} s)")

        seed_calls(conn, calls, base, months=months if side.version >= 21 else (), on_batch=progress)
        _note(f"{side.label}: VACUUM ANALYZE")
        run(conn, "meta/bench_vacuum")
    side.seed_seconds = time.perf_counter() - t0


def facts(side: Side) -> dict[str, Any]:
    """What the database holds: events, the default partition's rows, sizes, partitions."""
    with connect(side.dsn, limits=UNLIMITED) as conn:
        row = conn.execute(
            "select (select count(*) from job_events) as events,"
            " pg_database_size(current_database()) as database,"
            " (select coalesce(sum(pg_total_relation_size(c.oid)), 0) from pg_class c"
            "   where c.oid = 'job_events'::regclass"
            "      or c.oid in (select t.relid from pg_partition_tree('job_events') t)) as history,"
            " (select count(*) from pg_partition_tree('job_events') t where t.isleaf and t.level > 0) as partitions,"
            " to_regclass('job_events_default') is not null as has_default").fetchone()
        assert row is not None
        out = dict(row)
        out["in_default"] = (conn.execute("select count(*) as n from job_events_default").fetchone() or {"n": 0})["n"] \
            if out["has_default"] else None
    return out


# ---------------------------------------------------------------------------------------- the reads


def reads(side: Side, questions: list[tuple[uuid.UUID, datetime]], others: list[tuple[uuid.UUID, datetime]],
          actions: list[tuple[str, datetime]], warm: list[tuple[uuid.UUID, datetime]]) -> None:
    """`audit owner` of each question, then each variant of `audit actions` for each (operator,
    since), on one connection under the CLI's limits, nothing prepared. The owner is asked as
    both schemas can answer it: the call's history (views/job_history.sql) replayed to the instant
    (console.core.ownership.owner_at); on the partitioned database also as `leasectl audit owner`
    asks it since 0021 (console.db.audit.owner_answer: in one snapshot, where the online history
    begins, then the history), of `others` (other calls: a call just read would be read again from
    the cache)."""
    with connect(side.dsn, limits=AUDIT_LIMITS) as conn:
        conn.prepare_threshold = None  # the CLI's one-shot session: planned every time

        def owner(job_id: uuid.UUID, at: datetime) -> OwnerAt:
            return owner_at(job_id, reads_db.history(conn, job_id), Instant(at, "UTC", at.isoformat()))

        def checked(job_id: uuid.UUID, at: datetime) -> OwnerAt:
            return audit_db.owner_answer(conn, job_id, Instant(at, "UTC", at.isoformat()))[0]

        def journal(variant: str, op: str, since: datetime) -> list[Any]:
            return audit_db.operator_actions(conn, operator=op if "--operator" in variant else None,
                                             since=since if "--since" in variant else None, limit=100)

        archive = side.version >= 21
        for job_id, at in warm:
            owner(job_id, at)
            if archive:
                checked(job_id, at)
            for variant in ACTIONS:
                journal(variant, "op-0", at)
        for job_id, at in questions:
            t0 = time.perf_counter()
            answer = owner(job_id, at)
            side.owner_ms.append((time.perf_counter() - t0) * 1000)
            side.held += answer.owner_id is not None
        if archive:
            for job_id, at in others:
                t0 = time.perf_counter()
                checked(job_id, at)
                side.checked_ms.append((time.perf_counter() - t0) * 1000)
        for variant in ACTIONS:
            for op, since in actions:
                t0 = time.perf_counter()
                rows = journal(variant, op, since)
                side.actions_ms[variant].append((time.perf_counter() - t0) * 1000)
                side.rows[variant].append(len(rows))


# ---------------------------------------------------------------------------------------- the writes


def writes(server: BenchServer, sides: list[Side], workers: int, seconds: float, slice_seconds: float,
           tag: str) -> None:
    """`workers` threads, each with a connection to both databases, enqueue, claim and complete
    calls for `seconds` on each database, in slices of `slice_seconds` alternated between the two
    (A B A B ...): a change of the machine's pace (a shared disk's fsync) falls on both alike.
    Every thread works on the same database at a time; a slice ends when every thread has finished
    the call it was on. After a CHECKPOINT."""
    slices = max(1, round(seconds / slice_seconds))
    plan = [i % 2 for i in range(2 * slices)]  # indexes into sides
    gate = threading.Barrier(workers + 1)
    deadline = [0.0]
    target = [0]
    done = [[0, 0] for _ in range(workers)]
    failures: list[BaseException] = []

    def worker(index: int) -> None:
        worker_id = f"bench-{index}"
        try:
            with connect(sides[0].dsn) as first, connect(sides[1].dsn) as second:
                conns = (first, second)
                n = 0
                for _ in plan:
                    gate.wait()  # the slice begins
                    which = target[0]
                    conn = conns[which]
                    while time.perf_counter() < deadline[0]:
                        n += 1
                        statements.first(conn, "worker/enqueue", tool=NOOP_TOOL["name"],
                                         idempotency_key=f"history-{tag}-{index}-{n}", payload=Jsonb({"n": n}),
                                         agent_id=None, session_id=None, deadline_at=None, model=None,
                                         provider=None)
                        claimed = statements.first(conn, "worker/claim", worker_id=worker_id, tools=None)
                        if claimed is None or claimed["id"] is None:
                            continue  # another thread took the call this one enqueued, and the rest
                        completed = statements.first(conn, "worker/complete", job_id=claimed["id"],
                                                     worker_id=worker_id, fencing_token=claimed["fencing_token"],
                                                     result=Jsonb({"ok": True}))
                        assert completed is not None, "a completion was rejected"
                        done[index][which] += 1
                    gate.wait()  # the slice ends
        except BaseException as exc:
            failures.append(exc)
            gate.abort()
            raise

    with connect(sides[0].dsn, limits=UNLIMITED) as a, connect(sides[1].dsn, limits=UNLIMITED) as b:
        first_ids = (last_id(a), last_id(b))
        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
        for t in threads:
            t.start()
        elapsed = [0.0, 0.0]
        server.checkpoint()
        try:
            for which in plan:
                target[0] = which
                deadline[0] = time.perf_counter() + seconds / slices
                t0 = time.perf_counter()
                gate.wait(timeout=120)
                gate.wait(timeout=120)
                elapsed[which] += time.perf_counter() - t0
        except threading.BrokenBarrierError:
            gate.abort()
            broken = True
        else:
            broken = False
        for t in threads:
            t.join(timeout=120)
        if failures:
            raise RuntimeError(f"a writer failed: {failures[0]!r}") from failures[0]
        if broken:
            raise RuntimeError("the writers did not finish a slice within 120 s")
        for which, (side, conn) in enumerate(zip(sides, (a, b), strict=True)):
            calls = sum(d[which] for d in done)
            side.rates.append(calls / elapsed[which])
            side.journal_per_call.append((last_id(conn) - first_ids[which]) / max(calls, 1))


def last_id(conn: Conn) -> int:
    row = conn.execute("select coalesce(max(id), 0) as id from job_events").fetchone()
    assert row is not None
    return int(row["id"])


# ---------------------------------------------------------------------------------------- report


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values):5.2f} ms, p95 {percentile(values, 95):5.2f} ms"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def size(n: int) -> str:
    return f"{n / 2**30:.2f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="measure on this server (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--events", type=int, default=10_000_000,
                        help="events in the history of each database, ten per call (default 10,000,000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each measuring both databases (default 5)")
    parser.add_argument("--seconds", type=float, default=20, help="the write path's time a round, each (default 20)")
    parser.add_argument("--slice", type=float, default=2,
                        help="the write path alternates between the databases every this many seconds (default 2)")
    parser.add_argument("--workers", type=int, default=4, help="writer threads (default 4)")
    parser.add_argument("--runs", type=int, default=200, help="queries of each kind a round, each (default 200)")
    args = parser.parse_args(argv)
    if args.events < EVENTS_PER_CALL or args.rounds < 1 or args.runs < 1 or args.workers < 1:
        parser.error("--events >= 10, --rounds, --runs and --workers >= 1")
    calls = args.events // EVENTS_PER_CALL
    rng = random.Random(29)
    wall0 = time.perf_counter()
    with bench_server(args.dsn) as server:
        print_header("leasectl history benchmark: job_events partitioned by month (0021) against one table (0020)",
                     server)
        print(f"  load:     {_load()} at start")
        sides = [Side(UNPARTITIONED, 20, server.leasectl_database(without=21)),
                 Side(PARTITIONED, 21, server.leasectl_database())]
        try:
            with connect(sides[0].dsn) as conn:
                row = conn.execute("select date_trunc('second', now() - %s * interval '25 seconds' - interval '1 hour')"
                                   " as base", (calls,)).fetchone()
            assert row is not None
            base: datetime = row["base"]
            first_at, last_at = base + SPACING, base + SPACING * calls + LAST_EVENT
            months = months_between(first_at, last_at)
            _note(f"seeding {calls * EVENTS_PER_CALL:,} events into each database, side by side")
            with ThreadPoolExecutor(2) as pool:
                for future in [pool.submit(seed, side, calls, base, months) for side in sides]:
                    future.result()
            server.checkpoint()
            held = [facts(side) for side in sides]
            assert held[0]["events"] == held[1]["events"] == calls * EVENTS_PER_CALL, held
            assert held[1]["in_default"] == 0, f"{held[1]['in_default']} seeded rows in job_events_default"
            plain, parted = held
            operators, operator_rows = _operators(sides[0].dsn)
            print(f"  data:     {calls * EVENTS_PER_CALL:,} events of {calls:,} finished calls in each database, "
                  f"{first_at:%Y-%m-%d} to {last_at:%Y-%m-%d} ({plural(len(months), 'month')}), seeded side by side in "
                  f"{max(s.seed_seconds for s in sides):.0f} s by insert ... select generate_series in exact mode "
                  "(rows as the triggers write them); VACUUM ANALYZE, CHECKPOINT")
            print(f"  0020:     job_events one table: {size(plain['history'])} with its indexes "
                  f"(database {size(plain['database'])})")
            print(f"  0021:     job_events in {parted['partitions']} partitions ({plural(len(months), 'month')} of history, "
                  f"the months ahead, the default): {size(parted['history'])} with their indexes "
                  f"(database {size(parted['database'])}); {parted['in_default']} rows in job_events_default")
            print(f"  rounds:   {args.rounds}; in each the reads on both databases back to back, the first alternating "
                  "(A B, B A, ...), then the writes on both, alternated; a CHECKPOINT before each database's reads "
                  "and before the writes; medians and p95 over every round")
            print(f"  reads:    {args.runs} of each a round: audit owner of random calls at random instants of their "
                  f"lives (the same on both), audit actions (newest 100) for random operators among the {len(operators)} who "
                  f"acted ({operator_rows:,} actions or more each) and random --since; "
                  "the CLI's limits, nothing prepared (planned as the CLI plans); 'with the archive check': on 0021, "
                  "audit owner as the CLI asks it since 0021 (owner_answer: one snapshot, the archive register, the "
                  "history) of as many other calls")
            print(f"  writes:   {args.workers} threads, {args.seconds:g} s a round on each database in slices of "
                  f"{args.slice:g} s alternated between the two (A B A B ...), a connection to each per thread: "
                  "worker/enqueue.sql, claim.sql, complete.sql (3 commits, 3 journal rows a call, the current month's "
                  "partition); a round's calls/s on a database: its calls over its slices' time; the figure: the median "
                  "of the rounds; the ratio: the median of the rounds' ratios (each round's slices interleaved), "
                  "and the lowest")
            print()

            wanted = 2 * args.runs * args.rounds + 10
            drawn = _sample(sides[0].dsn, wanted)
            rng.shuffle(drawn)
            sample = [drawn[i % len(drawn)] for i in range(wanted)]
            warm = [(job_id, _instant(rng, created, finished)) for job_id, created, finished in sample[:10]]
            span = (last_at - first_at).total_seconds()
            for r in range(args.rounds):
                chunk = sample[10 + 2 * r * args.runs:10 + 2 * (r + 1) * args.runs]
                asked = [(job_id, _instant(rng, created, finished)) for job_id, created, finished in chunk]
                questions, others = asked[:args.runs], asked[args.runs:]
                actions = [(rng.choice(operators), first_at + timedelta(seconds=rng.random() * span))
                           for _ in range(args.runs)]
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    _note(f"round {r + 1}/{args.rounds}: reads, {side.label}")
                    server.checkpoint()
                    reads(side, questions, others, actions, warm)
                _note(f"round {r + 1}/{args.rounds}: writes, alternated every {args.slice:g} s")
                writes(server, sides if r % 2 == 0 else sides[::-1], args.workers, args.seconds, args.slice, f"{r}")
            after = facts(sides[1])

            a, b = sides
            paired = [y / x for x, y in zip(a.rates, b.rates, strict=True)]
            ratio, lowest = statistics.median(paired), min(paired)
            width = 32
            print(f"{'':{width}}  {'unpartitioned (0020)':<33}  {'partitioned (0021)':<33}  partitioned / one table")
            print(f"{'write path (calls/s)':<{width}}  {statistics.median(a.rates):<33,.0f}  "
                  f"{statistics.median(b.rates):<33,.0f}  {ratio:.2f} (lowest round {lowest:.2f})   aim >= 0.95: "
                  f"{verdict(ratio >= 0.95)}")
            print(f"{'  each round':<{width}}  {' '.join(f'{x:,.0f}' for x in a.rates):<33}  "
                  f"{' '.join(f'{x:,.0f}' for x in b.rates):<33}  {' '.join(f'{x:.2f}' for x in paired)}; journal "
                  "rows a call: "
                  f"{statistics.median(a.journal_per_call):.2f} / {statistics.median(b.journal_per_call):.2f}")
            print(f"{'audit owner':<{width}}  {ms(a.owner_ms):<33}  {ms(b.owner_ms):<33}  "
                  f"{statistics.median(b.owner_ms) / statistics.median(a.owner_ms):.2f}   aim <= 10 ms: "
                  f"{verdict(statistics.median(b.owner_ms) <= 10)}")
            print(f"{'  with the archive check':<{width}}  {'(no archive before 0021)':<33}  {ms(b.checked_ms):<33}  "
                  f"{statistics.median(b.checked_ms) / statistics.median(a.owner_ms):.2f}   aim <= 10 ms: "
                  f"{verdict(statistics.median(b.checked_ms) <= 10)}")
            for variant in ACTIONS:
                x, y = a.actions_ms[variant], b.actions_ms[variant]
                print(f"{'audit ' + variant:<{width}}  {ms(x):<33}  {ms(y):<33}  "
                      f"{statistics.median(y) / statistics.median(x):.2f}   aim <= 10 ms: "
                      f"{verdict(statistics.median(y) <= 10)}")
            print(f"{'database size':<{width}}  {size(plain['database']):<33}  {size(parted['database']):<33}  "
                  f"{parted['database'] / plain['database']:.2f}")
            print(f"{'job_events with indexes':<{width}}  {size(plain['history']):<33}  {size(parted['history']):<33}  "
                  f"{parted['history'] / plain['history']:.2f}")
            print()
            answers = len(a.owner_ms)
            print(f"  audit owner: {a.held} / {b.held} of {answers} answers held a lease (the same on both: "
                  f"{'yes' if a.held == b.held else 'NO'}); audit actions rows (min-max): "
                  + ", ".join(f"{v.removeprefix('actions ') if ' ' in v else 'no filter'}: {min(a.rows[v])}-{max(a.rows[v])} / "
                              f"{min(b.rows[v])}-{max(b.rows[v])}" for v in ACTIONS))
            over = [("owner", a.owner_ms, b.owner_ms), ("owner checked", [], b.checked_ms),
                    *((v.replace("actions ", "") if " " in v else "actions", a.actions_ms[v], b.actions_ms[v])
                      for v in ACTIONS)]
            print(f"  over 10 ms, of {len(b.owner_ms)} (one table / partitioned): "
                  + ", ".join(f"{name} {_over(x, 10)} / {_over(y, 10)}" for name, x, y in over))
            print("  slowest (one table / partitioned): "
                  + ", ".join(f"{name} {max(x):.1f} / {max(y):.1f} ms" if x else f"{name} - / {max(y):.1f} ms"
                              for name, x, y in over))
            print(f"  after the writes: {after['in_default']} rows in job_events_default; {_load()} at the end; "
                  f"the whole run {time.perf_counter() - wall0:.0f} s")
            same = all(a.rows[v] == b.rows[v] for v in ACTIONS)
            assert a.held == b.held and same, "the two databases answered differently"
        finally:
            for side in sides:
                server.drop_database(side.dsn)
    return 0


def _sample(dsn: str, count: int) -> list[tuple[uuid.UUID, datetime, datetime]]:
    with connect(dsn, limits=UNLIMITED) as conn:
        return [(r["id"], r["created_at"], r["finished_at"]) for r in run(conn, "audit/bench_sample", count=count)]


def _operators(dsn: str) -> tuple[list[str], int]:
    """The operators who acted in the seeded history (bench_seed_events.sql names 40, of whom 6
    act: a quiet one's journal is empty and costs nothing to read), and their actions each."""
    with connect(dsn, limits=UNLIMITED) as conn:
        rows = conn.execute("select actor, count(*) as n from job_events where kind = any(%s) group by actor"
                            " order by actor", (list(OPERATOR_KINDS),)).fetchall()
    return [r["actor"] for r in rows], (min(r["n"] for r in rows) if rows else 0)


def _over(values: list[float], limit: float) -> str:
    return "-" if not values else str(sum(v > limit for v in values))


def _instant(rng: random.Random, created: datetime, finished: datetime) -> datetime:
    return created + (finished - created) * rng.random()


if __name__ == "__main__":
    sys.exit(main())
