"""What a listing may be filtered by, shared by the CLI and the web page."""

from __future__ import annotations

from ..store.base import RunRecord

__all__ = ["RUNNER_KINDS", "RUN_STATUSES", "runner_filter", "runner_label", "status_filter"]

RUN_STATUSES = ("queued", "running", "paused", "completed", "failed", "cancelled")
#: The kinds a runner is shown with (``chain:orders``); a filter may spell the name either way.
RUNNER_KINDS = frozenset(
    {"chain", "agent", "swarm", "supervisor", "pydantic_ai", "openai_agents", "langgraph"}
)


def runner_label(run: RunRecord) -> str:
    """A run's runner as lists show it: ``chain:orders`` (``orders`` for a queued run, whose
    kind is not known until a worker starts it)."""
    return f"{run.runner_kind}:{run.runner_name}" if run.runner_kind else run.runner_name


def runner_filter(text: str | None) -> str | None:
    """The runner name a filter names: ``"orders"`` or ``"chain:orders"`` (as lists show it)
    both give ``"orders"``; ``None`` or blank gives ``None`` (no filter)."""
    if text is None or not text.strip():
        return None
    kind, sep, name = text.strip().partition(":")
    return name if sep and kind in RUNNER_KINDS and name else text.strip()


def status_filter(text: str | None) -> str | tuple[str, ...] | None:
    """The statuses a filter names: one (``"paused"``) or several, comma-separated
    (``"running,paused,queued"``, as a tuple); ``None`` or blank gives ``None``.

    Raises:
        ValueError: a name that is not a run status (the message lists those that are).
    """
    if text is None or not text.strip():
        return None
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in RUN_STATUSES]
    if unknown or not names:
        raise ValueError(
            f"unknown run status {', '.join(repr(n) for n in unknown) or repr(text)}; "
            f"use one or more of {', '.join(RUN_STATUSES)}, comma-separated"
        )
    return names[0] if len(names) == 1 else names
