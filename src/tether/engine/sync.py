"""The sync twins of the async verbs: one kept event loop per thread runs them."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from .._context import sync_drive
from ..errors import ConfigurationError

__all__ = ["raise_if_cancel_requested", "run_sync"]

T = TypeVar("T")


def raise_if_cancel_requested() -> None:
    """Raise ``asyncio.CancelledError`` if the current task was asked to stop and the request
    was lost on the way.

    CPython 3.11's ``asyncio.wait_for`` returns the inner result when the inner future finished
    as the cancel landed (gh-86296), and psycopg_pool waits for a free connection that way: the
    ``CancelledError`` never reaches the caller, but the request stays counted on the task
    (``Task.cancelling()``). Loops that must stop when cancelled (a worker's claim loop, a
    drive between steps) call this after their awaits. A no-op outside a task.

    Raises:
        asyncio.CancelledError: a cancel of the current task is pending.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _finish_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a verb left on its thread's loop (a node's fire-and-forget task) and
    let them finish, as ``asyncio.run`` does when it returns: none outlives its verb."""
    tasks = asyncio.all_tasks(loop)
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


class _LoopHolder:
    """Owns one thread's sync loop and closes it when the thread's locals go, that is when
    the thread ends (not when its ``Thread`` object is collected, which a caller keeping the
    object would delay indefinitely, holding the loop's file descriptors)."""

    __slots__ = ("loop", "pid")

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()

    def close(self) -> None:
        loop = self.loop
        if not loop.is_closed() and not loop.is_running():
            loop.close()

    def __del__(self) -> None:
        if not sys.is_finalizing():
            with contextlib.suppress(Exception):
                self.close()


class _ThreadLoop(threading.local):
    holder: _LoopHolder | None = None


_thread_loop = _ThreadLoop()


def _close_main_loop() -> None:
    """At exit: close the main thread's sync loop while the interpreter is whole."""
    holder = _thread_loop.holder
    if holder is not None and holder.pid == os.getpid():
        holder.close()


atexit.register(_close_main_loop)


def _sync_loop() -> asyncio.AbstractEventLoop:
    """This thread's loop for sync verbs. One loop per thread and process, kept between calls:
    making and closing a loop per call (``asyncio.run``) costs ~0.25 ms, more than a step.
    A forked child leaves its parent's loop alone and makes its own."""
    holder = _thread_loop.holder
    if holder is None or holder.pid != os.getpid() or holder.loop.is_closed():
        holder = _thread_loop.holder = _LoopHolder()
    return holder.loop


def run_sync(coro: Coroutine[Any, Any, T], *, blocking_store: bool = True) -> T:
    """Run an async runner verb from sync code, on this thread's sync loop.

    Args:
        coro: the verb's coroutine.
        blocking_store: let the store serve the verb with blocking calls (see
            :data:`tether._context.sync_drive`) on this thread's kept loop; a worker, which
            overlaps many runs on the loop, passes ``False`` and gets a loop of its own.

    Raises:
        ConfigurationError: called from inside a running event loop (use the ``a`` verb).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise ConfigurationError(
            "the sync verbs (run/resume/fork) cannot be called inside a running event loop "
            "(a synchronous node runs on it too): await arun/aresume/afork instead, from an "
            "async def node if need be"
        )
    box: list[T] = []

    async def main() -> None:
        # A result that holds a long run's state is never repr'd by the loop's debug hooks.
        sync_drive.set(blocking_store)
        box.append(await coro)

    if not blocking_store:
        # A worker's loop holds async pools and tasks for its whole life: its own loop,
        # closed with everything on it when the worker returns.
        asyncio.run(main())
        return box[0]
    loop = _sync_loop()
    task = loop.create_task(main())
    try:
        loop.run_until_complete(task)
    except BaseException:
        if not task.done():  # a KeyboardInterrupt between two steps of the loop
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        with contextlib.suppress(BaseException):
            _finish_leftovers(loop)
        raise
    _finish_leftovers(loop)
    return box[0]
