"""The small words and colours everything else is built from: urgency styles, labels of states,
health and side-effect classes, times, and the one way untrusted text becomes rich Text."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.text import Text

from console.core.health import (
    HEALTH_URGENCY,
    STATE_URGENCY,
    Urgency,
    deadline_urgency,
    heartbeat_urgency,
    lease_urgency,
)
from console.core.models import LIVE_STATES, JobSummary
from console.shared.text import format_seconds, sanitize

STYLE: dict[Urgency, str] = {
    "ok": "green",
    "watch": "cyan",
    "warn": "yellow",
    "bad": "bold red",
    "none": "dim",
}

SIDE_EFFECT_SHORT = {"read_only": "read-only", "mutating_verifiable": "verifiable",
                     "mutating_unverifiable": "UNVERIFIABLE"}
SIDE_EFFECT_STYLE = {"read_only": "dim", "mutating_verifiable": "", "mutating_unverifiable": "bold magenta"}
# where a value from the database is shown whole (a detail pane, a reason) it is still bounded
LONG = 2_000


HEALTH_LABELS = {
    "healthy": "healthy",
    "heartbeat_late": "heartbeat late",
    "lease_expired": "lease expired",
    "cancel_unheard": "cancel unheard",
    "outcome_unknown": "outcome unknown",
    "zombie": "zombie",
    "over_stage_timeout": "over stage timeout",
    "past_deadline": "past deadline",
    "past_max_hold": "past max hold",
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
    "past_deadline": "running past its deadline: its lease ended with it; the sweep ends it",
    "past_max_hold": ("held as long as its tool's max_hold_seconds allows: its lease ended with the hold; "
                      "it is reclaimed or swept as any expired lease"),
}


def health_label(health: str) -> str:
    return HEALTH_LABELS.get(health, health)


def t(value: object, style: str = "", *, max_chars: int | None = LONG) -> Text:
    """Untrusted text as rich Text: sanitized, bounded, never markup. It wraps where it is laid out."""
    return Text(sanitize(value, max_chars=max_chars), style=style)


def one_line(value: object, style: str = "", *, max_chars: int = 200) -> Text:
    """For table cells that must stay on one line: cut with an ellipsis by the table."""
    return Text(sanitize(value, max_chars=max_chars), style=style, no_wrap=True, overflow="ellipsis")


def state_label(state: str) -> str:
    return "cancel requested" if state == "cancel_requested" else state.replace("_", " ")


def state_style(state: str) -> str:
    return STYLE[STATE_URGENCY.get(state, "none")]


def health_words(health: str | None, state: str | None = None) -> tuple[str, str]:
    """The lease-health label and its colour; a call that holds no lease has no lease health
    (a zombie -- a stale write refused -- still shows)."""
    if health is None or (health == "healthy" and state is not None and state not in LIVE_STATES):
        return "—", STYLE["none"]
    return health_label(health), STYLE[HEALTH_URGENCY.get(health, "none")]


def side_effect_words(side_effect: str) -> tuple[str, str]:
    return SIDE_EFFECT_SHORT.get(side_effect, side_effect), SIDE_EFFECT_STYLE.get(side_effect, "")


def when(value: datetime | None, *, with_day: bool = True) -> str:
    """An instant with its zone, to the millisecond: `2026-12-03 02:13:00.123 UTC`."""
    if value is None:
        return "—"
    value = value.astimezone(UTC)
    text = value.strftime("%Y-%m-%d %H:%M:%S.%f" if with_day else "%H:%M:%S.%f")[:-3]
    return f"{text} UTC" if with_day else text


def clock(value: datetime | None) -> str:
    """`02:13:00`, for columns whose day is said elsewhere."""
    return value.astimezone(UTC).strftime("%H:%M:%S") if value else "—"


def seconds_between(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds()


def time_left(seconds: float | None, past: str) -> str:
    """`12s`, or `expired 3s ago` once it is behind us, or `—` when there is no such time."""
    if seconds is None:
        return "—"
    if seconds < 0:
        return f"{past} {format_seconds(-seconds)} ago"
    return format_seconds(seconds)


def live_ages(job: JobSummary, now: datetime) -> dict[str, tuple[str, str]]:
    """The ticking values (heartbeat age, lease left, deadline left) and their colours, from the
    database's clock at `now`. Only a call that holds a lease has a heartbeat and a lease."""
    live = job.state in LIVE_STATES
    hb_age = seconds_between(now, job.heartbeat_at) if live else None
    lease_left = seconds_between(job.lease_until, now) if live else None
    deadline_left = seconds_between(job.deadline_at, now) if job.finished_at is None else None
    return {
        "heartbeat": (format_seconds(hb_age) if hb_age is not None else "—",
                      STYLE[heartbeat_urgency(hb_age, job.heartbeat_seconds, job.jitter_seconds)]),
        "lease": (time_left(lease_left, "expired"), STYLE[lease_urgency(lease_left, job.heartbeat_seconds)]),
        "deadline": (time_left(deadline_left, "passed"), STYLE[deadline_urgency(deadline_left)]),
    }
