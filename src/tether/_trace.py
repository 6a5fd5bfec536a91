"""Tracing hook points the executors call at run, step, model-call and tool-call boundaries.

This module imports no tracing library. Until :func:`tether.otel.instrument` installs a
backend, every hook returns one shared no-op context manager (a global read and a call), so the
step path costs next to nothing with tracing off, and ``import tether`` never imports
OpenTelemetry.

With a backend installed, each run verb's drive opens a run span, each chain node a step span,
each model call and tool call its own span, and every checkpoint the drive writes carries the
trace id in ``node_output["trace_id"]`` (see :func:`trace_id_of`), so a run's timeline links to
its traces. The record has no trace column: ``node_output`` of every row the executors write is
``None`` or a dict, and a key there needs no schema change.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .store.base import Checkpointer, PendingInterrupt

__all__ = [
    "TRACE_ID_KEY",
    "CallSpan",
    "TracingBackend",
    "current_backend",
    "llm_call",
    "run",
    "set_backend",
    "stamping",
    "step",
    "tool_call",
    "trace_id_of",
]

TRACE_ID_KEY = "trace_id"
"""The ``node_output`` key that holds a checkpoint's trace id (32 lowercase hex digits)."""


class CallSpan(Protocol):
    """What a model-call hook yields: the executor reports the response through it."""

    def response(self, response: Any) -> None:
        """Record the model's answer (token usage, tool calls) on the span."""


class TracingBackend(Protocol):
    """What :func:`set_backend` installs (``tether.otel`` provides the OpenTelemetry one)."""

    def run(self, kind: str, name: str, execution_id: str) -> AbstractContextManager[None]:
        """Span one drive of a run (a start, a resume or a fork)."""

    def step(self, execution_id: str, node_id: str, step_type: str) -> AbstractContextManager[None]:
        """Span one chain node."""

    def llm_call(
        self, execution_id: str, node_id: str, llm: Any
    ) -> AbstractContextManager[CallSpan]:
        """Span one model call."""

    def tool_call(self, execution_id: str, node_id: str, tool: str) -> AbstractContextManager[None]:
        """Span one tool call."""

    def trace_id(self) -> str | None:
        """The current trace id as 32 hex digits, or ``None`` outside any span."""

    def run_outcome(self, status: str, error: str | None) -> None:
        """Record how the current run span's drive ended (``completed``/``paused``/``failed``)."""


class _NoCall:
    def response(self, response: Any) -> None:
        return None


_NULL: AbstractContextManager[None] = nullcontext()
_NULL_CALL: AbstractContextManager[CallSpan] = nullcontext(_NoCall())
_backend: TracingBackend | None = None


def set_backend(backend: TracingBackend | None) -> None:
    """Install (or, with ``None``, remove) the tracing backend the hooks call."""
    global _backend
    _backend = backend


def current_backend() -> TracingBackend | None:
    """The installed backend, or ``None`` while tracing is off."""
    return _backend


def run(kind: str, name: str, execution_id: str) -> AbstractContextManager[None]:
    """Span one drive of a run; a no-op while tracing is off."""
    backend = _backend
    return _NULL if backend is None else backend.run(kind, name, execution_id)


def step(execution_id: str, node_id: str, step_type: str = "node") -> AbstractContextManager[None]:
    """Span one chain node; a no-op while tracing is off."""
    backend = _backend
    return _NULL if backend is None else backend.step(execution_id, node_id, step_type)


def llm_call(execution_id: str, node_id: str, llm: Any) -> AbstractContextManager[CallSpan]:
    """Span one model call; yields a :class:`CallSpan` to report the response to."""
    backend = _backend
    return _NULL_CALL if backend is None else backend.llm_call(execution_id, node_id, llm)


def tool_call(execution_id: str, node_id: str, tool: str) -> AbstractContextManager[None]:
    """Span one tool call; a no-op while tracing is off."""
    backend = _backend
    return _NULL if backend is None else backend.tool_call(execution_id, node_id, tool)


def trace_id_of(checkpoint: Checkpoint) -> str | None:
    """The trace id a traced drive stored on ``checkpoint``, or ``None``."""
    out = checkpoint.node_output
    if isinstance(out, dict):
        value = out.get(TRACE_ID_KEY)
        if isinstance(value, str):
            return value
    return None


def stamping(store: Checkpointer) -> Checkpointer:
    """``store`` itself while tracing is off; else a view of it that stamps the current trace
    id on every checkpoint written through it and reports the run's outcome to the run span."""
    backend = _backend
    if backend is None or isinstance(store, _StampingStore):
        return store
    return _StampingStore(store, backend)


def _stamp(backend: TracingBackend, cp: Checkpoint) -> Checkpoint:
    trace_id = backend.trace_id()
    out = cp.node_output
    if trace_id is None or not (out is None or isinstance(out, dict)):
        return cp
    return dataclasses.replace(cp, node_output={**(out or {}), TRACE_ID_KEY: trace_id})


class _StampingStore:
    """Delegates everything to the wrapped store; stamps checkpoints on the way in."""

    def __init__(self, inner: Checkpointer, backend: TracingBackend) -> None:
        self._inner = inner
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return repr(self._inner)

    def _outcome(self, run_status: str | None, error: str | None) -> None:
        if run_status is not None:
            self._backend.run_outcome(run_status, error)

    def put(self, checkpoint: Checkpoint, **kw: Any) -> Checkpoint:
        self._outcome(kw.get("run_status"), kw.get("error"))
        return self._inner.put(_stamp(self._backend, checkpoint), **kw)

    async def aput(self, checkpoint: Checkpoint, **kw: Any) -> Checkpoint:
        self._outcome(kw.get("run_status"), kw.get("error"))
        return await self._inner.aput(_stamp(self._backend, checkpoint), **kw)

    def record_interrupt(self, checkpoint: Checkpoint, **kw: Any) -> PendingInterrupt:
        self._outcome("paused", None)
        return self._inner.record_interrupt(_stamp(self._backend, checkpoint), **kw)

    async def arecord_interrupt(self, checkpoint: Checkpoint, **kw: Any) -> PendingInterrupt:
        self._outcome("paused", None)
        return await self._inner.arecord_interrupt(_stamp(self._backend, checkpoint), **kw)
