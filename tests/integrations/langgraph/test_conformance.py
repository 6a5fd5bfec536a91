"""LangGraph's own conformance suite for checkpoint savers (``langgraph-checkpoint-conformance``
from PyPI, nothing vendored), run against ``TetherSaver`` on SQLite and on Postgres: every base
capability and every optional one the saver implements must pass."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, Capability

from tether.integrations.langgraph import TetherSaver

CAPABILITIES = sorted(c.value for c in ALL_CAPABILITIES)


@pytest.mark.parametrize("capability", CAPABILITIES)
async def test_langgraph_conformance_suite_passes(store, backend: str, capability: str) -> None:
    @checkpointer_test(name=f"TetherSaver-{backend}")
    async def factory() -> AsyncIterator[TetherSaver]:
        yield TetherSaver(store)

    report = await validate(factory, capabilities={capability})
    result = report.results[capability]
    assert result.detected, f"TetherSaver does not implement {capability}"
    assert result.passed, f"{capability} on {backend}: " + "\n".join(result.failures)
    assert result.tests_passed > 0 and result.tests_failed == 0


def test_every_capability_langgraph_defines_is_covered() -> None:
    # A new capability in a future suite shows up here instead of passing unnoticed.
    assert {c.value for c in Capability} == set(CAPABILITIES)
