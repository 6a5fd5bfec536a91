"""Output for people (rich) and for scripts (``--json``), and the key-level state diff."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import os
import uuid
from decimal import Decimal
from typing import Any

from rich.console import Console
from rich.markup import escape

PIPE_WIDTH = 200


def _console(*, stderr: bool) -> Console:
    # Piped output is read by grep and people alike: rich's 80-column fallback would wrap
    # ids and timestamps, so use a wide line unless COLUMNS says otherwise.
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(stderr=stderr, soft_wrap=True, width=width)


#: Human output goes to stdout; progress, notes and errors to stderr, so that
#: ``--json`` output and pipes stay clean.
out = _console(stderr=False)
err = _console(stderr=True)


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


def emit_json(value: Any) -> None:
    """Print ``value`` as JSON on stdout (``--json`` mode)."""
    print(to_json(value), flush=True)


def compact(value: Any, width: int = 60) -> str:
    """A one-line JSON rendering, cut to ``width`` characters."""
    text = json.dumps(value, default=_default, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def when(value: _dt.datetime | None) -> str:
    """A UTC timestamp for a table cell (``-`` when absent)."""
    if value is None:
        return "-"
    return value.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def state_diff(before: Any, after: Any) -> dict[str, list[str]]:
    """Which top-level keys a step added, changed and removed.

    Args:
        before: the state at the previous boundary (a dict; anything else counts as empty).
        after: the state at this boundary.

    Returns:
        ``{"added": [...], "changed": [...], "removed": [...]}``, each list sorted.
    """
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    changed = []
    for key in new.keys() & old.keys():
        try:
            same = bool(new[key] == old[key])
        except Exception:  # a value whose __eq__ raises counts as changed
            same = False
        if not same:
            changed.append(key)
    return {
        "added": sorted(map(str, new.keys() - old.keys())),
        "changed": sorted(map(str, changed)),
        "removed": sorted(map(str, old.keys() - new.keys())),
    }


def diff_markup(diff: dict[str, list[str]]) -> str:
    """A diff as rich markup: ``+added ~changed -removed``."""
    parts = [f"[green]+{escape(k)}[/]" for k in diff["added"]]
    parts += [f"[yellow]~{escape(k)}[/]" for k in diff["changed"]]
    parts += [f"[red]-{escape(k)}[/]" for k in diff["removed"]]
    return " ".join(parts) or "[dim]no change[/]"


STATUS_STYLE = {
    "completed": "green",
    "paused": "yellow",
    "interrupted": "yellow",
    "running": "cyan",
    "failed": "red",
    "cancelled": "magenta",
    "queued": "blue",
}


def styled_status(status: str) -> str:
    """A status word coloured by meaning."""
    style = STATUS_STYLE.get(status)
    return f"[{style}]{status}[/]" if style else status


def styled_label(label: str, step_type: str, status: str) -> str:
    """A timeline row's label (:attr:`Checkpoint.label`), coloured only where the row records
    an outcome: a pre-call row (``before tool call``) is plain, since nothing had happened
    yet when it was written."""
    outcome = status != "completed" or step_type in ("node", "run_end")
    style = STATUS_STYLE.get(status) if outcome else None
    return f"[{style}]{escape(label)}[/]" if style else escape(label)
