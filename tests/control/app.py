"""Runners the run-control tests drive in ``tether worker`` subprocesses
(``--app tests.control.app:app``).

Each step records its effect in the run database's ``ledger`` table through ``@idempotent``
(``tests.workers.app``) and, before it, a ``started`` row, so a test sees which steps began
and which effects landed, and how many times.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from tests.workers.app import _ledger, aeffect, effect
from tether import Chain, Registry

STEP_SECONDS = float(os.environ.get("TETHER_TEST_STEP_SECONDS", "0.3"))
NODES = ("n1", "n2", "n3", "n4")


def _started(eid: str, node: str) -> None:
    _ledger(f"started:{eid}:{node}", eid, node)


def _sync_node(name: str) -> Any:
    def run(state: dict[str, Any]) -> dict[str, Any]:
        _started(state["eid"], name)
        time.sleep(STEP_SECONDS)
        effect(state["eid"], name)
        return {name: True}

    run.__name__ = name
    return run


def _async_node(name: str) -> Any:
    async def run(state: dict[str, Any]) -> dict[str, Any]:
        _started(state["eid"], name)
        await aeffect(state["eid"], name)
        await asyncio.sleep(STEP_SECONDS)
        return {name: True}

    run.__name__ = name
    return run


steps = Chain("steps")
steps_async = Chain("steps_async")
for _name in NODES:
    steps.add_node(_name, _sync_node(_name))
    steps_async.add_node(_name, _async_node(_name))


def _risky(state: dict[str, Any]) -> dict[str, Any]:
    if state.get("kill"):  # the process dies mid-step, as on an OOM kill
        os.kill(os.getpid(), signal.SIGKILL)
    return {"survived": True}


fragile = Chain("fragile")
fragile.add_node("prep", lambda state: {"prepped": True})
fragile.add_node("risky", _risky)


def _slow_sync(state: dict[str, Any]) -> dict[str, Any]:
    _started(state["eid"], "slow")
    if state.get("slow"):
        time.sleep(2.0)  # past its 0.5 s limit: abandoned, never committed
        _ledger(f"finished:{state['eid']}:slow", state["eid"], "slow")
    return {"slow_done": True}


async def _slow_async(state: dict[str, Any]) -> dict[str, Any]:
    _started(state["eid"], "slow")
    try:
        if state.get("slow"):
            await asyncio.sleep(2.0)  # past its 0.5 s limit: cancelled here
    except asyncio.CancelledError:
        _ledger(f"cancelled:{state['eid']}:slow", state["eid"], "slow")
        raise
    return {"slow_done": True}


timed = Chain("timed")
timed.add_node("first", _sync_node("first"))
timed.add_node("slow", _slow_sync, timeout_seconds=0.5)
timed_async = Chain("timed_async")
timed_async.add_node("first", _async_node("first"))
timed_async.add_node("slow", _slow_async, timeout_seconds=0.5)

app = Registry(steps, steps_async, fragile, timed, timed_async)
