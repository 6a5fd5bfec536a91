"""A durable OpenAI Agents SDK support desk: a triage agent hands off to a billing agent, which
looks a refund request up and issues it with a ``needs_approval`` tool that pays through an
``@idempotent`` function.

The run pauses for a manager's approval with no process alive; a second ``TetherAgent`` built
from the same code (think: another process, days later) approves it and the run finishes; a
fork answers the same approval "no" in a what-if branch. Every model call and tool call is a
row of the run's timeline, printed at the end.

Offline by default: the OpenAI SDK talks to tether's local stub model server (the one the tests
use), scripted with the model's answers. With ``OPENAI_API_KEY`` set it talks to the real API
(model from ``TETHER_DEMO_MODEL``, default ``gpt-4o-mini``). Run::

    python examples/openai_agents/support.py [sqlite:///path.db]
"""

from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # the stub model server lives in the repository's tests

from agents import Agent, RunConfig, function_tool, set_tracing_disabled  # noqa: E402
from agents.models.openai_provider import OpenAIProvider  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

import tether  # noqa: E402
from tether import Resume, current_idempotency_key, idempotent  # noqa: E402
from tether.integrations.openai_agents import TetherAgent  # noqa: E402

DATA = ROOT / "examples" / "refunds" / "refunds.csv"
LEDGER = Path(os.environ.get("SUPPORT_LEDGER", HERE / "out" / "ledger.jsonl"))
REQUEST_ID = "RF-1015"

set_tracing_disabled(True)  # the SDK would send its traces to OpenAI; tether.otel traces runs


def _requests() -> dict[str, dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return {row["request_id"]: row for row in csv.DictReader(f)}


@idempotent
def pay_refund(request_id: str, amount: str, currency: str) -> dict[str, str]:
    """The side effect: one ledger line per refund paid (think: a payment provider call)."""
    LEDGER.parent.mkdir(parents=True, exist_ok=True)
    with LEDGER.open("a", encoding="utf-8") as f:
        entry = {"request_id": request_id, "amount": amount, "key": current_idempotency_key()}
        f.write(json.dumps(entry) + "\n")
    return {"paid": amount, "currency": currency}


@function_tool
def look_up_refund(request_id: str) -> str:
    """Look a refund request up.

    Args:
        request_id: the request, e.g. RF-1015.
    """
    row = _requests().get(request_id)
    return json.dumps(row) if row else f"no refund request {request_id}"


@function_tool(needs_approval=True)
def issue_refund(request_id: str) -> str:
    """Issue the refund of a request; a manager approves it first.

    Args:
        request_id: the request.
    """
    row = _requests()[request_id]
    paid = pay_refund(request_id, row["amount"], row["currency"])
    return f"refunded {paid['paid']} {paid['currency']} on {request_id}"


billing = Agent(
    name="billing",
    instructions="You handle refund requests: look the request up, then issue the refund.",
    tools=[look_up_refund, issue_refund],
)
triage = Agent(
    name="triage",
    instructions="Hand refund questions to billing.",
    handoffs=[billing],
)

SCRIPT = [  # what the offline model answers, in order
    {"tool_calls": [{"name": "transfer_to_billing", "arguments": {}}]},
    {"tool_calls": [{"name": "look_up_refund", "arguments": {"request_id": REQUEST_ID}}]},
    {"tool_calls": [{"name": "issue_refund", "arguments": {"request_id": REQUEST_ID}}]},
    {"text": f"Your refund {REQUEST_ID} has been issued."},
    {"text": f"Sorry, refund {REQUEST_ID} was declined by a manager."},  # the fork's answer
]


@contextmanager
def model() -> Iterator[RunConfig]:
    """The SDK's run config: the real API with a key, else the scripted local stub server."""
    if os.environ.get("OPENAI_API_KEY"):
        yield RunConfig(model=os.environ.get("TETHER_DEMO_MODEL", "gpt-4o-mini"))
        return
    from tests.llm.stub_server import StubServer

    with StubServer() as stub:
        stub.script(SCRIPT)
        client = AsyncOpenAI(base_url=stub.url + "/v1", api_key="offline", max_retries=0)
        provider = OpenAIProvider(openai_client=client, use_responses=True)
        yield RunConfig(model_provider=provider, model="gpt-4o-mini")


def desk(store: tether.Checkpointer, config: RunConfig) -> TetherAgent:
    """The durable desk; every process that resumes its runs builds the same one."""
    return TetherAgent(triage, name="support", checkpointer=store, run_config=config)


def main(db_url: str | None = None) -> None:
    store = tether.connect(db_url or f"sqlite:///{tempfile.mkdtemp()}/support.db")
    with model() as config:
        paused = desk(store, config).run(f"Hi, please refund my request {REQUEST_ID}.")
        print(f"run {paused.execution_id}: {paused.status}")
        if paused.status != "paused":
            print(f"  (the model did not ask for the refund: {paused.output or paused.error})")
            return
        pending = paused.pending_interrupt or {}
        print(f"  paused at {pending['node_id']} ({pending['reason']}): {pending['context']}")

        # Later, in another process with the same code: a manager approves.
        done = desk(store, config).resume(paused.execution_id, Resume(approved=True))
        print(f"  approved -> status: {done.status}, output: {done.output!r}")

        # What if the manager had said no? Fork the approval row with the other answer.
        approval = next(c for c in store.list(paused.execution_id) if c.status == "interrupted")
        no = Resume(approved=False, data="declined: over the monthly limit")
        branch = desk(store, config).fork(
            paused.execution_id, approval.checkpoint_id, resume_value=no
        )
        print(f"  fork {branch.execution_id}: {branch.status}, output: {branch.output!r}")

    print("timeline:")
    for cp in store.list(paused.execution_id):
        print(f"  {cp.seq:>2} {cp.node_id:<26} {cp.step_type:<10} {cp.status:<11} {cp.agent_path}")
    paid = [json.loads(line) for line in LEDGER.read_text().splitlines()] if LEDGER.exists() else []
    payments = [p for p in paid if p["request_id"] == REQUEST_ID]
    print(f"ledger: {len(payments)} payment(s) of {REQUEST_ID}")
    store.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
