"""Output for people (rich) and for scripts (``--json``), and the key-level state diff."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..checkpoint import RUN_END
from ..views import compact, state_diff, to_json, when

__all__ = [
    "compact",
    "diff_markup",
    "emit_json",
    "err",
    "out",
    "state_diff",
    "styled_label",
    "styled_status",
    "to_json",
    "when",
]

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


def emit_json(value: Any) -> None:
    """Print ``value`` as JSON on stdout (``--json`` mode)."""
    print(to_json(value), flush=True)


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
    outcome = status != "completed" or step_type in ("node", RUN_END)
    style = STATUS_STYLE.get(status) if outcome else None
    return f"[{style}]{escape(label)}[/]" if style else escape(label)
