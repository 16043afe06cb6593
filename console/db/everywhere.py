"""The all-contexts Triage: every context of contexts.toml polled at once, each with its own time
to answer (`leasectl triage --all-contexts`, the console's `9 All contexts`).

* One thread per context, each with its own connection: connect_timeout and statement_timeout
  are the context's time, so a context that hangs stops by itself; and whatever a context does,
  the answer is given once that time is up: a context that has not answered by then is named as
  down ("no answer within 5 s"), and its thread, a daemon, is left to finish on its own (its late
  answer is dropped, its connection closed).
* Reads go to the context's `read_dsn` (its replica) when it has one, else to its `dsn`; every
  answer says which. The session is read-only in the database (the auditor role where the login
  may): this only reads.
* The schema is checked first: a context whose schema this leasectl does not know is down, with
  what to run, not read with statements that do not fit it.

The rules of the answer (partial, all-clear) are console.core.everywhere's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import psycopg

from console.core.everywhere import AllTriage, ContextTriage, ReadFrom, unanswered
from console.db import reads
from console.db.connect import Conn, run, translate_error
from console.db.fanout import ask_all
from console.db.lane import open_session
from console.shared.config import SessionLimits
from console.shared.contexts import Context
from console.shared.dsn import mask_secrets
from console.shared.errors import LeasectlError
from console.shared.text import format_seconds, sanitize

DEFAULT_TIMEOUT_SECONDS = 5.0
APPLICATION_NAME = "leasectl-triage-all"  # what pg_stat_activity shows of these sessions

# how one context is asked: given the context and its time to answer, its answer (it never raises)
Poll = Callable[[Context, float], ContextTriage]


def read_from(context: Context) -> ReadFrom:
    return "replica" if context.read_dsn else "primary"


def no_answer_within(timeout: float) -> str:
    return f"no answer within {format_seconds(timeout)}"


def triage_context(context: Context, timeout: float, *, clock: str | None = None) -> ContextTriage:
    """One context's Triage, read from its replica if it has one, within `timeout` seconds as far as
    the server and libpq can be told (connect_timeout, statement_timeout); down with the reason on
    any failure."""
    dsn = context.read_dsn or context.dsn
    where = read_from(context)
    budget_ms = max(int(timeout * 1000), 1)
    limits = SessionLimits(statement_timeout_ms=budget_ms, lock_timeout_ms=budget_ms,
                           idle_in_transaction_ms=max(budget_ms * 2, 1_000))

    def setup(conn: Conn) -> None:
        if clock is not None:  # the pictures pin the display clock, as the console's own reads do
            run(conn, "meta/display_clock", clock=clock)

    try:
        conn = open_session(dsn, limits=limits, read_only=True, application_name=APPLICATION_NAME, setup=setup,
                            check_schema=True, connect_timeout=max(math.ceil(timeout), 1))
        try:
            snapshot = reads.triage(conn)
        finally:
            conn.close()
    except LeasectlError as exc:
        reason = str(exc)
    except psycopg.Error as exc:  # BEGIN or COMMIT of the snapshot: the driver's own words, translated
        reason = str(translate_error(exc, "the triage"))
    except Exception as exc:  # noqa: BLE001 - any failure leaves this context unknown: down, never an all-clear
        reason = f"{type(exc).__name__}: {exc}"
    else:
        return ContextTriage(name=context.name, up=True, read_from=where, production=context.production,
                             counts=snapshot.counts, rows=snapshot.rows)
    said = sanitize(mask_secrets(reason, dsn), max_chars=400)
    return unanswered(context.name, said, read_from=where, production=context.production)


def triage_everywhere(contexts: Iterable[Context], *, timeout: float = DEFAULT_TIMEOUT_SECONDS,
                      clock: str | None = None, poll: Poll | None = None) -> AllTriage:
    """Every context's Triage, asked at once; back within `timeout` seconds (and a few
    milliseconds), whatever the contexts do. `poll` replaces how one context is asked (tests)."""
    chosen = {context.name: context for context in contexts}
    ask: Poll = poll or (lambda context, seconds: triage_context(context, seconds, clock=clock))

    def unanswered_one(name: str, context: Context, error: BaseException | None) -> ContextTriage:
        why = no_answer_within(timeout) if error is None else sanitize(f"{type(error).__name__}: {error}",
                                                                      max_chars=400)
        return unanswered(name, why, read_from=read_from(context), production=context.production)

    final = ask_all(chosen, lambda _name, context: ask(context, timeout), timeout, unanswered_one)
    return AllTriage(contexts=[final[name] for name in chosen], timeout_seconds=timeout)
