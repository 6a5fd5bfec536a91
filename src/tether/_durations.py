"""Durations and moments as people type them, for every surface that takes one.

``30d``, ``12h``, ``90m``, ``45s`` (a number, decimals allowed, and a unit ``s``, ``m``,
``h`` or ``d`` in either case) is a duration; an age (a duration ago) or an ISO 8601 date or
time is a moment. The CLI (``prune --older-than``, ``pending --waiting``, ``audit --since``)
and the web page and API (``?waiting=``, ``/api/audit?since=``) read them here, so both accept
the same forms and refuse the same input with the same words; each surface wraps the
:class:`ValueError` in its own error (an exit code, a 400).
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Final

__all__ = ["MAX_DAYS", "parse_duration", "parse_since"]

MAX_DAYS: Final = 36500
"""The longest duration taken, in days: a cutoff this far back is still a date (year 1 is the
floor), and nobody means more."""

_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$", re.IGNORECASE)
_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, name: str) -> _dt.timedelta:
    """``text`` (``"30d"``, ``"12h"``, ``"1.5h"``) as a timedelta.

    Args:
        text: what was typed.
        name: the option or parameter it came from (``--older-than``, ``waiting``), named in
            the error.

    Raises:
        ValueError: ``text`` is not a number and a unit, or is more than :data:`MAX_DAYS`
            days; the message names ``name`` and ``text`` and says what to give instead.
    """
    found = _DURATION.match(text)
    if found is None:
        raise ValueError(
            f"{name} {text!r} is not a duration; use a number and a unit s, m, h or d, "
            "e.g. 90s, 15m, 12h or 30d"
        )
    seconds = float(found.group(1)) * _UNIT_SECONDS[found.group(2).lower()]
    if seconds > MAX_DAYS * 86400:
        raise ValueError(
            f"{name} {text!r} is more than {MAX_DAYS}d (100 years); give a shorter duration"
        )
    return _dt.timedelta(seconds=seconds)


def parse_since(text: str, name: str) -> _dt.datetime:
    """``text`` as a moment: an age (``7d``, ``12h``: that long before now) or an ISO 8601
    date or time (UTC unless it names an offset), as an aware UTC datetime.

    Args:
        text: what was typed.
        name: the option or parameter it came from (``--since``, ``since``).

    Raises:
        ValueError: ``text`` is neither; the message names ``name`` and ``text`` and gives
            an example of each form.
    """
    try:
        found = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            return _dt.datetime.now(_dt.UTC) - parse_duration(text, name)
        except ValueError:
            raise ValueError(
                f"{name} {text!r} is neither an age (45s, 90m, 12h, 30d) nor an ISO 8601 "
                "date or time (2026-01-31, 2026-01-31T09:00:00Z)"
            ) from None
    return found if found.tzinfo is not None else found.replace(tzinfo=_dt.UTC)
