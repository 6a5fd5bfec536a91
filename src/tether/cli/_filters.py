"""What a listing may be filtered by, shared by the CLI and the web page."""

from __future__ import annotations

from ..store.base import RunRecord

__all__ = ["RUNNER_KINDS", "RUN_STATUSES", "runner_filter", "runner_label"]

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
