"""Cron parsing and fire times in a task's time zone, daylight-saving transitions included (scheduler.cron)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.cron import ScheduleError, cron_normalize, next_after, next_times, occurrences, zone

NEW_YORK = zone("America/New_York")  # 2026: clocks skip 02:00-03:00 on 8 March, repeat 01:00-02:00 on 1 November


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def local(instant: datetime, tz=NEW_YORK) -> str:
    return instant.astimezone(tz).strftime("%m-%d %H:%M %Z")


@pytest.mark.parametrize(("expression", "normalized"), [
    ("*/15 * * * *", "*/15 * * * *"), ("  0  9 * * 1-5 ", "0 9 * * 1-5"), ("0 0 1,15 * *", "0 0 1,15 * *"),
    ("30 2 * jan-mar mon,fri", "30 2 * jan-mar mon,fri"), ("0 0 29 2 *", "0 0 29 2 *")])
def test_standard_five_field_expressions_are_accepted(expression, normalized):
    assert cron_normalize(expression) == normalized


@pytest.mark.parametrize("expression", [
    "* * * *", "* * * * * *", "@daily", "0 0 L * *", "0 0 * * 5#2", "0 0 ? * *", "H * * * *", "61 * * * *",
    "* 24 * * *", "*/0 * * * *", "0 0 31 2 *", "0 0 30 2 *", "", "0 0 * * funday", "0 0 1 13 *", "5-1 * * * *"])
def test_anything_but_standard_cron_is_refused(expression):
    with pytest.raises(ScheduleError):
        cron_normalize(expression)


def test_a_non_string_expression_is_refused():
    with pytest.raises(ScheduleError):
        cron_normalize(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo"])
def test_iana_zones_are_accepted(name):
    assert zone(name).key == name


@pytest.mark.parametrize("name", ["Mars/Olympus", "", " UTC", "../etc/passwd", "/etc/localtime", "EST5EDT/x", 3])
def test_unknown_zones_are_refused(name):
    with pytest.raises(ScheduleError):
        zone(name)


@pytest.mark.parametrize(("expression", "after", "expected"), [
    ("* * * * *", utc(2026, 5, 1, 10, 0, 0), utc(2026, 5, 1, 10, 1)),  # strictly after: not the same minute
    ("* * * * *", utc(2026, 5, 1, 10, 0, 59), utc(2026, 5, 1, 10, 1)),
    ("0 * * * *", utc(2026, 5, 1, 10, 59), utc(2026, 5, 1, 11, 0)),  # hour boundary
    ("0 0 * * *", utc(2026, 5, 31, 23, 59), utc(2026, 6, 1, 0, 0)),  # day and month boundary
    ("59 23 31 12 *", utc(2026, 12, 31, 23, 59), utc(2027, 12, 31, 23, 59)),  # year boundary
    ("0 0 1 1 *", utc(2026, 12, 31, 23, 59, 30), utc(2027, 1, 1, 0, 0)),
    ("0 0 29 2 *", utc(2026, 3, 1), utc(2028, 2, 29)),  # the next leap day
    ("0 9 * * 1-5", utc(2026, 11, 20, 9, 0), utc(2026, 11, 23, 9, 0)),  # Friday 09:00 -> Monday
])
def test_the_next_fire_time_around_minute_hour_day_month_and_year_boundaries(expression, after, expected):
    assert next_after(expression, zone("UTC"), after) == expected


def test_times_are_evaluated_in_the_tasks_zone():
    assert next_after("0 9 * * *", zone("Asia/Tokyo"), utc(2026, 5, 1, 0, 30)) == utc(2026, 5, 2, 0, 0)
    assert next_after("0 9 * * *", zone("Europe/Paris"), utc(2026, 5, 1, 6, 0)) == utc(2026, 5, 1, 7, 0)


def test_a_daily_time_in_the_skipped_hour_fires_once_that_day_at_the_instant_it_would_have_been():
    times = next_times("30 2 * * *", NEW_YORK, utc(2026, 3, 6, 12), 4)
    assert [local(time) for time in times] == ["03-07 02:30 EST", "03-08 03:30 EDT", "03-09 02:30 EDT",
                                                "03-10 02:30 EDT"]


def test_a_daily_time_in_the_repeated_hour_fires_once_not_twice():
    times = next_times("30 1 * * *", NEW_YORK, utc(2026, 10, 31, 12), 3)
    assert [local(time) for time in times] == ["11-01 01:30 EDT", "11-02 01:30 EST", "11-03 01:30 EST"]
    assert times[1] - times[0] > (times[2] - times[1])  # the day with 25 hours


def test_after_the_repeated_hours_second_pass_the_next_day_is_next():
    second_pass = utc(2026, 11, 1, 6, 10)  # 01:10 EST, after 01:30 EDT has already fired
    assert local(next_after("30 1 * * *", NEW_YORK, second_pass)) == "11-02 01:30 EST"


def test_a_half_hourly_task_in_the_skipped_hour_never_fires_twice_for_one_instant():
    times = next_times("*/30 * * * *", NEW_YORK, utc(2026, 3, 8, 6, 0), 5)  # from 01:00 EST
    assert [local(time) for time in times] == ["03-08 01:30 EST", "03-08 03:00 EDT", "03-08 03:30 EDT",
                                                "03-08 04:00 EDT", "03-08 04:30 EDT"]
    assert times == sorted(set(times))


def test_an_hourly_task_fires_once_in_the_repeated_hour():
    times = next_times("0 * * * *", NEW_YORK, utc(2026, 11, 1, 3, 30), 4)  # from 23:30 EDT
    assert [local(time) for time in times] == ["11-01 00:00 EDT", "11-01 01:00 EDT", "11-01 02:00 EST",
                                                "11-01 03:00 EST"]


def test_occurrences_are_strictly_increasing_across_a_year_of_transitions():
    previous = utc(2026, 1, 1)
    for count, instant in enumerate(occurrences("*/20 1-3 * * *", NEW_YORK, previous)):
        assert instant > previous and instant.tzinfo is UTC
        previous = instant
        if count > 3 * 365 * 3:
            break


def test_a_daily_0230_task_in_paris_fires_once_on_both_transition_days():
    # Europe/Paris skips 02:00-03:00 on 29 March 2026 and repeats 02:00-03:00 on 25 October 2026.
    paris = zone("Europe/Paris")
    spring = next_times("30 2 * * *", paris, utc(2026, 3, 27, 12), 3)
    assert [local(time, paris) for time in spring] == ["03-28 02:30 CET", "03-29 03:30 CEST", "03-30 02:30 CEST"]
    autumn = next_times("30 2 * * *", paris, utc(2026, 10, 23, 12), 3)
    assert [local(time, paris) for time in autumn] == ["10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET"]
