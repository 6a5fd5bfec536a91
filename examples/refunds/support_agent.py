"""A support agent over the same refunds data: it looks a request up, and issues the refund
through an ``@idempotent`` payment that pauses for a manager over a limit.

Offline by default (a scripted model, ``resume_aware`` so a fresh process picks up the script
where the run stopped); with ``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY`` set it talks to the
real provider (model from ``TETHER_DEMO_MODEL``, else a small default). Run it alone with
``python examples/refunds/support_agent.py`` or call :func:`main` from the demo: the run pauses
and this process stops driving it; a second process approves and resumes it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import tether
from tether import current_idempotency_key, idempotent, interrupt
from tether.agent import Agent, tool
from tether.llm import LLM, Message
from tether.testing import ScriptedLLM

HERE = Path(__file__).resolve().parent
DATA = HERE / "refunds.csv"
OUT = HERE / "out"
LEDGER = Path(os.environ.get("SUPPORT_LEDGER", OUT / "support_ledger.jsonl"))
APPROVAL_OVER = 500.0  # refunds above this need a manager
REQUEST_ID = "RF-1015"  # 725.00 USD: over the limit


def _requests() -> dict[str, dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return {row["request_id"]: row for row in csv.DictReader(f)}


@idempotent
def pay_refund(request_id: str, amount: str, currency: str) -> dict[str, str]:
    """The side effect: one ledger line per refund paid (think: a payment provider call)."""
    entry = {
        "request_id": request_id,
        "amount": amount,
        "currency": currency,
        "idempotency_key": current_idempotency_key(),
    }
    LEDGER.parent.mkdir(parents=True, exist_ok=True)
    with LEDGER.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    return {"paid": amount, "currency": currency}


@tool
def lookup_refund(request_id: str) -> dict[str, str]:
    """Look a refund request up.

    Args:
        request_id: the request, e.g. ``"RF-1001"``.
    """
    row = _requests().get(request_id)
    if row is None:
        return {"error": f"no refund request {request_id}"}
    keys = ("request_id", "order_id", "amount", "currency", "reason", "order_date")
    return {k: row[k] for k in keys}


@tool
def issue_refund(request_id: str) -> dict[str, str]:
    """Pay a refund request out in full; large refunds wait for a manager's approval.

    Args:
        request_id: the request to pay, e.g. ``"RF-1001"``.
    """
    row = _requests().get(request_id)
    if row is None:
        return {"error": f"no refund request {request_id}"}
    if float(row["amount"]) > APPROVAL_OVER:
        answer = interrupt(
            "manager_approval",
            {
                "request_id": request_id,
                "amount": row["amount"],
                "currency": row["currency"],
                "reason": row["reason"],
            },
        )
        if not answer.approved:
            return {"status": "declined by manager"}
    return {"status": "refunded", **pay_refund(request_id, row["amount"], row["currency"])}


def make_llm() -> tuple[LLM, str]:
    """The model to use and a label for it: a real provider when a key is set, else a script."""
    model = os.environ.get("TETHER_DEMO_MODEL")
    if os.environ.get("OPENAI_API_KEY"):
        from tether.llm import OpenAIChat

        return OpenAIChat(model or "gpt-4o-mini"), "OpenAI"
    if os.environ.get("ANTHROPIC_API_KEY"):
        from tether.llm import AnthropicMessages

        return AnthropicMessages(model or "claude-3-5-haiku-latest"), "Anthropic"
    script: list[Any] = [
        [{"name": "lookup_refund", "arguments": {"request_id": REQUEST_ID}}],
        [{"name": "issue_refund", "arguments": {"request_id": REQUEST_ID}}],
        f"Your refund for {REQUEST_ID} (725.00 USD) has been approved and paid.",
    ]
    return ScriptedLLM(script, resume_aware=True), "scripted (offline)"


def build(store: tether.Checkpointer, llm: LLM) -> Agent:
    return Agent(
        "support",
        llm=llm,
        tools=[lookup_refund, issue_refund],
        system_prompt="You are a refunds support agent. Look the request up, then issue the "
        "refund. Answer in one short sentence.",
        checkpointer=store,
        max_turns=6,
    )


def _show(messages: list[Message], start: int) -> None:
    for m in messages[start:]:
        if m.role == "assistant" and m.tool_calls:
            for c in m.tool_calls:
                print(f"   model -> {c.name}({json.dumps(c.arguments)})")
        elif m.role == "assistant":
            print(f"   model:  {m.content}")
        elif m.role == "tool":
            print(f"   {m.name} => {m.content}")
        elif m.role == "user":
            print(f"   user:   {m.content}")


def approve(db_url: str, shown: int) -> None:
    """The manager's side, in a process of its own: answer the pause and let the run finish.

    Nothing of the first process is needed: the run, its history and the pending question are
    in the store, and a fresh model (a fresh script, or the real provider) carries on.
    """
    store = tether.connect(db_url)
    llm, _ = make_llm()
    print(f"   -- process {os.getpid()} approves and resumes the run:", flush=True)
    result = build(store, llm).resume(
        "support-1", tether.Resume(approved=True, metadata={"reviewer": "m.okafor"})
    )
    _show(result.messages, shown)
    # A scripted model reports no usage: print tokens only when a provider counted some.
    tokens = result.usage.total_tokens
    used = f"  ({tokens} tokens)" if tokens else ""
    print(f"   status: {result.status}: {result.output or result.error}{used}", flush=True)
    store.close()


def main(db_url: str | None = None) -> None:
    """Run the agent to its pause and exit; approve and resume it from a fresh process (as a
    manager would, any time later); print the run's timeline."""
    OUT.mkdir(exist_ok=True)
    if db_url is None:
        db = OUT / "support.db"
        for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), LEDGER):
            p.unlink(missing_ok=True)
        db_url = f"sqlite:///{db}"
    store = tether.connect(db_url)
    llm, label = make_llm()
    print(f"   model: {label}")
    result = build(store, llm).run(
        f"Hi, please refund my request {REQUEST_ID}.", execution_id="support-1"
    )
    _show(result.messages, 1)
    if result.status == "paused" and result.pending_interrupt:
        p = result.pending_interrupt
        print(f"   -- paused at {p['node_id']} for {p['reason']}: {p['context']}")
        print(
            f"   -- process {os.getpid()} stops driving it here: no process needs to stay alive",
            flush=True,
        )
        argv = [sys.executable, __file__, "--approve", db_url, str(len(result.messages))]
        subprocess.run(argv, check=True)
    print("   checkpoint timeline:")
    for c in store.list("support-1"):
        print(f"   {c.seq:>4} {c.node_id:28} {c.label:19} {c.agent_path or ''}")
    store.close()


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--approve":
        approve(sys.argv[2], int(sys.argv[3]))
    else:
        main()
