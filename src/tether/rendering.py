"""Plain-text renderings the CLI and the web page share: JSON for output (datetimes as ISO
8601, other non-JSON values as strings), one-line previews and table timestamps. No rich, no
Starlette: either front end imports it without the other's extra."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import uuid
from decimal import Decimal
from typing import Any

__all__ = ["compact", "to_json", "when"]


def _default(value: Any) -> Any:
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return repr(value)


def to_json(value: Any) -> str:
    """``value`` as indented JSON; datetimes become ISO 8601, other non-JSON values strings."""
    return json.dumps(value, default=_default, indent=2, ensure_ascii=False)


def compact(value: Any, width: int = 60) -> str:
    """A one-line JSON rendering, cut to ``width`` characters."""
    text = json.dumps(value, default=_default, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def when(value: _dt.datetime | None) -> str:
    """A UTC timestamp for a table cell (``-`` when absent)."""
    if value is None:
        return "-"
    return value.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
