"""PYDANTIC_AI: what ``TetherAgent`` adds to a pydantic-ai run.

The same agent runs bare (``Agent.run``) and durable (``TetherAgent.run``, a fresh store each
repetition) against the local stub model server answering at once over HTTP (chat completions,
through pydantic-ai's ``OpenAIChatModel`` and the official OpenAI SDK). A run makes
``PA_REQUESTS`` model requests: each but the last asks for one tool whose body returns at once,
the last answers. The durable run commits a row per model request and per tool call, plus the
run-end row. Bare and durable alternate within each repetition, on the same event loop, so
machine noise hits both alike. Wall time and this process's CPU time (``time.process_time``:
pydantic-ai, tether, the store's driver and the stub's thread) are both reported; the CPU
difference is the steadier of the two on a loaded machine.
"""

from __future__ import annotations

import time
from typing import Any

from .backends import Backend
from .report import REPS, Section, Target, ratios

PA_REQUESTS = 40
"""Model requests per run (39 tool turns and the final answer)."""


def pydantic_ai(backend: Backend) -> Section:
    """Per-model-request overhead of the durable wrapper over bare pydantic-ai, and the ratio."""
    section = Section("PYDANTIC_AI", backend.name)
    try:
        from pydantic_ai import Agent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        from tether._runner import run_sync
        from tether.integrations.pydantic_ai import TetherAgent
    except ImportError as exc:
        section.skipped = f"the pydantic-ai extra is not installed ({exc})"
        return section
    from tests.llm.stub_server import StubServer

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "step", "arguments": {"n": n}}]} for n in range(PA_REQUESTS - 1)
    ]
    script.append({"text": "done"})
    bare_s: list[float] = []
    durable_s: list[float] = []
    bare_cpu: list[float] = []
    durable_cpu: list[float] = []
    with StubServer() as stub:
        provider = OpenAIProvider(base_url=stub.url + "/v1", api_key="sk-bench")
        agent = Agent(
            OpenAIChatModel("gpt-4o-mini", provider=provider),
            name="bench",
            instructions="Record the steps.",
        )

        @agent.tool_plain
        def step(n: int) -> str:
            """Record a step."""
            return f"step {n} recorded"

        def bare() -> tuple[float, float]:
            stub.script(script)
            t, c = time.perf_counter(), time.process_time()
            result = run_sync(agent.run("go"))
            elapsed = time.perf_counter() - t, time.process_time() - c
            assert result.output == "done"
            return elapsed

        def durable() -> tuple[float, float]:
            with backend.fresh() as handle:
                handle.store.setup()
                runner = TetherAgent(agent, checkpointer=handle.store)
                stub.script(script)
                t, c = time.perf_counter(), time.process_time()
                result = runner.run("go")
                elapsed = time.perf_counter() - t, time.process_time() - c
            assert result.status == "completed", result.error
            return elapsed

        bare(), durable()  # warm-up: imports, the client's first connection, the schema
        for _ in range(REPS):
            wall, cpu = bare()
            bare_s.append(wall)
            bare_cpu.append(cpu)
            wall, cpu = durable()
            durable_s.append(wall)
            durable_cpu.append(cpu)
        assert len(stub.requests) == PA_REQUESTS * (2 + 2 * REPS)
    per_request = [(d - b) / PA_REQUESTS * 1e3 for d, b in zip(durable_s, bare_s, strict=True)]
    section.add("bare pydantic-ai", "ms/request", [b / PA_REQUESTS * 1e3 for b in bare_s])
    section.add("durable (TetherAgent)", "ms/request", [d / PA_REQUESTS * 1e3 for d in durable_s])
    section.add(
        "overhead per model request",
        "ms",
        per_request,
        Target("<", 1.0) if backend.name == "SQLite NORMAL" else None,
        note="(durable - bare) ÷ requests, paired per repetition; each request also brings a "
        "tool call: two rows",
    )
    section.add(
        "CPU overhead per model request",
        "ms",
        [(d - b) / PA_REQUESTS * 1e3 for d, b in zip(durable_cpu, bare_cpu, strict=True)],
        note="the same, in this process's CPU time",
    )
    section.add("durable ÷ bare", "x", ratios(durable_s, bare_s))
    return section
