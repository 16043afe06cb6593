"""Table cells as rich Text, never markup: untrusted strings cannot style or escape the screen."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from console.health import (
    HEALTH_URGENCY,
    STATE_URGENCY,
    Urgency,
    deadline_urgency,
    format_seconds,
    health_label,
    heartbeat_urgency,
    lease_urgency,
    sanitize,
)
from console.models import JobSummary

STYLE: dict[Urgency, str] = {
    "ok": "green",
    "watch": "cyan",
    "warn": "yellow",
    "bad": "bold red",
    "none": "dim",
}

SIDE_EFFECT_SHORT = {"read_only": "read-only", "mutating_verifiable": "verifiable",
                     "mutating_unverifiable": "UNVERIFIABLE"}


def plain(value: object, style: str = "") -> Text:
    return Text(sanitize(value), style=style, no_wrap=True, overflow="ellipsis")


def state_cell(state: str) -> Text:
    label = "cancel requested" if state == "cancel_requested" else state.replace("_", " ")
    return plain(label, STYLE[STATE_URGENCY.get(state, "none")])


def health_cell(health: str) -> Text:
    return plain(health_label(health), STYLE[HEALTH_URGENCY.get(health, "none")])


def side_effect_cell(side_effect: str) -> Text:
    style = {"read_only": "dim", "mutating_verifiable": "", "mutating_unverifiable": "bold magenta"}
    return plain(SIDE_EFFECT_SHORT.get(side_effect, side_effect), style.get(side_effect, ""))


def seconds_between(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds()


def live_ages(job: JobSummary, now: datetime) -> dict[str, Text]:
    """The ticking cells, recomputed from the database's clock every second."""
    live = job.state in ("running", "cancel_requested")
    hb_age = seconds_between(now, job.heartbeat_at) if live else None
    lease_left = seconds_between(job.lease_until, now) if live else None
    deadline_left = seconds_between(job.deadline_at, now) if job.finished_at is None else None
    hb_text = format_seconds(hb_age) if hb_age is not None else "—"
    if lease_left is None:
        lease_text = "—"
    elif lease_left < 0:
        lease_text = f"expired {format_seconds(-lease_left)} ago"
    else:
        lease_text = format_seconds(lease_left)
    if deadline_left is None:
        deadline_text = "—"
    elif deadline_left < 0:
        deadline_text = f"passed {format_seconds(-deadline_left)} ago"
    else:
        deadline_text = format_seconds(deadline_left)
    return {
        "heartbeat": plain(hb_text, STYLE[heartbeat_urgency(hb_age, job.heartbeat_seconds, job.jitter_seconds)]),
        "lease": plain(lease_text, STYLE[lease_urgency(lease_left, job.heartbeat_seconds)]),
        "deadline": plain(deadline_text, STYLE[deadline_urgency(deadline_left)]),
    }
