"""Cron expressions as the scheduler reads them: exactly five fields, evaluated in a task's IANA time zone.

croniter's extensions (`@daily`, a sixth field, `L`, `#`, `?`, `H`) are refused, and so is an expression that
never fires. Times are wall-clock times in the task's zone (`occurrences` gives the daylight-saving rules); every
instant returned is an aware UTC datetime, strictly increasing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

# Digits, names (jan-dec, sun-sat), and the operators of standard cron.
_FIELD = re.compile(r"^[0-9A-Za-z*,/-]+$")
_NAMES = re.compile(r"[A-Za-z]+")
_RANGE = re.compile(r"(\d+)-(\d+)")
_KNOWN_NAMES = {"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
                "sun", "mon", "tue", "wed", "thu", "fri", "sat"}
# An expression that does not fire within this many years is refused (29 February fires every 4).
MAX_YEARS_BETWEEN = 8


class ScheduleError(ValueError):
    """A cron expression or time zone that cannot be used; str() says what to fix."""


def cron_normalize(expression: str) -> str:
    """The expression with single spaces. Raises ScheduleError naming the problem."""
    if not isinstance(expression, str):
        raise ScheduleError("The cron expression must be a string of 5 fields.")
    fields = expression.split()
    if len(fields) != 5:
        raise ScheduleError(f"A cron expression has exactly 5 fields (minute hour day month weekday); this one has "
                            f"{len(fields)}.")
    for field in fields:
        names = {name.lower() for name in _NAMES.findall(field)}
        if not _FIELD.match(field) or names - _KNOWN_NAMES:
            raise ScheduleError(f"The field {field!r} is not standard cron: use digits, *, lists (1,2), ranges "
                                "(1-5), steps (*/15) and month or day names.")
        if any(int(low) > int(high) for low, high in _RANGE.findall(field)):
            # croniter reads 5-1 as wrapping around; standard cron refuses it, and so do we.
            raise ScheduleError(f"The range in {field!r} runs backwards; write it low-high.")
    normalized = " ".join(fields)
    try:
        croniter(normalized, datetime(2000, 1, 1), max_years_between_matches=MAX_YEARS_BETWEEN).get_next(datetime)
    except CroniterBadDateError:
        raise ScheduleError(f"The cron expression {normalized!r} never fires.") from None
    except (CroniterBadCronError, CroniterError, ValueError, KeyError) as exc:
        raise ScheduleError(f"The cron expression {normalized!r} is not valid: {exc}") from None
    return normalized


def zone(name: str) -> ZoneInfo:
    """The IANA time zone of this name. Raises ScheduleError."""
    if not isinstance(name, str) or not name or name != name.strip() or name.startswith(("/", ".")) or ".." in name:
        raise ScheduleError(f"{name!r} is not an IANA time zone name (such as Europe/Paris or UTC).")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"{name!r} is not an IANA time zone name (such as Europe/Paris or UTC).") from None


def occurrences(expression: str, tz: ZoneInfo, after: datetime,
                walks: dict[str, croniter] | None = None) -> Iterator[datetime]:
    """The fire times strictly after `after` (aware), in UTC, increasing, without end.

    `walks` (expression -> croniter) lets a caller that walks many tasks reuse each parsed expression: parsing
    costs more than a step. A shared walk must be consumed before the next occurrences() of that expression.

    Daylight saving, as chosen and tested (tests/scheduler/test_cron.py). Times are wall-clock times in the
    task's zone: croniter walks naive local times, and each is placed in the zone with `fold=0`. So:
    - a wall time that does not exist (the hour skipped in spring) fires at the instant it would have been had
      the clocks not moved: 02:30 in a 02:00→03:00 gap fires at 03:30 local time. A daily 02:30 task fires
      once that day;
    - a wall time that occurs twice (the hour repeated in autumn) fires at its first occurrence only: a daily
      01:30 task fires once that day, not twice;
    - two wall times that land on one instant (a half-hourly task in the skipped hour) fire once.
    Every instant this module returns is an aware UTC datetime, and occurrences are strictly increasing.
    """
    local_start = after.astimezone(tz).replace(tzinfo=None)
    walk = walks.get(expression) if walks is not None else None
    if walk is None:
        walk = croniter(expression, local_start, max_years_between_matches=MAX_YEARS_BETWEEN)
        if walks is not None:
            walks[expression] = walk
    else:
        walk.set_current(local_start, force=True)
    last = after
    while True:
        wall = walk.get_next(datetime)
        instant = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
        # A wall time placed at fold=0 can fall before `after` (the repeated hour's second pass), and two wall
        # times can land on one instant (the skipped hour): neither fires twice.
        if instant > last:
            last = instant
            yield instant


def next_after(expression: str, tz: ZoneInfo, after: datetime) -> datetime:
    return next(occurrences(expression, tz, after))


def next_times(expression: str, tz: ZoneInfo, after: datetime, count: int) -> list[datetime]:
    found = []
    for instant in occurrences(expression, tz, after):
        found.append(instant)
        if len(found) == count:
            return found
    return found
