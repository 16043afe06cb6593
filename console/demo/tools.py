"""The demo's tools, with lease sizing that respects L > R x H + J (docs/seeds.md §000.8), the
external service each calls (a metrics grouping) and the time a call needs left before its deadline
to be worth starting (at least H + J: docs/seeds.md §004.5)."""

from __future__ import annotations

from typing import Any

from console.db.connect import Conn, run_one

MISSED_HEARTBEATS = 2  # R, the same for every demo tool

# name: (side effect, L, H, J, max attempts, stage timeout in seconds, service, description)
_TOOLS: dict[str, tuple[str, float, float, float, int, float, str, str]] = {
    "web_search": ("read_only", 20, 4, 4, 3, 60, "search-api", "search the web: seconds, safe to repeat"),
    "browser_session": ("read_only", 45, 6, 9, 2, 40, "browser-grid",
                        "drive a browser: long, heartbeats while it works"),
    "erp_update_order": ("mutating_verifiable", 30, 5, 6, 3, 120, "erp",
                         "change an order in the ERP; its status can be checked afterwards"),
    "payment_capture": ("mutating_unverifiable", 30, 5, 6, 1, 60, "psp",
                        "capture a payment; the provider offers no way to check"),
    "report_export": ("mutating_verifiable", 60, 10, 10, 3, 300, "warehouse",
                      "long export, split into persisted stages with their own keys"),
}


def _registration(name: str, side_effect: str, lease: float, heartbeat: float, jitter: float, max_attempts: int,
                  stage_timeout: float, service: str, description: str) -> dict[str, Any]:
    """What admin/register_tool takes for one tool: a call is started only with H + J left before its
    deadline (one heartbeat, late by the most jitter, must still fit)."""
    return dict(name=name, side_effect=side_effect, lease_seconds=lease, heartbeat_seconds=heartbeat,
                missed_heartbeats=MISSED_HEARTBEATS, jitter_seconds=jitter, max_attempts=max_attempts,
                stage_timeout_seconds=stage_timeout, description=description, service=service,
                min_time_left_seconds=heartbeat + jitter)


DEMO_TOOLS: list[dict[str, Any]] = [_registration(name, *sizing) for name, sizing in _TOOLS.items()]


def register_demo_tools(conn: Conn) -> None:
    for tool in DEMO_TOOLS:
        run_one(conn, "admin/register_tool", **tool)
