"""Step timeouts and run deadlines (docs/design.md §12, "Step timeouts").

A step with a limit runs under :func:`bounded`:

- an ``async`` step (or a sync function returning an awaitable) is awaited under
  ``asyncio.wait_for``: at its limit it is cancelled at its current ``await`` and
  :class:`~tether.errors.StepTimeoutError` is raised in its place;
- a synchronous step runs in a daemon thread of its own (with a copy of the caller's context
  variables, so ``interrupt()``, ``@idempotent`` and the run's id work inside it) while the
  event loop waits for it. Python cannot stop a thread: at the limit the step is **abandoned**:
  the drive fails the run, and whatever the thread returns later is never committed. A worker
  is never blocked by it (the step does not hold its event loop).

A step without a limit runs as before (a sync node directly on the loop).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

from . import _flights
from .errors import ConfigurationError, RunDeadlineExceeded, StepTimeoutError

__all__ = ["Deadline", "bounded", "check_timeout"]


def check_timeout(value: Any, what: str) -> float | None:
    """``value`` as a limit in seconds (``None``: no limit).

    Raises:
        ConfigurationError: not ``None`` and not a positive number.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"{what} must be a number of seconds > 0 or None, got {value!r}")
    return float(value)


class Deadline:
    """A run's deadline: ``deadline_seconds`` after its creation (a ``time.time()`` epoch).

    Args:
        started_at: when the run was created (epoch seconds, UTC).
        deadline_seconds: the run's limit; ``None``: no deadline.
    """

    __slots__ = ("deadline_seconds", "due")

    def __init__(self, started_at: float, deadline_seconds: float | None) -> None:
        self.deadline_seconds = deadline_seconds
        self.due = None if deadline_seconds is None else started_at + deadline_seconds

    def left(self) -> float | None:
        """Seconds left (``None``: no deadline; may be zero or negative)."""
        return None if self.due is None else self.due - time.time()

    def exceeded(self, execution_id: str, node_id: str | None) -> RunDeadlineExceeded:
        return RunDeadlineExceeded(
            f"run {execution_id!r} passed its deadline of {self.deadline_seconds:g} s"
            + (f" (at step {node_id!r})" if node_id else "")
            + "; the run failed (fork it to run again)",
            step="run",
            timeout_seconds=self.deadline_seconds or 0.0,
            execution_id=execution_id,
            node_id=node_id,
        )


def _settle(fut: asyncio.Future[tuple[bool, Any]], outcome: tuple[bool, Any]) -> None:
    if not fut.done():
        fut.set_result(outcome)


async def _in_thread(fn: Callable[..., Any], args: tuple[Any, ...], name: str) -> Any:
    """``fn(*args)`` in a daemon thread, awaited without holding the event loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[tuple[bool, Any]] = loop.create_future()
    ctx = contextvars.copy_context()
    step = _flights.StepThread()
    ctx.run(_flights.step_thread.set, step)

    def work() -> None:
        try:
            outcome: tuple[bool, Any] = (True, ctx.run(fn, *args))
        except BaseException as exc:  # an InterruptSignal too: re-raised in the drive
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(_settle, fut, outcome)
        except RuntimeError:  # the loop closed: the drive gave up on this step long ago
            pass

    thread = threading.Thread(target=work, name=f"tether-step:{name}", daemon=True)
    thread.start()
    try:
        ok, value = await asyncio.shield(fut)
    except asyncio.CancelledError:  # abandoned (its timeout, the run's deadline, a cancel)
        _flights.abandon(step)
        raise
    if not ok:
        raise value
    return value


async def bounded(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    timeout_seconds: float | None,
    step: str,
    execution_id: str,
    node_id: str | None = None,
    deadline: Deadline | None = None,
) -> Any:
    """Call ``fn(*args)`` (sync or async) within its limit and the run's deadline.

    Args:
        timeout_seconds: the step's own limit (``None``: none).
        step: the step in words for the error: ``node 'charge'``, ``tool 'search'``.
        deadline: the run's deadline; the step gets at most what is left of it.

    Raises:
        StepTimeoutError: the step's own limit passed first.
        RunDeadlineExceeded: the run's deadline passed first (or had passed already).
    """
    left = None if deadline is None else deadline.left()
    if left is not None and left <= 0:
        raise deadline.exceeded(execution_id, node_id)  # type: ignore[union-attr]
    limit = timeout_seconds if left is None else min(left, timeout_seconds or left)
    if limit is None:
        out = fn(*args)
        return await out if inspect.isawaitable(out) else out
    try:
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
        ):
            return await asyncio.wait_for(fn(*args), limit)
        started = time.monotonic()
        out = await asyncio.wait_for(_in_thread(fn, args, step), limit)
        if inspect.isawaitable(out):  # a sync function that returned a coroutine
            out = await asyncio.wait_for(out, max(0.0, limit - (time.monotonic() - started)))
        return out
    except TimeoutError:
        if timeout_seconds is None or (left is not None and left < timeout_seconds):
            raise deadline.exceeded(execution_id, node_id) from None  # type: ignore[union-attr]
        raise StepTimeoutError(
            f"{step} of run {execution_id!r} ran past its timeout of {timeout_seconds:g} s"
            + (
                "; it was cancelled"
                if inspect.iscoroutinefunction(fn)
                else " and was abandoned (a synchronous step cannot be stopped)"
            )
            + "; the run failed and stays resumable",
            step=step,
            timeout_seconds=timeout_seconds,
            execution_id=execution_id,
            node_id=node_id,
        ) from None
