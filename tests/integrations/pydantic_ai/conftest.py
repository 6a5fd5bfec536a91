"""Fixtures for the pydantic-ai integration tests: the loopback model stub, and the files the
test agent's tools log to (``tests/integrations/pydantic_ai/agents.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integrations.pydantic_ai.agents import read_log
from tests.llm.stub_server import StubServer


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@dataclass
class Logs:
    """The tool log and the ledger of a test (also set in this process's environment)."""

    tools: Path
    ledger: Path

    def env(self) -> dict[str, str]:
        return {"TOOL_LOG": str(self.tools), "LEDGER": str(self.ledger)}

    def ran(self, tool: str | None = None) -> list[dict[str, object]]:
        return [r for r in read_log(self.tools) if tool is None or r["tool"] == tool]

    def charges(self) -> list[dict[str, object]]:
        return read_log(self.ledger)


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Logs:
    found = Logs(tmp_path / "tools.jsonl", tmp_path / "ledger.jsonl")
    for key, value in found.env().items():
        monkeypatch.setenv(key, value)
    return found


def call(name: str, **arguments: object) -> dict[str, object]:
    """A stub script item's tool call."""
    return {"name": name, "arguments": arguments}


def tool_messages(body: dict[str, object]) -> list[dict[str, object]]:
    """The tool-result messages of a chat-completions request body the stub saw."""
    messages = body["messages"]
    assert isinstance(messages, list)
    return [m for m in messages if m["role"] == "tool"]
