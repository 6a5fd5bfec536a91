"""OPENAI_AGENTS: what ``TetherAgent`` adds to an OpenAI Agents SDK run.

The same agent runs bare (``Runner.run``) and durable (``TetherAgent.run``, a fresh store each
repetition) against the local stub model server answering at once over HTTP (the Responses
API). A run makes ``OA_REQUESTS`` model requests: each but the last asks for one function tool
whose body returns at once, the last answers. The durable run commits a row per model call and
per tool call, plus the run-end row. Bare and durable alternate within each repetition, on the
same event loop, so machine noise hits both alike. Wall time and this process's CPU time
(``time.process_time``: the SDK, tether, SQLite and the stub's thread) are both reported.

The bare SDK itself spends tens of milliseconds of CPU per request here (the ``openai``
client re-encodes the whole, growing history for every request), so the paired difference of
two whole runs moves by more than the wrapper costs. The journal's work is therefore also
timed where it happens: encoding each model response and tool output and committing its row
(``Journal.record`` and the two encoders, timed in the durable runs), per model request.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from .backends import Backend
from .report import REPS, Section, Target, ratios

OA_REQUESTS = 40
"""Model requests per run (39 tool turns and the final answer)."""


@contextlib.contextmanager
def _timing_journal(seconds: list[float]) -> Iterator[None]:
    """Add the time spent in the journal's encoders and commits to ``seconds[0]``."""
    from tether.integrations.openai_agents import _calls, _codec, _journal

    def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
        def encode(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                seconds[0] += time.perf_counter() - t

        return encode

    record = _journal.Journal.record

    async def timed_record(self: Any, *args: Any, **kw: Any) -> None:
        t = time.perf_counter()
        try:
            await record(self, *args, **kw)
        finally:
            seconds[0] += time.perf_counter() - t

    # The codec functions as _calls looked them up at import; timed in _calls' own namespace.
    saved = (_codec.dump_response, _codec.dump_output)
    vars(_calls).update(dump_response=timed(saved[0]), dump_output=timed(saved[1]))
    _journal.Journal.record = timed_record  # type: ignore[method-assign]
    try:
        yield
    finally:
        vars(_calls).update(dump_response=saved[0], dump_output=saved[1])
        _journal.Journal.record = record  # type: ignore[method-assign]


def openai_agents(backend: Backend) -> Section:
    """Per-model-request overhead of the durable wrapper over the bare SDK, and the ratio."""
    section = Section("OPENAI_AGENTS", backend.name)
    try:
        from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
        from agents.models.openai_provider import OpenAIProvider
        from openai import AsyncOpenAI

        from tether.engine.sync import run_sync
        from tether.integrations.openai_agents import TetherAgent
    except ImportError as exc:
        section.skipped = f"the openai-agents extra is not installed ({exc})"
        return section
    from tests.llm.stub_server import StubServer

    set_tracing_disabled(True)

    @function_tool
    def step(n: int) -> str:
        """Record a step.

        Args:
            n: the step number.
        """
        return f"step {n} recorded"

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "step", "arguments": {"n": n}}]} for n in range(OA_REQUESTS - 1)
    ]
    script.append({"text": "done"})
    agent = Agent(name="bench", instructions="Record the steps.", tools=[step])
    bare_s: list[float] = []
    durable_s: list[float] = []
    bare_cpu: list[float] = []
    durable_cpu: list[float] = []
    journal_s: list[float] = []
    with StubServer() as stub:
        client = AsyncOpenAI(base_url=stub.url + "/v1", api_key="sk-bench", max_retries=0)
        config = RunConfig(
            model_provider=OpenAIProvider(openai_client=client, use_responses=True),
            model="gpt-4o-mini",
            tracing_disabled=True,
        )

        def bare() -> tuple[float, float]:
            stub.script(script)
            t, c = time.perf_counter(), time.process_time()
            result = run_sync(Runner.run(agent, "go", run_config=config, max_turns=OA_REQUESTS))
            elapsed = time.perf_counter() - t, time.process_time() - c
            assert result.final_output == "done"
            return elapsed

        def durable(journal: list[float]) -> tuple[float, float]:
            with backend.fresh() as handle:
                handle.store.setup()
                runner = TetherAgent(
                    agent, checkpointer=handle.store, run_config=config, max_turns=OA_REQUESTS
                )
                stub.script(script)
                with _timing_journal(journal):
                    t, c = time.perf_counter(), time.process_time()
                    result = runner.run("go")
                    elapsed = time.perf_counter() - t, time.process_time() - c
            assert result.status == "completed", result.error
            return elapsed

        bare(), durable([0.0])  # warm-up: imports, the client's first connection, the schema
        for _ in range(REPS):
            wall, cpu = bare()
            bare_s.append(wall)
            bare_cpu.append(cpu)
            journal = [0.0]
            wall, cpu = durable(journal)
            durable_s.append(wall)
            durable_cpu.append(cpu)
            journal_s.append(journal[0])
        assert len(stub.requests) == OA_REQUESTS * (2 + 2 * REPS)
    per_request = [x / OA_REQUESTS * 1e3 for x in journal_s]
    section.add("bare SDK", "ms/request", [b / OA_REQUESTS * 1e3 for b in bare_s])
    section.add("durable (TetherAgent)", "ms/request", [d / OA_REQUESTS * 1e3 for d in durable_s])
    section.add("durable ÷ bare", "x", ratios(durable_s, bare_s))
    section.add(
        "journal work per model request",
        "ms",
        per_request,
        Target("<", 1.0) if backend.name == "SQLite NORMAL" else None,
        note="encoding the response and the tool output and committing their two rows, timed "
        "where they happen",
    )
    section.add(
        "whole-run difference per model request",
        "ms",
        [(d - b) / OA_REQUESTS * 1e3 for d, b in zip(durable_s, bare_s, strict=True)],
        note="(durable - bare) ÷ requests, paired per repetition: within the bare SDK's own "
        "run-to-run noise",
    )
    section.add(
        "whole-run CPU difference per model request",
        "ms",
        [(d - b) / OA_REQUESTS * 1e3 for d, b in zip(durable_cpu, bare_cpu, strict=True)],
        note="the same in this process's CPU time",
    )
    return section
