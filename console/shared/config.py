"""Where to connect and how the console's own session behaves."""

from __future__ import annotations

import getpass
import os
from typing import Literal

from pydantic import BaseModel, Field

APPLICATION_NAME = "leasectl"
# An operator's reason is journaled with every action: long enough for a ticket link and a sentence,
# short enough that a pasted log (a 120 KB one was tried) never lands in the journal.
MAX_REASON_CHARS = 1_000
MAX_OPERATOR_CHARS = 100
# `leasectl metrics serve`: where, and how long a scrape's answer is reused (console.operator.exporter)
METRICS_LISTEN = "127.0.0.1:9464"
METRICS_CACHE_SECONDS = 3.0


def resolve_dsn(explicit: str | None = None) -> str:
    """--dsn, then LEASECTL_DSN, then DATABASE_URL; else "" so libpq reads PG* and service files."""
    for candidate in (explicit, os.environ.get("LEASECTL_DSN"), os.environ.get("DATABASE_URL")):
        if candidate:
            return candidate
    return ""


def default_operator() -> str:
    for var in ("LEASECTL_OPERATOR", "USER", "LOGNAME"):
        if value := os.environ.get(var):
            return value
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return "operator"


class SessionLimits(BaseModel):
    """Timeouts and planning for one of our own sessions. The console must never hold a snapshot
    or a lock for long: one idle transaction can wreck a busy queue (brandur.org, "Postgres queues").

    plan_cache_mode: psycopg prepares a statement run five times on one connection, and from its
    sixth prepared run PostgreSQL may keep a generic plan, blind to the parameters. The console's
    statements are filters (`:x is null or ...`) and history rebuilds whose right plan depends on
    the values: a generic plan of audit/jobs_at.sql went from 4.6 s to past the 30 s timeout on
    its eleventh run. So every session plans with its values, except the workers', whose statements
    are fixed shapes on the hot path where the saved planning counts."""

    statement_timeout_ms: int = Field(default=5_000, ge=0)
    lock_timeout_ms: int = Field(default=2_000, ge=0)
    idle_in_transaction_ms: int = Field(default=10_000, ge=0)
    plan_cache_mode: Literal["auto", "force_custom_plan"] = "force_custom_plan"
    work_mem_mb: int | None = Field(default=None, ge=1)  # None: the server's own


CONSOLE_LIMITS = SessionLimits()
WORKER_LIMITS = SessionLimits(statement_timeout_ms=5_000, lock_timeout_ms=2_000,
                              idle_in_transaction_ms=30_000, plan_cache_mode="auto")
