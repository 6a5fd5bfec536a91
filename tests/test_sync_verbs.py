"""The sync verbs (``run``/``resume``/``fork``) run on one event loop per thread, kept between
calls (``tether.engine.sync.run_sync``)."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import pytest

from tether import Chain


def _loop_chain(store: Any, seen: list[asyncio.AbstractEventLoop]) -> Chain:
    async def note(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(asyncio.get_running_loop())
        return {"n": state.get("n", 0) + 1}

    chain = Chain("loops", store)
    chain.add_node("note", note)
    return chain


def test_sync_verbs_of_one_thread_share_a_loop_and_each_thread_has_its_own(store):
    seen: list[asyncio.AbstractEventLoop] = []
    chain = _loop_chain(store, seen)
    assert chain.run({}).status == "completed"
    assert chain.run({}).status == "completed"
    assert seen[0] is seen[1] and not seen[0].is_closed()

    thread = threading.Thread(target=lambda: chain.run({}))
    thread.start()
    thread.join()
    assert seen[2] is not seen[0]
    del thread
    gc.collect()
    # The ended thread's loop is closed once its thread is gone; this thread's stays open.
    assert seen[2].is_closed() and not seen[0].is_closed()


def test_a_keyboard_interrupt_mid_verb_leaves_nothing_running_on_the_loop(store):
    """Ctrl-C lands between two callbacks of the loop: the interrupted drive is cancelled
    there and then, not continued by the thread's next sync call; the run stays resumable."""
    continued: list[str] = []

    def interrupt() -> None:
        raise KeyboardInterrupt

    async def slow(state: dict[str, Any]) -> dict[str, Any]:
        asyncio.get_running_loop().call_soon(interrupt)
        await asyncio.sleep(0.05)
        continued.append(state["tag"])
        return {"done": True}

    chain = Chain("ctrl-c", store)
    chain.add_node("slow", slow)
    with pytest.raises(KeyboardInterrupt):
        chain.run({"tag": "first"}, execution_id="ctrl-c-1")
    other = Chain("other", store)
    other.add_node("quick", lambda s: {"ok": True})
    assert other.run({}).status == "completed"
    assert continued == []
    assert store.get_run("ctrl-c-1").status == "running"

    calm = Chain("ctrl-c", store)

    async def calm_slow(state: dict[str, Any]) -> dict[str, Any]:
        continued.append(state["tag"])
        return {"done": True}

    calm.add_node("slow", calm_slow)
    assert calm.resume("ctrl-c-1").status == "completed"
    assert continued == ["first"]


def test_tasks_a_node_leaves_running_end_with_its_verb(store):
    """As with ``asyncio.run``: a fire-and-forget task does not outlive the verb that made it
    (it would run again inside every later sync call of the thread)."""
    ticks: list[int] = []
    cancelled: list[bool] = []

    async def reporter() -> None:
        try:
            while True:
                ticks.append(1)
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def start(state: dict[str, Any]) -> dict[str, Any]:
        asyncio.get_running_loop().create_task(reporter())
        return {"started": True}

    chain = Chain("leftover", store)
    chain.add_node("start", start)
    assert chain.run({}).status == "completed"
    assert cancelled == [True]
    seen = len(ticks)
    quiet = Chain("quiet", store)
    quiet.add_node("only", lambda s: {"ok": True})
    assert quiet.run({}).status == "completed"
    assert len(ticks) == seen


def test_an_ended_thread_gives_its_loop_back_even_while_its_thread_object_is_kept(store):
    import os

    chain = Chain("fds", store)
    chain.add_node("only", lambda s: {"ok": True})
    chain.run({})  # this thread's loop and the store's connections exist before counting
    before = len(os.listdir("/proc/self/fd"))
    kept = []
    for _ in range(40):
        t = threading.Thread(target=lambda: chain.run({}))
        t.start()
        t.join()
        kept.append(t)
    grown = len(os.listdir("/proc/self/fd")) - before
    # Each ended thread's loop (an epoll fd and a self-pipe pair) is closed at its end; what
    # may stay is the store's per-thread connection files (SQLite) that the store reuses.
    assert grown < 40 * 3, grown


def test_starting_a_run_with_the_id_of_a_live_drive_is_refused_and_leaves_it_alone(store):
    """A retried start with the same execution_id while the first drive is still running in
    this process: the retry gets ConfigurationError, the first drive keeps its lease and
    completes (it lost its fence and then its lease before)."""
    from tether.errors import ConfigurationError

    started = threading.Event()
    go_on = threading.Event()
    chain = Chain("dup", store)

    def first(state: dict[str, Any]) -> dict[str, Any]:
        started.set()
        go_on.wait(10)
        return {"first": True}

    chain.add_node("first", first)
    chain.add_node("second", lambda s: {"second": True})
    chain.add_edge("first", "second")
    out: dict[str, Any] = {}

    def drive() -> None:
        out["result"] = chain.run({}, execution_id="dup-1")

    t = threading.Thread(target=drive)
    t.start()
    assert started.wait(10)
    owner = store.get_run("dup-1").owner
    assert owner is not None and store.fenced_by("dup-1") == owner
    for _ in range(3):
        with pytest.raises(ConfigurationError):
            chain.run({}, execution_id="dup-1")
    # The live drive's commits are still fenced on its own lease.
    assert store.fenced_by("dup-1") == owner == store.get_run("dup-1").owner
    go_on.set()
    t.join(10)
    assert out["result"].status == "completed"
    run = store.get_run("dup-1")
    assert run.status == "completed" and run.owner is None
