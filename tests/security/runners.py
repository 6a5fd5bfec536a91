"""Runners whose every name, id, key and reason comes from the caller: fed injection strings
by the security tests."""

from __future__ import annotations

from typing import Any

from tether import Chain, Checkpointer, idempotent, interrupt
from tether.agent import Agent
from tether.testing import ScriptedLLM

INJECTIONS = (
    "' OR '1'='1",
    "x'); DROP TABLE runs; --",
    'x"; DROP TABLE checkpoints; --',
    "1; DELETE FROM pending_interrupts WHERE 1=1; --",
    "%s%s%s %(x)s %% {schema}",
    "\\'; TRUNCATE idempotency_cache; --\x00",
    "$1 $$; DROP SCHEMA public CASCADE; $$",
)


@idempotent(key=lambda text: f"key {text}")
def effect(text: str) -> str:
    return text


def injection_chain(store: Checkpointer | None, text: str = "plain") -> Chain:
    """``start`` -> ``ask`` (pauses), with ``text`` in the chain name, node ids, state keys,
    the interrupt reason and context, and an idempotency key."""
    chain = Chain(f"inj {text}", store)
    start, ask = f"start {text}", f"ask {text}"

    def asking(state: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt(f"reason {text}", {"why": text})
        return {f"approved {text}": answer.approved, "effect": effect(text)}

    chain.add_node(start, lambda s: {f"key {text}": text})
    chain.add_node(ask, asking)
    chain.add_edge(start, ask)
    return chain


def injection_agent(store: Checkpointer, text: str) -> Agent:
    name = f"agent {text}".replace("/", "|")
    return Agent(
        name,
        llm=ScriptedLLM([f"answer {text}"], resume_aware=True),
        system_prompt=text,
        checkpointer=store,
    )
