"""Times people type: an instant (ISO 8601, or an age such as `15m` meaning that long ago) and
a duration (`90s`, `15m`, `2h`, `3d`). Parsed here once, for the CLI and the console alike.

An ISO time without an offset is local time; the result says which zone was used, so the output
can say it too. Ages are measured back from the database's clock (the caller passes it in): a
console's clock and the server's may differ, the history's `at` is the server's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from console.shared.errors import BadInput
from console.shared.text import sanitize

# ASCII only: \d would take full-width and Arabic-Indic digits too, and IGNORECASE alone would
# take the long s (U+017F) for `s`
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?)\s*$",
                       re.IGNORECASE | re.ASCII)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# what an instant may be: the history holds nothing older, and outside these years the arithmetic
# of zones and ages leaves what Python's datetime can hold
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
LONGEST = timedelta(days=36_500)  # an age or a duration of at most a hundred years
TIME_FORMS = "an ISO 8601 time (2026-12-03T02:13:00Z; without an offset it is local time) or an age (90s, 15m, 2h, 3d)"
DURATION_FORMS = "a duration such as 90s, 15m, 2h or 3d"


@dataclass(frozen=True)
class Instant:
    """A parsed TIME: the instant, and how it was given (for the output to say)."""

    at: datetime
    zone: str  # "UTC", "+02:00", "local (CET)", or "ago" for an age
    text: str

    def describe(self) -> str:
        return f"{self.at.isoformat()} ({self.zone})"


def parse_duration(text: str, *, what: str = "duration", zero: bool = False) -> float:
    """Seconds in `90s`, `15m`, `2h`, `3d` (or a plain number of seconds); bad input otherwise.
    `zero`: a duration of nothing is allowed (an age of `0s` is now)."""
    cleaned = text.strip()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", cleaned):
        seconds = float(cleaned)
    else:
        m = _DURATION.match(cleaned)
        if not m:
            raise BadInput(f"{what} '{sanitize(text, max_chars=40)}' is not {DURATION_FORMS}")
        seconds = float(m.group(1)) * _UNIT[m.group(2)[0].lower()]
    if seconds < 0 or (seconds == 0 and not zero):
        raise BadInput(f"{what} '{sanitize(text, max_chars=40)}' must be more than zero")
    if seconds > LONGEST.total_seconds():
        raise BadInput(f"{what} '{sanitize(text, max_chars=40)}' is longer than a hundred years")
    return seconds


def parse_time(text: str, *, now: datetime | None = None, what: str = "time") -> Instant:
    """An instant from ISO 8601 or an age back from `now` (the database's clock, when known)."""
    cleaned = text.strip()
    if not cleaned:
        raise BadInput(f"{what}: nothing given; use {TIME_FORMS}")
    if _DURATION.match(cleaned):
        reference = now or datetime.now(UTC)
        return Instant(reference - timedelta(seconds=parse_duration(cleaned, what=what, zero=True)), "ago",
                       cleaned)
    try:
        parsed = datetime.fromisoformat(cleaned.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadInput(f"{what} '{sanitize(text, max_chars=60)}' is not {TIME_FORMS}") from None
    if not cleaned.isascii():  # fromisoformat takes any character between the date and the time
        raise BadInput(f"{what} '{sanitize(text, max_chars=60)}' is not {TIME_FORMS} (ASCII only)")
    try:
        if parsed.tzinfo is None:
            instant = _local(parsed, cleaned, what)
        else:
            zone = "UTC" if parsed.utcoffset() == timedelta(0) else parsed.strftime("%z")
            instant = Instant(parsed, zone, cleaned)
        in_range = EARLIEST <= instant.at <= LATEST
    except (OverflowError, ValueError):
        in_range = False
    if not in_range:
        raise BadInput(f"{what} '{sanitize(text, max_chars=60)}' is out of range: give a time between "
                       f"{EARLIEST.date()} and {LATEST.date()}")
    return instant


def _local(wall: datetime, text: str, what: str) -> Instant:
    """A wall-clock time in this machine's zone, at that date. Where a change of clocks makes it
    name no instant (skipped forward) or two (set back), an auditor asking who held a call then
    must not get an answer for a time they did not mean: bad input, saying which and what to add."""
    earlier, later = wall.replace(fold=0).astimezone(), wall.replace(fold=1).astimezone()
    shown = sanitize(text, max_chars=60)
    if earlier.replace(tzinfo=None) != wall and later.replace(tzinfo=None) != wall:
        raise BadInput(f"{what} '{shown}' does not exist in local time: the clocks went forward over it "
                       f"({_zone_words(earlier, later)}); give the time with an offset")
    if earlier.utcoffset() != later.utcoffset():
        raise BadInput(f"{what} '{shown}' happened twice in local time, before and after the clocks went "
                       f"back; give it with an offset: {wall.isoformat()}{_offset(earlier)} "
                       f"({earlier.tzname()}) or {wall.isoformat()}{_offset(later)} ({later.tzname()})")
    return Instant(earlier, f"local ({earlier.tzname() or 'local'})", text)


def _offset(at: datetime) -> str:
    minutes = int((at.utcoffset() or timedelta(0)).total_seconds() // 60)
    return f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _zone_words(earlier: datetime, later: datetime) -> str:
    # forward: from the smaller offset to the larger, whichever fold Python gave which
    ordered = sorted((earlier, later), key=lambda x: x.utcoffset() or timedelta(0))
    return " to ".join(dict.fromkeys(f"{_offset(x)} {x.tzname()}" for x in ordered))


def parse_past(text: str, *, now: datetime, what: str = "time") -> Instant:
    """An instant the history can answer for: not after `now` (the database's clock). The history
    holds nothing after now, so an answer there would be the present passed off as the future."""
    instant = parse_time(text, now=now, what=what)
    if instant.at > now:
        raise BadInput(f"{what} {instant.describe()} is in the future: the database's clock says it is "
                       f"{now.astimezone(UTC).isoformat()} (UTC) and the history holds nothing after that")
    return instant


def check_range(since: Instant | None, until: Instant | None) -> None:
    if since is not None and until is not None and since.at > until.at:
        raise BadInput(f"--since {since.describe()} is after --until {until.describe()}")
