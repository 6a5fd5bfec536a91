"""Step timeouts and run deadlines (docs/design.md §12, "Step timeouts"): an overrunning step
fails the run naming the step and its limit, an async step is cancelled, a sync one abandoned
and never committed, and the run stays resumable. The node cases run in a ``tether worker``
process on both backends."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import tether
from tests.control.test_cancel import APP, _ledger
from tests.support.waiting import wait_for
from tests.workers.procs import spawn_worker, stop_all
from tether import Agent, Chain, LLMResponse, tool
from tether.testing import ScriptedLLM


@pytest.mark.parametrize("runner", ["timed", "timed_async"])
def test_a_node_past_its_timeout_fails_the_run_in_a_worker_which_goes_on_and_resume_repairs_it(
    store_and_url, tmp_path, runner
):
    store, url = store_and_url
    _ledger(store)
    eid = tether.enqueue(store, runner, {"eid": "t", "slow": True}, execution_id="t")
    other = tether.enqueue(store, "steps_async", {"eid": "o"}, execution_id="o")
    worker = spawn_worker(
        url,
        tmp_path,
        "w",
        lease_seconds=3,
        concurrency=2,
        app=APP,
        env={"TETHER_TEST_STEP_SECONDS": "0"},
    )
    try:
        failed = wait_for(lambda: store.get_run(eid).status == "failed", "the timeout", 30)
        assert failed
        # The worker was not held by the abandoned step: the other run finished meanwhile.
        wait_for(lambda: store.get_run(other).status == "completed", "the other run", 30)
        run = store.get_run(eid)
        assert run.error.startswith("StepTimeoutError: node 'slow' of run 't' ran past its ")
        assert "timeout of 0.5 s" in run.error
        if runner == "timed":
            # The abandoned thread finishes later; what it returns is never committed.
            wait_for(lambda: "finished:slow" in _ledger_kinds(store), "the late step", 10)
        else:
            assert "cancelled:slow" in _ledger_kinds(store)
        time.sleep(0.3)
        assert [cp.label for cp in store.list(eid)] == ["node completed", "run failed"]
        assert store.list(eid)[-1].node_output["node_id"] == "slow"
        # Resumable like any failed run: repaired in place, it completes.
        same = Chain(runner, store)
        for node in ("first", "slow"):
            same.add_node(node, lambda state: {"slow_done": True})
        done = same.resume(eid, state_updates={"slow": False})
        assert done.status == "completed" and done.output["slow_done"] is True
    finally:
        stop_all([worker])


def _ledger_kinds(store: Any) -> set[str]:
    from tests.hostile.conftest import raw_sql

    return {
        f"{key.split(':', 1)[0]}:{node}"
        for key, node in raw_sql(store)("SELECT key, node FROM {t}ledger")
    }


def test_a_tool_past_its_timeout_fails_the_agent_run_naming_the_tool(store):
    @tool(timeout_seconds=0.2)
    async def lookup(order_id: str) -> str:
        """Look an order up."""
        await asyncio.sleep(5)
        return "found"

    llm = ScriptedLLM([[{"name": "lookup", "arguments": {"order_id": "A-1"}}], "ok"])
    agent = Agent("support", llm=llm, tools=[lookup], checkpointer=store)
    began = time.monotonic()
    result = agent.run("where is A-1?")
    assert time.monotonic() - began < 3
    assert result.status == "failed"
    assert isinstance(result.error, tether.StepTimeoutError)
    assert (result.error.step, result.error.timeout_seconds) == ("tool 'lookup'", 0.2)


class _SlowModel:
    """A model whose first call hangs; later calls answer at once."""

    def __init__(self) -> None:
        self.calls = 0

    async def acomplete(self, messages: Any, tools: Any = None) -> LLMResponse:
        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(5)
        return LLMResponse(text="done", finish_reason="stop")


def test_a_model_call_past_its_timeout_fails_and_a_resume_asks_again(store):
    model = _SlowModel()
    agent = Agent("writer", llm=model, checkpointer=store, model_timeout_seconds=0.2)
    first = agent.run("write")
    assert first.status == "failed" and isinstance(first.error, tether.StepTimeoutError)
    assert first.error.step == "model call of agent 'writer'"
    again = agent.resume(first.execution_id)
    assert again.status == "completed" and again.output == "done" and model.calls == 2


def test_a_run_past_its_deadline_fails_at_the_step_that_overran(store):
    async def nap(state: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.3)
        return {"naps": state.get("naps", 0) + 1}

    chain = Chain("sleepy", store, deadline_seconds=0.5)
    for name in ("a", "b", "c"):
        chain.add_node(name, nap)
    result = chain.run({})
    assert result.status == "failed"
    assert isinstance(result.error, tether.RunDeadlineExceeded)
    assert result.error.node_id == "b" and result.state == {"naps": 1}
    with pytest.raises(tether.ConfigurationError):
        Chain("bad", store, deadline_seconds=0)
    with pytest.raises(tether.ConfigurationError):
        chain.add_node("d", nap, timeout_seconds=-1)
