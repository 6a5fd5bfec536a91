"""The runners of the crash matrix, and the deterministic "model" behind the LLM stub.

Each scenario builds one runner with side effects that a parent process can count after
killing a child:

- ``$TETHER_TEST_STEPS``: one line per node or tool execution (``node:<id>`` / ``tool:<name>
  <json args>``), written before the step returns;
- ``$TETHER_TEST_LEDGER``: one line per ``@idempotent`` charge body, holding its idempotency
  key (must end up exactly once per key, except in the documented at-least-once window).

Every scenario pauses once for a human (a chain node or a tool calls ``interrupt()``), so the
matrix also crashes resumers right after they claim the answer.

The model answers by :func:`reply_for`: a function of the request body alone (which agent is
asking, by system prompt, and how many assistant turns the history already holds). A model
that is asked again after a crash therefore gives the same answer, whichever process asks,
and tool call ids are fixed, so a crashed run can be compared with a crash-free one exactly.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tether import Chain, interrupt
from tether._context import current_execution_id
from tether.agent import Agent, tool
from tether.agent.supervisor import Supervisor, Worker
from tether.agent.swarm import Swarm
from tether.idempotent import current_idempotency_key, idempotent
from tether.llm.base import LLM
from tether.store.base import Checkpointer

SOLO_PROMPT = "You are solo."
MULTI_PROMPT = "You are multi."
TRIAGE_PROMPT = "You triage."
BILLING_PROMPT = "You do billing."
BOSS_PROMPT = "You supervise."
RESEARCH_PROMPT = "You research."
APPROVER_PROMPT = "You get approvals."

# Which provider SDK each scenario's models speak (both are covered).
PROVIDER = {
    "chain": None,
    "agent_one_tool": "openai",
    "agent_many_tools": "anthropic",
    "swarm": "openai",
    "supervisor": "anthropic",
    "chain_with_agent": "openai",
}
KINDS = tuple(PROVIDER)


def _append(env: str, line: str) -> None:
    path = os.environ.get(env)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]
    except FileNotFoundError:
        return []


@idempotent
def charge(order_id: str, amount: int) -> dict[str, Any]:
    _append("TETHER_TEST_LEDGER", f"{current_execution_id()} {current_idempotency_key()}")
    return {"charged": amount, "order_id": order_id}


# --- tools ----------------------------------------------------------------------------------
def _log_tool(name: str, **arguments: Any) -> None:
    _append("TETHER_TEST_STEPS", f"tool:{name} {json.dumps(arguments, sort_keys=True)}")


@tool
def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    _log_tool("lookup", order_id=order_id)
    return {"order_id": order_id, "status": "shipped"}


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    _log_tool("add", a=a, b=b)
    return a + b


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an amount (charges the payment provider once)."""
    _log_tool("refund", order_id=order_id, amount=amount)
    receipt = charge(order_id, amount)
    return f"refunded {receipt['charged']} on {receipt['order_id']}"


@tool
def approve(amount: int) -> str:
    """Ask a human to approve an amount."""
    _log_tool("approve", amount=amount)
    answer = interrupt("manager_approval", {"amount": amount})
    return "approved" if answer.approved else "rejected"


# --- the model ------------------------------------------------------------------------------
def _call(name: str, turn: int, index: int, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "id": f"toolu_{turn}_{index}"}


# system prompt -> {assistant turns already in the history -> answer}
POLICY: dict[str, dict[int, dict[str, Any]]] = {
    SOLO_PROMPT: {
        0: {"tool_calls": [_call("lookup", 0, 0, order_id="A-1")]},
        1: {"tool_calls": [_call("refund", 1, 0, order_id="A-1", amount=30)]},
        2: {"tool_calls": [_call("approve", 2, 0, amount=30)]},
        3: {"text": "refund of 30 done"},
    },
    MULTI_PROMPT: {
        0: {
            "tool_calls": [
                _call("lookup", 0, 0, order_id="A-1"),
                _call("refund", 0, 1, order_id="A-1", amount=30),
                _call("add", 0, 2, a=2, b=3),
            ]
        },
        # the pause in the first call answers the second with "did not run"
        1: {"tool_calls": [_call("approve", 1, 0, amount=30), _call("add", 1, 1, a=1, b=1)]},
        2: {
            "tool_calls": [
                _call("add", 2, 0, a=4, b=4),
                _call("refund", 2, 1, order_id="B-2", amount=5),
            ]
        },
        3: {"text": "all done"},
    },
    TRIAGE_PROMPT: {
        0: {"tool_calls": [_call("lookup", 0, 0, order_id="A-1")]},
        1: {"tool_calls": [_call("transfer_to_billing", 1, 0)]},
    },
    BILLING_PROMPT: {  # billing sees triage's two turns in the shared conversation
        2: {"tool_calls": [_call("refund", 2, 0, order_id="A-1", amount=30)]},
        3: {"tool_calls": [_call("approve", 3, 0, amount=30), _call("add", 3, 1, a=1, b=2)]},
        4: {"text": "billing done"},
    },
    BOSS_PROMPT: {
        0: {
            "tool_calls": [
                _call("delegate_to_research", 0, 0, task="look up A-1"),
                _call("delegate_to_approve", 0, 1, task="refund 30 on A-1"),
            ]
        },
        1: {"text": "boss done"},
    },
    RESEARCH_PROMPT: {
        0: {"tool_calls": [_call("lookup", 0, 0, order_id="A-1")]},
        1: {"text": "A-1 shipped"},
    },
    APPROVER_PROMPT: {
        0: {"tool_calls": [_call("refund", 0, 0, order_id="A-1", amount=30)]},
        1: {"tool_calls": [_call("approve", 1, 0, amount=30)]},
        2: {"text": "refund approved"},
    },
}


