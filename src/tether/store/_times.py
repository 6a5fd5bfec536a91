"""Stored timestamps read back as times, and what a stored value that is no time is told as.

Both backends store UTC times: SQLite as seconds since the epoch (a ``REAL`` column holds
whatever it is given, so a hand edit can leave text or ``1e300`` there), Postgres as
``timestamptz`` (which holds ``infinity`` and years past 9999, neither of which a Python
datetime can). Every stored time a record holds is read by :func:`ts_to_dt`, which turns such a
value into :class:`~tether.errors.CorruptRecordError` saying what the value is, so that the
row it belongs to is listed as damaged (or, read by id, refused naming the run and the
column) instead of the read failing deep in the driver (docs/design.md §12, "A damaged run").

On Postgres the driver itself would fail first, on the client, converting the value: its
timestamp loaders are wrapped (:mod:`._postgres_drive`) to hand such a value over as
:class:`UnreadableTime` instead, for :func:`ts_to_dt` to name.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Final

from ..errors import CorruptRecordError

__all__ = ["UnreadableTime", "ts_to_dt"]

_UTC: Final = _dt.UTC
_SHOWN_MAX: Final = 40


class UnreadableTime:
    """A stored time the database holds but a Python datetime cannot (Postgres
    ``infinity``, ``-infinity``, a year past 9999), as the Postgres read layer hands it over.

    Attributes:
        what: the value in words (``"infinity"``, ``"a time after year 9999"``).
    """

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"UnreadableTime({self.what!r})"


def ts_to_dt(value: Any) -> _dt.datetime | None:
    """A stored timestamp (unix seconds or an aware datetime) as an aware UTC datetime
    (``None`` for SQL NULL).

    Raises:
        CorruptRecordError: the value is no time a datetime can hold: text, bytes, seconds
            before year 1 or after year 9999, ``nan``, an infinity, or an
            :class:`UnreadableTime`; the message says which (and holds no ``": "``, so a
            listing's note can quote it whole).
    """
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        return value.astimezone(_UTC) if value.tzinfo else value.replace(tzinfo=_UTC)
    try:
        return _dt.datetime.fromtimestamp(float(value), _UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        raise CorruptRecordError(unreadable_reason(value)) from None


def unreadable_reason(value: Any) -> str:
    """What a stored time that :func:`ts_to_dt` cannot read is, in words."""
    if isinstance(value, UnreadableTime):
        return f"{value.what} is not a time tether can read"
    if isinstance(value, bool) or not isinstance(value, int | float):
        shown = repr(bytes(value) if isinstance(value, memoryview) else value)
        if len(shown) > _SHOWN_MAX:
            shown = shown[: _SHOWN_MAX - 1] + "…"
        return f"{shown.replace(': ', ':')} is not a number of seconds since the epoch"
    if value != value:
        return "nan is not a time"
    where = "after year 9999" if value > 0 else "before year 1"
    shown = f"{value:g}" if isinstance(value, float) else f"{str(value)[:_SHOWN_MAX]}"
    return f"{shown} seconds since the epoch is {where}"
