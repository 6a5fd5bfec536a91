"""Fixtures for the LangGraph tests: the loopback model stub, the tool ledger, and running the
test graph in child processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.openai_agents.conftest import chromium  # the page test's browser
from tests.llm.stub_server import StubServer
from tests.support.proc import ROOT, child_env

__all__ = ["call", "chromium", "lg_env", "run_child", "spawn_child"]


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@pytest.fixture
def ledger_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("LEDGER", str(path))
    return path


def lg_env(db_url: str, stub: StubServer, ledger_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a child driving the test graph."""
    return child_env(
        TETHER_DATABASE_URL=db_url, STUB_URL=stub.url, LEDGER=str(ledger_path), **extra
    )


def call(name: str, **arguments: object) -> dict[str, object]:
    """A stub script item: the model calls one tool."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def spawn_child(env: dict[str, str], *args: str, log: Path) -> subprocess.Popen[bytes]:
    """Start the child (``tests.integrations.langgraph.child``) without waiting."""
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integrations.langgraph.child", *args],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def run_child(env: dict[str, str], *args: str, timeout: float = 60) -> dict[str, Any]:
    """Run the child to its end; its JSON line."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integrations.langgraph.child", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"child failed ({proc.returncode}): {proc.stderr[-3000:]}"
    )
    return dict(json.loads(lines[-1]))
