"""Times people type: ISO 8601 with or without an offset, ages, durations, bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from console.shared.errors import BadInput
from console.shared.times import check_range, parse_duration, parse_past, parse_time

NOW = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("2h", 7200), ("3d", 259200), ("45", 45),
                                            ("1.5h", 5400), ("10 min", 600)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "fast", "-5m", "0s", "2w", "1h30"])
def test_bad_durations(text):
    with pytest.raises(BadInput):
        parse_duration(text)


def test_instants_say_their_zone():
    utc = parse_time("2026-12-03T02:13:00Z")
    assert utc.at == NOW and utc.zone == "UTC"
    offset = parse_time("2026-12-03T04:13:00+02:00")
    assert offset.at == NOW and offset.zone == "+0200"
    local = parse_time("2026-12-03T02:13:00")
    assert local.at.tzinfo is not None and local.zone.startswith("local")
    ago = parse_time("15m", now=NOW)
    assert ago.at == NOW - timedelta(minutes=15) and ago.zone == "ago"


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "12/03/2026", ""])
def test_bad_instants(text):
    with pytest.raises(BadInput, match="ISO 8601|nothing given"):
        parse_time(text)


def test_since_after_until_is_bad_input():
    with pytest.raises(BadInput, match="is after"):
        check_range(parse_time("1h", now=NOW), parse_time("2h", now=NOW))
    check_range(parse_time("2h", now=NOW), parse_time("1h", now=NOW))


def test_an_instant_after_the_database_clock_is_refused_for_the_past():
    with pytest.raises(BadInput, match="in the future"):
        parse_past("2026-12-03T02:14:00Z", now=NOW)
    assert parse_past("2026-12-03T02:13:00Z", now=NOW).at == NOW, "now itself is the past's last instant"
    assert parse_past("1m", now=NOW).at == NOW - timedelta(minutes=1)


def test_an_age_of_nothing_is_now():
    """`--at 0s` asks about the present: fair input, unlike a duration of nothing (a window)."""
    assert parse_past("0s", now=NOW).at == NOW and parse_time("0m", now=NOW).zone == "ago"
    with pytest.raises(BadInput, match="more than zero"):
        parse_duration("0s")


@pytest.mark.parametrize("text, words", [("99999999d", "hundred years"), ("999999999999999999999s", "hundred years"),
                                          ("9" * 5000 + "s", "hundred years"), ("0001-01-01", "out of range"),
                                          ("0001-01-01T00:30:00+01:00", "out of range"),
                                          ("9999-12-31T23:59:59Z", "out of range"), ("\uff12h", "ISO 8601"),
                                          ("\u0663h", "ISO 8601")])
def test_times_out_of_range_or_in_other_digits_are_bad_input_not_a_crash(text, words):
    """They were OverflowError and ValueError (exit 1, 'internal error') in every command."""
    with pytest.raises(BadInput, match=words):
        parse_time(text, now=NOW)


def test_the_range_edges_and_the_longest_age_still_parse():
    assert parse_time("1900-01-01T00:00:00Z").at.year == 1900
    assert parse_time("36500d", now=NOW).at == NOW - timedelta(days=36_500)


def test_a_time_with_a_foreign_separator_or_the_long_s_is_not_taken():
    for text in ("2026-12-03\u043602:13:00Z", "90\u017f"):
        with pytest.raises(BadInput):
            parse_time(text, now=NOW)


@pytest.fixture
def berlin(monkeypatch):
    """This machine's zone as Europe/Berlin for one test (Python reads TZ at tzset)."""
    import time

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_local_time_the_clocks_skipped_is_bad_input(berlin):
    # 2026-03-29: 02:00 CET became 03:00 CEST; 02:30 named no instant
    with pytest.raises(BadInput, match=r"does not exist in local time.*\+01:00 CET to \+02:00 CEST"):
        parse_time("2026-03-29T02:30:00", what="--at")


def test_a_local_time_that_happened_twice_is_bad_input_naming_both(berlin):
    # 2026-10-25: 03:00 CEST became 02:00 CET; 02:30 happened at 00:30Z and again at 01:30Z
    with pytest.raises(BadInput, match=r"happened twice.*02:30:00\+02:00 \(CEST\) or .*02:30:00\+01:00 \(CET\)"):
        parse_time("2026-10-25T02:30:00", what="--at")


def test_local_times_beside_a_change_of_clocks_parse_to_their_one_instant(berlin):
    assert parse_time("2026-03-29T01:59:59").at.astimezone(UTC) == datetime(2026, 3, 29, 0, 59, 59, tzinfo=UTC)
    assert parse_time("2026-03-29T03:00:00").at.astimezone(UTC) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    summer = parse_time("2026-07-01T12:00:00")
    assert summer.at.astimezone(UTC) == datetime(2026, 7, 1, 10, 0, tzinfo=UTC) and summer.zone == "local (CEST)"
    # the same wall time with an offset is what the message asks for, and it is taken
    assert parse_time("2026-10-25T02:30:00+01:00").at.astimezone(UTC) == datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
