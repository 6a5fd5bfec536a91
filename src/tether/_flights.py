"""One ``@idempotent`` call at a time per run and key, in this process (docs/design.md §6).

Two calls with one key in one run that overlap (``asyncio.gather``, or threads that carry the
run's context) would both miss the cache and both run the body. So a call first holds its
``(execution_id, key)`` slot: a second call waits until the first is done, then reads the cache
as a later call would (a hit when the first stored its result; the body when it raised). Other
processes need nothing of this: the run's lease keeps them off the run.

A call never waits where waiting might not end: a call nested inside the body that holds its
slot (the body, or a task or thread it started with its context, calls the same key); a sync
call while an ``async`` call holds the slot; and a sync call on a thread running an event loop
(a sync node or tool): blocking that loop could stall the holder (a body that bridges to the
loop) and every timeout the loop keeps. Those go ahead, as every call did before slots existed.
A sync step abandoned at its ``timeout_seconds`` gives up the slots it holds and never holds
one again, nor does anything it started with its context (:func:`abandon`), so a resume in the
same process runs the body again instead of waiting for a thread that may never end.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["StepThread", "abandon", "hold", "hold_async", "holding", "release", "step_thread"]

Slot = tuple[str, str]


class StepThread:
    """A sync step's own thread (``tether._timeouts``), marked when its drive abandons it."""

    __slots__ = ("abandoned",)

    def __init__(self) -> None:
        self.abandoned = False


step_thread: ContextVar[StepThread | None] = ContextVar("tether_step_thread", default=None)
"""Set in the context a sync step's thread runs in (and what that step starts with it)."""


class _Flight:
    """The call holding a slot; what the calls waiting for it wait on."""

    __slots__ = ("done", "is_async", "step", "thread", "waiters")

    def __init__(self, *, is_async: bool) -> None:
        self.is_async = is_async
        self.step = step_thread.get()
        self.thread = threading.get_ident()
        self.done = threading.Event()  # for sync callers on other threads
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []


_lock = threading.Lock()
_flights: dict[Slot, _Flight] = {}
_held: ContextVar[frozenset[Slot]] = ContextVar("tether_idempotent_held", default=frozenset())


def hold(slot: Slot) -> _Flight | None:
    """Hold ``slot`` for a sync call, waiting while another call holds it.

    Returns:
        The flight the caller now holds (give it to :func:`release`), or ``None`` when the call
        goes ahead without it (see the module docstring).
    """
    while True:
        with _lock:
            flight = _take(slot, is_async=False)
            if flight is None:
                return _flights.get(slot)
            if (
                slot in _held.get()
                or flight.is_async
                or flight.thread == threading.get_ident()
                or _on_loop_thread()
            ):
                return None
        flight.done.wait()


def _on_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def hold_async(slot: Slot) -> _Flight | None:
    """Hold ``slot`` for an ``async`` call, awaiting while another call holds it; as
    :func:`hold`."""
    while True:
        with _lock:
            flight = _take(slot, is_async=True)
            if flight is None:
                return _flights.get(slot)
            if slot in _held.get():
                return None
            loop = asyncio.get_running_loop()
            woken: asyncio.Future[None] = loop.create_future()
            flight.waiters.append((loop, woken))
        await woken


def _take(slot: Slot, *, is_async: bool) -> _Flight | None:
    """Under ``_lock``: hold a free ``slot`` (``None``; it is then ``_flights[slot]``, or not
    there at all for a call in an abandoned step, which goes ahead without it), or the flight
    holding it."""
    flight = _flights.get(slot)
    if flight is not None:
        return flight
    step = step_thread.get()
    if step is None or not step.abandoned:
        _flights[slot] = _Flight(is_async=is_async)
    return None


def release(slot: Slot, flight: _Flight) -> None:
    """Give ``slot`` up (unless ``flight`` lost it already: see :func:`abandon`) and wake
    every call waiting for it."""
    with _lock:
        if _flights.get(slot) is flight:
            del _flights[slot]
    _finish(flight)


def abandon(step: StepThread) -> None:
    """Mark ``step`` abandoned by its drive (past its ``timeout_seconds``) and give up the
    slots calls in it hold: the calls waiting for them read the cache and, with no result
    there, run the body themselves; calls it makes later hold nothing."""
    with _lock:
        step.abandoned = True
        gone = [slot for slot, f in _flights.items() if f.step is step]
        flights = [_flights.pop(slot) for slot in gone]
    for flight in flights:
        _finish(flight)


def _finish(flight: _Flight) -> None:
    with _lock:
        flight.done.set()
        waiters, flight.waiters = flight.waiters, []
    for loop, woken in waiters:
        try:
            loop.call_soon_threadsafe(_wake, woken)
        except RuntimeError:  # pragma: no cover - that caller's loop closed under it
            pass


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # a waiter cancelled meanwhile
        woken.set_result(None)


@contextmanager
def holding(slot: Slot) -> Iterator[None]:
    """Mark ``slot`` as held by the body running in this context (and what it starts)."""
    token = _held.set(_held.get() | {slot})
    try:
        yield
    finally:
        _held.reset(token)
