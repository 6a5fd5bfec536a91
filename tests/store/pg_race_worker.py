"""The chain and the long-lived worker processes of the Postgres resume race.

Each worker connects once (``tether.connect(url)``) and keeps one event loop, so its pool and
connection live across repetitions; per repetition it takes a run id, waits at a barrier with
every other worker, tries to resume the run, and reports what it got.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import tether
from tether import Chain, Checkpointer, idempotent, interrupt
from tether.store.postgres import PostgresCheckpointer

LEDGER_ENV = "TETHER_TEST_RACE_LEDGER"


@idempotent
async def ship(order: str) -> str:
    """The side effect the winner performs once per run (async, so a worker needs only its
    async pool's one connection)."""
    path = os.environ.get(LEDGER_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"ship {order}\n")
    return f"shipped {order}"


def _prepare(state: dict[str, Any]) -> dict[str, Any]:
    return {"prepared": True}


def _approve(state: dict[str, Any]) -> dict[str, Any]:
    answer = interrupt("approve", {"order": state["order"]})
    return {"approved": answer.approved, "by": answer.data}


async def _ship(state: dict[str, Any]) -> dict[str, Any]:
    return {"receipt": await ship(state["order"])}


def approval_chain(store: Checkpointer) -> Chain:
    """prepare -> approve (pauses for a human) -> ship."""
    chain = Chain("race-approval", store, claim_lease_seconds=30)
    chain.add_node("prepare", _prepare)
    chain.add_node("approve", _approve)
    chain.add_node("ship", _ship)
    chain.add_edge("prepare", "approve")
    chain.add_edge("approve", "ship")
    return chain


def worker(index: int, url: str, ledger: str, barrier: Any, jobs: Any, results: Any) -> None:
    """Resume each run id received on ``jobs`` at the barrier; put ``(index, outcome)``."""
    os.environ[LEDGER_ENV] = ledger  # a forkserver child has the forkserver's environment
    store = tether.connect(url, min_size=1, max_size=2)
    assert isinstance(store, PostgresCheckpointer)
    chain = approval_chain(store)
    loop = asyncio.new_event_loop()
    try:
        try:
            loop.run_until_complete(store.aget_run("warm-up"))  # open the pool before racing
        except BaseException as exc:
            results.put((index, f"startup failed: {type(exc).__name__}: {exc}"))
            raise
        results.put((index, "ready"))
        while (eid := jobs.get()) is not None:
            outcome: str
            try:
                barrier.wait(timeout=60)
                result = loop.run_until_complete(
                    chain.aresume(eid, tether.Resume(approved=True, data=f"worker-{index}"))
                )
                outcome = result.status
            except tether.AlreadyResumed:
                outcome = "AlreadyResumed"
            except BaseException as exc:  # anything else is a failure of the race
                outcome = f"{type(exc).__name__}: {exc}"
            results.put((index, outcome))
    finally:
        loop.run_until_complete(store.aclose())
        loop.close()
