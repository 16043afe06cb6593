"""The demo's tools, with lease sizing that respects L > R x H + J (docs/seeds.md §000.8), the
external service each calls (a metrics grouping) and the time a call needs left before its deadline
to be worth starting (at least H + J: docs/seeds.md §004.5)."""

from __future__ import annotations

from typing import Any

from console.db.connect import Conn, run_one

DEMO_TOOLS: list[dict[str, Any]] = [
    dict(name="web_search", side_effect="read_only", lease_seconds=20, heartbeat_seconds=4, missed_heartbeats=2,
         jitter_seconds=4, max_attempts=3, stage_timeout_seconds=60,
         description="search the web: seconds, safe to repeat", service="search-api", min_time_left_seconds=8),
    dict(name="browser_session", side_effect="read_only", lease_seconds=45, heartbeat_seconds=6,
         missed_heartbeats=2, jitter_seconds=9, max_attempts=2, stage_timeout_seconds=40,
         description="drive a browser: long, heartbeats while it works", service="browser-grid",
         min_time_left_seconds=15),
    dict(name="erp_update_order", side_effect="mutating_verifiable", lease_seconds=30, heartbeat_seconds=5,
         missed_heartbeats=2, jitter_seconds=6, max_attempts=3, stage_timeout_seconds=120,
         description="change an order in the ERP; its status can be checked afterwards", service="erp",
         min_time_left_seconds=11),
    dict(name="payment_capture", side_effect="mutating_unverifiable", lease_seconds=30, heartbeat_seconds=5,
         missed_heartbeats=2, jitter_seconds=6, max_attempts=1, stage_timeout_seconds=60,
         description="capture a payment; the provider offers no way to check", service="psp",
         min_time_left_seconds=11),
    dict(name="report_export", side_effect="mutating_verifiable", lease_seconds=60, heartbeat_seconds=10,
         missed_heartbeats=2, jitter_seconds=10, max_attempts=3, stage_timeout_seconds=300,
         description="long export, split into persisted stages with their own keys", service="warehouse",
         min_time_left_seconds=20),
]


def register_demo_tools(conn: Conn) -> None:
    for tool in DEMO_TOOLS:
        run_one(conn, "admin/register_tool", **tool)
