"""Chains used by tests, importable from child processes.

Side effects go to append-only files named by environment variables so a parent process can
count them after killing a child:

- ``TETHER_TEST_LEDGER``: one line per ``@idempotent`` charge (must end up exactly once each);
- ``TETHER_TEST_STEPS``: one line per node execution (raw, not idempotent).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tether import Chain, Checkpointer, idempotent, interrupt


def _append(env: str, line: str) -> None:
    path = os.environ.get(env)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]
    except FileNotFoundError:
        return []


@idempotent
def charge(order_id: str, amount: int) -> dict[str, Any]:
    _append("TETHER_TEST_LEDGER", f"charge {order_id} {amount}")
    return {"charged": amount, "order_id": order_id}


def validate(state: dict[str, Any]) -> dict[str, Any]:
    _append("TETHER_TEST_STEPS", "validate")
    return {"valid": state["amount"] > 0, "log": [*state.get("log", []), "validate"]}


def do_charge(state: dict[str, Any]) -> dict[str, Any]:
    _append("TETHER_TEST_STEPS", "charge")
    receipt = charge(state["order_id"], state["amount"])
    return {"receipt": receipt, "log": [*state["log"], "charge"]}


def review(state: dict[str, Any]) -> dict[str, Any]:
    _append("TETHER_TEST_STEPS", "review")
    answer = interrupt("manager_approval", {"amount": state["amount"]})
    return {"approved": answer.approved, "log": [*state["log"], "review"]}


def notify(state: dict[str, Any]) -> dict[str, Any]:
    _append("TETHER_TEST_STEPS", "notify")
    return {"notified": True, "log": [*state["log"], "notify"]}


def reject(state: dict[str, Any]) -> dict[str, Any]:
    _append("TETHER_TEST_STEPS", "reject")
    return {"rejected": True, "log": [*state["log"], "reject"]}


def orders_chain(store: Checkpointer, *, review_over: int = 100) -> Chain:
    """validate -> charge -> (review if amount > review_over) -> notify; invalid -> reject."""
    chain = Chain("orders", store, claim_lease_seconds=30)
    chain.add_node("validate", validate)
    chain.add_node("charge", do_charge)
    chain.add_node("review", review)
    chain.add_node("notify", notify)
    chain.add_node("reject", reject)
    chain.add_edge("validate", "charge", condition=lambda s: s["valid"])
    chain.add_edge("validate", "reject")
    chain.add_edge("charge", "review", condition=lambda s: s["amount"] > review_over)
    chain.add_edge("charge", "notify")
    chain.add_edge("review", "notify", condition=lambda s: s["approved"])
    chain.add_edge("review", "reject")
    return chain


def loop_chain(store: Checkpointer, *, bound: int = 5) -> Chain:
    """step -> check -> step ... bounded by ``bound`` cycles; then done."""
    chain = Chain("loop", store)

    def step(state: dict[str, Any]) -> dict[str, Any]:
        _append("TETHER_TEST_STEPS", f"step {state.get('i', 0)}")
        return {"i": state.get("i", 0) + 1}

    def check(state: dict[str, Any]) -> dict[str, Any]:
        return {"checked": state.get("checked", 0) + 1}

    def done(state: dict[str, Any]) -> dict[str, Any]:
        return {"done": True}

    chain.add_node("step", step)
    chain.add_node("check", check)
    chain.add_node("done", done)
    chain.add_edge("step", "check")
    chain.add_edge("check", "step", max_iterations=bound)
    chain.add_edge("check", "done")
    return chain


def chunk_text(i: int) -> str:
    """1 KB of text, different for every step ``i``."""
    return (f"{i:08d}" * 128)[:1024]


def chunks_chain(
    store: Checkpointer, *, steps: int = 2000, on_step: Callable[[], None] | None = None
) -> Chain:
    """``step`` ``steps`` times, each writing a new 1 KB ``chunk`` (the state stays 1 KB);
    then ``done``. ``on_step`` is called at the start of each step."""
    chain = Chain("chunks", store)

    def step(state: dict[str, Any]) -> dict[str, Any]:
        if on_step is not None:
            on_step()
        i = state.get("i", 0) + 1
        return {"i": i, "chunk": chunk_text(i)}

    chain.add_node("step", step)
    chain.add_node("done", lambda state: {"done": True})
    chain.add_edge("step", "step", condition=lambda s: s["i"] < steps, max_iterations=steps)
    chain.add_edge("step", "done")
    return chain


CHAINS: dict[str, Callable[[Checkpointer], Chain]] = {
    "orders": orders_chain,
    "loop": loop_chain,
    "chunks": chunks_chain,
}
