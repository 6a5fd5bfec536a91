"""PYDANTIC_AI: what ``TetherAgent`` adds to a pydantic-ai run.

The same agent runs bare (``Agent.run``) and durable (``TetherAgent.run``, a fresh store each
repetition) against the local stub model server answering at once over HTTP (chat completions,
through pydantic-ai's ``OpenAIChatModel`` and the official OpenAI SDK). A run makes
``PA_REQUESTS`` model requests: each but the last asks for one tool whose body returns at once,
the last answers. The durable run commits a row per model request and per tool call, plus the
run-end row. Bare and durable alternate within each repetition, on the same event loop, so
machine noise hits both alike. Wall time and the CPU time of the thread that drives the run
(``time.thread_time``: pydantic-ai, the OpenAI client, tether and the store's driver, all on
that thread's event loop; not the stub's threads) are both reported. On a shared 2-core
machine a request takes 40-80 ms of wall time that swings by tens of ms between repetitions,
so the wall difference cannot resolve a 1 ms target; the target is checked on the CPU
difference, which is the work the wrapper adds.
"""

from __future__ import annotations

import gc
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

        from tether.engine.sync import run_sync
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
            gc.collect()
            t, c = time.perf_counter(), time.thread_time()
            result = run_sync(agent.run("go"))
            elapsed = time.perf_counter() - t, time.thread_time() - c
            assert result.output == "done"
            return elapsed

        def durable() -> tuple[float, float]:
            with backend.fresh() as handle:
                handle.store.setup()
                runner = TetherAgent(agent, checkpointer=handle.store)
                stub.script(script)
                gc.collect()
                t, c = time.perf_counter(), time.thread_time()
                result = runner.run("go")
                elapsed = time.perf_counter() - t, time.thread_time() - c
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
        note="(durable - bare) ÷ requests, wall time, paired per repetition; each request also "
        "brings a tool call: two rows",
    )
    section.add("bare pydantic-ai, CPU", "ms/request", [b / PA_REQUESTS * 1e3 for b in bare_cpu])
    section.add(
        "CPU overhead per model request",
        "ms",
        [(d - b) / PA_REQUESTS * 1e3 for d, b in zip(durable_cpu, bare_cpu, strict=True)],
        Target("<", 1.0) if backend.name == "SQLite NORMAL" else None,
        note="the same in the driving thread's CPU time (the target's measure: see the module "
        "docstring)",
    )
    section.add("durable ÷ bare", "x", ratios(durable_s, bare_s))
    return section