def system_prompt_of(body: dict[str, Any]) -> str | None:
    """The system prompt of an OpenAI or Anthropic request body."""
    if "system" in body:
        system = body["system"]
        return system if isinstance(system, str) else system[0]["text"]
    first = body["messages"][0]
    return first["content"] if first["role"] == "system" else None


def reply_for(body: dict[str, Any]) -> dict[str, Any]:
    """The stub's answer to a request (see the module docstring)."""
    prompt = system_prompt_of(body)
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    try:
        item = POLICY[prompt or ""][turns]
    except KeyError:
        return {"status": 400, "error": f"no scripted answer for {prompt!r} at turn {turns}"}
    if "messages" in body and "system" not in body:  # OpenAI: call ids are free-form
        item = json.loads(json.dumps(item).replace('"toolu_', '"call_'))
    return item


# --- runners --------------------------------------------------------------------------------
def _agent(name: str, prompt: str, tools: list[Any], llm: LLM, store: Checkpointer) -> Agent:
    return Agent(
        name, llm=llm, tools=tools, system_prompt=prompt, checkpointer=store, claim_lease_seconds=30
    )


def _node(node_id: str, fn: Any) -> Any:
    def run(state: dict[str, Any]) -> dict[str, Any] | None:
        _append("TETHER_TEST_STEPS", f"node:{node_id}")
        return fn(state)

    return run


def _review(state: dict[str, Any]) -> dict[str, Any]:
    answer = interrupt("manager_approval", {"amount": state["amount"]})
    return {"approved": answer.approved, "log": [*state["log"], "review"]}


def orders_chain(store: Checkpointer, agent: Agent | None = None) -> Chain:
    """validate -> charge -> review (pauses) -> work <-> check (3 cycles) -> notify, with a
    branch to reject for an invalid order or a refusal; ``agent`` adds a runner node
    ``ask`` between charge and review."""
    chain = Chain("orders" if agent is None else "orders_with_agent", store, claim_lease_seconds=30)
    chain.add_node(
        "validate", _node("validate", lambda s: {"valid": s["amount"] > 0, "log": ["validate"]})
    )

    def do_charge(state: dict[str, Any]) -> dict[str, Any]:
        receipt = charge(state["order_id"], state["amount"])
        return {"receipt": receipt, "log": [*state["log"], "charge"]}

    chain.add_node("charge", _node("charge", do_charge))
    if agent is not None:
        chain.add_node("ask", agent, input_key="question", output_key="answer")
    chain.add_node("review", _node("review", _review))
    chain.add_node("work", _node("work", lambda s: {"i": s.get("i", 0) + 1}))
    chain.add_node("check", _node("check", lambda s: {"log": [*s["log"], f"check{s['i']}"]}))
    chain.add_node("notify", _node("notify", lambda s: {"log": [*s["log"], "notify"]}))
    chain.add_node("reject", _node("reject", lambda s: {"log": [*s["log"], "reject"]}))
    chain.add_edge("validate", "charge", condition=lambda s: s["valid"])
    chain.add_edge("validate", "reject")
    if agent is not None:
        chain.add_edge("charge", "ask")
        chain.add_edge("ask", "review")
    else:
        chain.add_edge("charge", "review")
    chain.add_edge("review", "work", condition=lambda s: s["approved"])
    chain.add_edge("review", "reject")
    chain.add_edge("work", "check")
    chain.add_edge("check", "work", max_iterations=3)
    chain.add_edge("check", "notify")
    return chain


CHAIN_INPUT = {"order_id": "A-1", "amount": 30, "question": "refund A-1"}
AGENT_INPUT = "please refund 30 on order A-1"


def make_runner(kind: str, store: Checkpointer, make_llm: Any) -> Any:
    """The runner of scenario ``kind``; ``make_llm()`` returns a fresh model client."""
    if kind == "chain":
        return orders_chain(store)
    if kind == "chain_with_agent":
        return orders_chain(
            store, _agent("solo", SOLO_PROMPT, [lookup, refund, approve], make_llm(), store)
        )
    if kind == "agent_one_tool":
        return _agent("solo", SOLO_PROMPT, [lookup, refund, approve], make_llm(), store)
    if kind == "agent_many_tools":
        return _agent("multi", MULTI_PROMPT, [lookup, refund, add, approve], make_llm(), store)
    if kind == "swarm":
        triage = _agent("triage", TRIAGE_PROMPT, [lookup], make_llm(), store)
        billing = _agent("billing", BILLING_PROMPT, [refund, approve, add], make_llm(), store)
        return Swarm(
            "desk",
            [triage, billing],
            entrypoint="triage",
            checkpointer=store,
            claim_lease_seconds=30,
        )
    if kind == "supervisor":
        research = _agent("researcher", RESEARCH_PROMPT, [lookup], make_llm(), store)
        approver = _agent("approver", APPROVER_PROMPT, [refund, approve], make_llm(), store)
        return Supervisor(
            "boss",
            llm=make_llm(),
            workers=[
                Worker(research, "research", "looks orders up"),
                Worker(approver, "approve", "refunds with approval"),
            ],
            system_prompt=BOSS_PROMPT,
            checkpointer=store,
            claim_lease_seconds=30,
        )
    raise ValueError(f"unknown scenario kind {kind!r}")


def input_of(kind: str) -> Any:
    return dict(CHAIN_INPUT) if kind.startswith("chain") else AGENT_INPUT


def fork_source_row(kind: str, rows: list[Any]) -> Any:
    """The checkpoint a fork scenario branches from: after ``charge`` for a chain, else the
    first pre-tool row (for a chain with an agent: inside the agent node)."""
    if kind == "chain":
        return next(r for r in rows if r.node_id == "charge")
    return next(r for r in rows if r.step_type == "tool_call")
