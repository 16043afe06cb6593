"""Pure rules for showing calls: labels, urgency colours, ages, untrusted text, id prefixes.

No I/O, no Textual: the console and the CLI both use these.
"""

from __future__ import annotations

import re
import uuid
from typing import Literal

from console.shared.errors import BadInput
from console.shared.text import sanitize

Urgency = Literal["ok", "watch", "warn", "bad", "none"]

HEALTH_LABELS = {
    "healthy": "healthy",
    "heartbeat_late": "heartbeat late",
    "lease_expired": "lease expired",
    "cancel_unheard": "cancel unheard",
    "outcome_unknown": "outcome unknown",
    "zombie": "zombie",
    "over_stage_timeout": "over stage timeout",
}

# what each label means, for help and the detail screen
HEALTH_MEANING = {
    "healthy": "the owner renews its lease on time",
    "heartbeat_late": "a heartbeat is overdue (more than H + J), the lease is not gone yet",
    "lease_expired": "the lease ran out and nobody has reclaimed or swept the call yet",
    "cancel_unheard": "a cancel was requested more than 2H + J ago and the worker has not confirmed it",
    "outcome_unknown": "a side effect started and the answer was lost: a human decides",
    "zombie": "a write with a stale fencing token was rejected in the last 5 minutes",
    "over_stage_timeout": "it heartbeats, but has run longer than its tool's stage timeout",
}

# worst first, as leasectl_health_rank() in migrations/0001 sorts triage (a test keeps them equal)
HEALTH_RANK = {"outcome_unknown": 0, "lease_expired": 1, "cancel_unheard": 2, "zombie": 3, "heartbeat_late": 4,
               "over_stage_timeout": 5, "healthy": 9}

HEALTH_URGENCY: dict[str, Urgency] = {
    "healthy": "ok",
    "over_stage_timeout": "watch",
    "heartbeat_late": "warn",
    "zombie": "warn",
    "cancel_unheard": "warn",
    "lease_expired": "bad",
    "outcome_unknown": "bad",
}

STATE_URGENCY: dict[str, Urgency] = {
    "queued": "none", "running": "ok", "cancel_requested": "warn", "succeeded": "ok",
    "failed": "bad", "cancelled": "none", "outcome_unknown": "bad",
}


def health_label(health: str) -> str:
    return HEALTH_LABELS.get(health, health)


def heartbeat_urgency(age: float | None, heartbeat_seconds: float | None, jitter: float | None) -> Urgency:
    """Green while beats arrive on time, amber once one is late, red when R would be missed."""
    if age is None or heartbeat_seconds is None:
        return "none"
    allowance = heartbeat_seconds + (jitter or 0)
    if age <= allowance:
        return "ok"
    if age <= 2 * allowance:
        return "warn"
    return "bad"


def lease_urgency(left: float | None, heartbeat_seconds: float | None) -> Urgency:
    """Red once expired, amber when less than one heartbeat interval remains."""
    if left is None:
        return "none"
    if left < 0:
        return "bad"
    if heartbeat_seconds is not None and left < heartbeat_seconds:
        return "warn"
    return "ok"


def deadline_urgency(left: float | None) -> Urgency:
    if left is None:
        return "none"
    if left < 0:
        return "bad"
    if left < 60:
        return "warn"
    return "ok"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 agent', '3 agents', '1,000 calls': at 02:00 nobody should have to parse 'agent(s)'. The
    one way every count in words is said, in the console and the CLI alike."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def format_seconds(seconds: float | None, *, signed: bool = False) -> str:
    """Compact ages for tables: 4s, 2m05s, 3h12m, 2d4h; negative as '-4s' (or 'expired 4s ago')."""
    if seconds is None:
        return "—"
    negative = seconds < 0
    s = int(abs(seconds))
    if s < 60:
        text = f"{s}s"
    elif s < 3600:
        text = f"{s // 60}m{s % 60:02d}s"
    elif s < 86400:
        text = f"{s // 3600}h{(s % 3600) // 60:02d}m"
    else:
        text = f"{s // 86400}d{(s % 86400) // 3600}h"
    if negative:
        return f"-{text}" if signed else f"{text} ago"
    return text


# ----------------------------------------------------------------------- id prefixes

_HEX = re.compile(r"^[0-9a-f]+$")


def id_range(prefix: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The smallest and largest uuid starting with `prefix` (hex digits, hyphens optional)."""
    cleaned = prefix.strip().lower().replace("-", "")
    if cleaned and len(cleaned) > 32 and _HEX.match(cleaned):
        raise BadInput(f"'{sanitize(prefix, max_chars=48)}' is too long for a call id: {len(cleaned)} hex digits, "
                       "an id has 32")
    if not cleaned or len(cleaned) > 32 or not _HEX.match(cleaned):
        raise BadInput(f"'{sanitize(prefix, max_chars=48)}' is not a call id or an id prefix (hex digits)")
    low = cleaned.ljust(32, "0")
    high = cleaned.ljust(32, "f")
    return uuid.UUID(low), uuid.UUID(high)
