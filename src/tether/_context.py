"""Context variables that carry a run's identity through nodes, tools and decorators.

``execution_id`` is minted once per run and placed here so every node, tool and
``@idempotent`` call inside the run reads the same id; ``agent_path`` is extended, never
overwritten, as topologies nest (docs/design.md §8).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store.base import Checkpointer


@dataclass(frozen=True, slots=True)
class RunContext:
    """The run a piece of code executes in."""

    execution_id: str
    checkpointer: Checkpointer
    runner_name: str


_run: ContextVar[RunContext | None] = ContextVar("tether_run", default=None)
_agent_path: ContextVar[str | None] = ContextVar("tether_agent_path", default=None)


def current_run() -> RunContext | None:
    """The run the caller executes in, or ``None`` outside any run."""
    return _run.get()


def current_execution_id() -> str | None:
    """The ``execution_id`` of the run the caller executes in, or ``None`` outside any run."""
    ctx = _run.get()
    return None if ctx is None else ctx.execution_id


def current_agent_path() -> str | None:
    """Where in a multi-agent topology the caller runs (``None`` in a plain chain)."""
    return _agent_path.get()


_active_lock = threading.Lock()
_active_runs = 0


def active_runs() -> int:
    """How many runs are executing in this process now, on any thread."""
    return _active_runs


@contextmanager
def run_scope(ctx: RunContext) -> Iterator[None]:
    global _active_runs
    token = _run.set(ctx)
    with _active_lock:
        _active_runs += 1
    try:
        yield
    finally:
        with _active_lock:
            _active_runs -= 1
        _run.reset(token)


@contextmanager
def agent_path_scope(segment: str) -> Iterator[str]:
    """Extend the agent path by one segment (``agent:<name>``, ``tool:<name>``...)."""
    parent = _agent_path.get()
    path = segment if not parent else f"{parent}/{segment}"
    token = _agent_path.set(path)
    try:
        yield path
    finally:
        _agent_path.reset(token)


sync_drive: ContextVar[bool] = ContextVar("tether_sync_drive", default=False)
"""True inside a sync verb (``run``/``resume``/``fork``): the event loop under it exists for
that one call, so a store may serve its async methods with blocking calls on a pool shared
across threads and calls instead of opening connections for that loop
(:func:`tether.engine.sync.run_sync`)."""
