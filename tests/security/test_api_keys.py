"""Provider API keys are configuration, never state: after agent runs through the real OpenAI
and Anthropic SDKs (against the local stub) that pause, resume, fail and fork, no byte of the
key is in the SQLite file (with its WAL) or in any Postgres table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.conftest import TABLES, raw_sql
from tests.llm.stub_server import StubServer
from tether import Resume
from tether.agent import Agent, tool
from tether.interrupt import interrupt

OPENAI_KEY = "sk-proj-SECRETopenai7f3a9c"
ANTHROPIC_KEY = "sk-ant-api03-SECRETanthropic2b8d"


@tool
def approve(amount: int) -> str:
    """Ask a human to approve an amount."""
    return "approved" if interrupt("approve", {"amount": amount}).approved else "rejected"


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


def make_llm(provider: str, stub: StubServer) -> Any:
    if provider == "openai":
        from tether.llm.openai import OpenAIChat

        return OpenAIChat("gpt-test", api_key=OPENAI_KEY, base_url=stub.url + "/v1", max_retries=0)
    from tether.llm.anthropic import AnthropicMessages

    return AnthropicMessages("claude-test", api_key=ANTHROPIC_KEY, base_url=stub.url, max_retries=0)


def stored_bytes(store: Any, tmp_path: Path) -> bytes:
    if hasattr(store, "path"):
        return b"".join(p.read_bytes() for p in Path(store.path).parent.glob("tether.db*"))
    sql = raw_sql(store)
    out = []
    for table in TABLES:
        for row in sql(f"SELECT * FROM {{t}}{table}"):
            for value in row:
                out.append(
                    bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode()
                )
    return b"\n".join(out)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_api_keys_never_reach_a_checkpoint(
    store: Any, tmp_path: Path, stub: StubServer, provider: str
) -> None:
    stub.script(
        [
            {"tool_calls": [{"name": "approve", "arguments": {"amount": 9}}]},
            {"text": "done"},
            {"status": 500, "error": "upstream down"},
            {"text": "forked"},
        ]
    )
    agent = Agent(
        "keyed",
        llm=make_llm(provider, stub),
        tools=[approve],
        system_prompt="Be brief.",
        checkpointer=store,
    )
    assert agent.run("refund 9", execution_id="k1").status == "paused"
    assert agent.resume("k1", Resume(True)).status == "completed"
    failed = agent.run("again", execution_id="k2")
    assert failed.status == "failed"  # the provider error text is stored; the key is not
    assert agent.fork("k1", new_execution_id="k3").status == "completed"
    key = OPENAI_KEY if provider == "openai" else ANTHROPIC_KEY
    sent = stub.log[0].headers
    assert any(key in sent.get(h, "") for h in ("authorization", "x-api-key"))  # it was sent
    written = stored_bytes(store, tmp_path)
    assert len(written) > 1000
    for needle in (key, key[:16], "SECRET"):
        assert needle.encode() not in written, needle
