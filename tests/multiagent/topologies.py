"""Agents, swarms and supervisors shared by the multi-agent tests and their child processes.

Every tool invocation appends ``{"tool": name, "arguments": {...}}`` to the JSON-lines file at
``$TOOL_LOG`` (via tests.agent.agents), so a test can count invocations across processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.agent.agents import _log, add, approve, lookup
from tether.agent import Agent, tool
from tether.agent.supervisor import Supervisor, Worker
from tether.agent.swarm import Swarm
from tether.interrupt import interrupt
from tether.llm.base import LLM
from tether.store.base import Checkpointer

TRIAGE_PROMPT = "You triage."
BILLING_PROMPT = "You do billing."
BOSS_PROMPT = "You supervise."
RESEARCH_PROMPT = "You research."
APPROVER_PROMPT = "You get approvals."
AUDITOR_PROMPT = "You audit."


@tool
def sign_off(item: str) -> str:
    """Ask an auditor to sign an item off."""
    _log("sign_off", item=item)
    answer = interrupt("audit_sign_off", {"item": item})
    return "signed" if answer.approved else "refused"


def make_swarm(llms: Mapping[str, LLM], store: Checkpointer, **kwargs: Any) -> Swarm:
    """``desk``: ``triage`` (lookup) hands to ``billing`` (add, approve)."""
    triage = Agent(
        "triage",
        llm=llms["triage"],
        tools=[lookup],
        system_prompt=TRIAGE_PROMPT,
        checkpointer=store,
    )
    billing = Agent(
        "billing",
        llm=llms["billing"],
        tools=[add, approve],
        system_prompt=BILLING_PROMPT,
        checkpointer=store,
    )
    return Swarm("desk", [triage, billing], entrypoint="triage", checkpointer=store, **kwargs)


def make_supervisor(llms: Mapping[str, LLM], store: Checkpointer) -> Supervisor:
    """``boss`` with workers ``research`` (lookup), ``approve`` (approve), ``audit`` (sign_off)."""
    research = Agent(
        "researcher",
        llm=llms["research"],
        tools=[lookup],
        system_prompt=RESEARCH_PROMPT,
        checkpointer=store,
    )
    approver = Agent(
        "approver",
        llm=llms["approve"],
        tools=[approve],
        system_prompt=APPROVER_PROMPT,
        checkpointer=store,
    )
    auditor = Agent(
        "auditor",
        llm=llms["audit"],
        tools=[sign_off],
        system_prompt=AUDITOR_PROMPT,
        checkpointer=store,
    )
    return Supervisor(
        "boss",
        llm=llms["boss"],
        workers=[
            Worker(research, "research", "looks orders up"),
            Worker(approver, "approve", "gets amounts approved"),
            Worker(auditor, "audit", "gets items signed off"),
        ],
        system_prompt=BOSS_PROMPT,
        checkpointer=store,
    )


def system_prompt_of(body: dict[str, Any]) -> str | None:
    """The system prompt of a recorded OpenAI or Anthropic request body."""
    if "system" in body:
        system = body["system"]
        return system if isinstance(system, str) else system[0]["text"]
    first = body["messages"][0]
    return first["content"] if first["role"] == "system" else None
