"""The sync verbs (``run``/``resume``/``fork``) run on one event loop per thread, kept between
calls (``tether._runner.run_sync``)."""

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
