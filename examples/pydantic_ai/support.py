"""A pydantic-ai support agent made durable with tether: its refund tool needs a human's
approval, the run pauses with no process alive, and another process approves and finishes it.

    python examples/pydantic_ai/support.py            # offline: a local model server
    OPENAI_API_KEY=... python examples/pydantic_ai/support.py   # the real OpenAI API

Offline, the model is a scripted OpenAI-compatible server on 127.0.0.1 (the one tether's tests
use), reached over HTTP by pydantic-ai's own ``OpenAIChatModel``; with ``OPENAI_API_KEY`` set it
is ``openai:gpt-4o-mini`` (or ``TETHER_DEMO_MODEL``). The store is a SQLite file under
``examples/pydantic_ai/out/`` (or ``TETHER_DATABASE_URL``). The agent's code is plain
pydantic-ai; the one tether line is ``TetherAgent(agent)``.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.models import Model

import tether
from tether import Resume, current_idempotency_key, idempotent
from tether.integrations.pydantic_ai import TetherAgent

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = ROOT / "examples" / "refunds" / "refunds.csv"
OUT = HERE / "out"
LEDGER = Path(os.environ.get("SUPPORT_LEDGER", OUT / "ledger.jsonl"))
REQUEST_ID = "RF-1015"


def _requests() -> dict[str, dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return {row["request_id"]: row for row in csv.DictReader(f)}


@idempotent
def pay_refund(request_id: str, amount: str, currency: str) -> dict[str, str]:
    """The side effect: one ledger line per refund paid (think: a payment provider call)."""
    entry = {"request_id": request_id, "amount": amount, "key": current_idempotency_key()}
    LEDGER.parent.mkdir(parents=True, exist_ok=True)
    with LEDGER.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    return {"paid": amount, "currency": currency}


def make_agent(model: Model | str) -> Agent[None, str]:
    """The support agent, in plain pydantic-ai."""
    agent = Agent(
        model,
        name="refund_desk",
        instructions=(
            "You handle refund requests. Look the request up, then issue the refund for the "
            "amount and currency it lists, then tell the customer in one sentence."
        ),
    )

    @agent.tool_plain
    def lookup_refund(request_id: str) -> dict[str, str]:
        """Look a refund request up by its id, e.g. RF-1001."""
        return _requests().get(request_id) or {"error": f"no refund request {request_id}"}

    @agent.tool_plain(requires_approval=True)
    def issue_refund(request_id: str, amount: str, currency: str) -> dict[str, str]:
        """Pay a refund (a manager approves every call)."""
        return pay_refund(request_id, amount, currency)

    return agent


def _model(stub_url: str | None) -> Model | str:
    if stub_url is None:
        return os.environ.get("TETHER_DEMO_MODEL", "openai:gpt-4o-mini")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=stub_url + "/v1", api_key="offline")
    return OpenAIChatModel("gpt-4o-mini", provider=provider)


def _offline_script() -> list[dict[str, Any]]:
    row = _requests()[REQUEST_ID]
    refund = {"request_id": REQUEST_ID, "amount": row["amount"], "currency": row["currency"]}
    return [
        {"tool_calls": [{"name": "lookup_refund", "arguments": {"request_id": REQUEST_ID}}]},
        {"tool_calls": [{"name": "issue_refund", "arguments": refund}]},
        {"text": f"Your refund of {row['amount']} {row['currency']} is on its way."},
    ]


def durable_agent(db_url: str, stub_url: str | None) -> TetherAgent[None, str]:
    return TetherAgent(make_agent(_model(stub_url)), checkpointer=tether.connect(db_url))


def approve(db_url: str, execution_id: str) -> None:
    """What a manager's process does, days later: approve, and the run finishes here."""
    agent = durable_agent(db_url, os.environ.get("DEMO_STUB_URL"))
    result = agent.resume(execution_id, Resume(approved=True, metadata={"by": "manager"}))
    print(f"[approver pid {os.getpid()}] status: {result.status}; output: {result.output}")


def main(db_url: str | None = None) -> None:
    db_url = db_url or os.environ.get("TETHER_DATABASE_URL") or f"sqlite:///{OUT / 'demo.db'}"
    OUT.mkdir(parents=True, exist_ok=True)
    stub = None
    if not os.environ.get("OPENAI_API_KEY"):
        sys.path.insert(0, str(ROOT))
        from tests.llm.stub_server import StubServer  # the local model server of the tests

        stub = StubServer()
        stub.script(_offline_script())
    try:
        stub_url = None if stub is None else stub.url
        agent = durable_agent(db_url, stub_url)
        result = agent.run(f"Please refund my request {REQUEST_ID}.")
        print(f"run {result.execution_id}: {result.status}")
        pending = result.pending_interrupt
        if result.status != "paused" or pending is None:
            print(f"  the model did not ask to refund: {result.output or result.error}")
            return
        context = pending["context"]
        print(f"  paused at {pending['node_id']} ({pending['reason']}): {context['tool_name']}")
        print(f"  arguments: {json.dumps(context['args'])}")
        print("  (nothing runs now; `tether pending list` and the approvals page show it)")
        # Another process, with no memory of this one, approves and finishes the run.
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if stub_url is not None:
            env["DEMO_STUB_URL"] = stub_url
        subprocess.run(
            [sys.executable, __file__, "approve", db_url, result.execution_id], env=env, check=True
        )
        store = tether.connect(db_url)
        print("timeline:")
        for cp in store.list(result.execution_id):
            print(f"  {cp.seq:>2} {cp.node_id:<26} {cp.step_type:<10} {cp.status}")
        lines = LEDGER.read_text(encoding="utf-8").splitlines() if LEDGER.exists() else []
        paid = [json.loads(line) for line in lines]
        mine = [p for p in paid if p["request_id"] == REQUEST_ID]
        print(f"ledger: {len(mine)} payment(s) for {REQUEST_ID}")
        if stub is not None:
            print(f"model requests the local server answered: {len(stub.requests)}")
    finally:
        if stub is not None:
            stub.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["approve"]:
        approve(sys.argv[2], sys.argv[3])
    else:
        main()
