"""One reading of durations and moments for the CLI and the web page (tether._durations):
the forms each surface accepts and the words of its refusals."""

from __future__ import annotations

import datetime as _dt

import pytest

from tether._durations import MAX_DAYS, parse_duration, parse_since


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45),
        ("90m", 5400),
        ("12h", 43200),
        ("30d", 2592000),
        ("1.5h", 5400),
        (" 15M ", 900),  # spaces around it and either case, as the CLI always took
        ("0s", 0),
        (f"{MAX_DAYS}d", MAX_DAYS * 86400),
    ],
)
def test_a_number_and_a_unit_is_a_duration(text, seconds):
    assert parse_duration(text, "--older-than") == _dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["soon", "30 weeks", "5", "d", "-1d", "1e3s", ""])
def test_anything_else_is_refused_naming_the_option_and_the_forms(text):
    with pytest.raises(ValueError) as refused:
        parse_duration(text, "waiting")
    assert str(refused.value) == (
        f"waiting {text!r} is not a duration; use a number and a unit s, m, h or d, "
        "e.g. 90s, 15m, 12h or 30d"
    )


def test_a_duration_past_a_hundred_years_is_refused_not_an_overflow():
    with pytest.raises(ValueError, match=r"--since '36501d' is more than 36500d \(100 years\)"):
        parse_duration("36501d", "--since")


def test_since_reads_an_age_as_that_long_before_now():
    before = _dt.datetime.now(_dt.UTC)
    found = parse_since("2h", "--since")
    after = _dt.datetime.now(_dt.UTC)
    assert before - _dt.timedelta(hours=2) <= found <= after - _dt.timedelta(hours=2)


def test_since_reads_an_iso_time_as_utc_unless_it_names_an_offset():
    assert parse_since("2026-01-31", "since") == _dt.datetime(2026, 1, 31, tzinfo=_dt.UTC)
    assert parse_since("2026-01-31T09:00:00+02:00", "since") == _dt.datetime(
        2026, 1, 31, 7, tzinfo=_dt.UTC
    )


@pytest.mark.parametrize("text", ["last tuesday", "999999d"])
def test_since_refuses_what_is_neither_with_an_example_of_each(text):
    with pytest.raises(ValueError) as refused:
        parse_since(text, "--since")
    assert str(refused.value) == (
        f"--since {text!r} is neither an age (45s, 90m, 12h, 30d) nor an ISO 8601 date or "
        "time (2026-01-31, 2026-01-31T09:00:00Z)"
    )
