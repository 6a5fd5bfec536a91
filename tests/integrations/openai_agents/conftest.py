"""Fixtures for the OpenAI Agents SDK integration tests: the stub model server, the ledger the
tools write, and child processes that run the durable agent."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.llm.stub_server import StubServer
from tests.support.proc import ROOT, child_env
from tests.web.conftest import chromium_path

pytest.importorskip("agents", reason="the openai-agents extra is not installed")

APP = "tests.integrations.openai_agents.app:app"

HANDOFF = {"tool_calls": [{"name": "transfer_to_billing", "arguments": {}}]}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A script item: the model asks for one tool call."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def text(answer: str) -> dict[str, Any]:
    """A script item: the model's final answer."""
    return {"text": answer, "usage": {"input_tokens": 10, "output_tokens": 2}}


@pytest.fixture
def chromium() -> str:
    """Debian's chromium for the page test (skips without it, fails in CI)."""
    path = chromium_path()
    if path is None:
        reason = "Debian's chromium is not installed at /usr/bin/chromium"
        if IN_CI:
            pytest.fail(f"CI requires Chromium: {reason}")
        pytest.skip(reason)
    return path


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@pytest.fixture
def ledger_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the tools append to (set for this process and the children)."""
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("TETHER_TEST_LEDGER", str(path))
    return path


def oa_env(db_url: str, stub: StubServer, ledger: Path, **extra: str) -> dict[str, str]:
    """The environment of a child process running the test app."""
    return child_env(
        TETHER_DATABASE_URL=db_url,
        TETHER_TEST_STUB_URL=stub.url,
        TETHER_TEST_LEDGER=str(ledger),
        **extra,
    )


def spawn_child(env: dict[str, str], *args: str, log: Path) -> subprocess.Popen[bytes]:
    """``python -m tests.integrations.openai_agents.child *args`` in the background; its output
    goes to ``log``."""
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integrations.openai_agents.child", *args],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def run_child(env: dict[str, str], *args: str, timeout: float = 60) -> dict[str, Any]:
    """Run the child to its end; its JSON line."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integrations.openai_agents.child", *args],
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


def tether_cli(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the ``tether`` command."""
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def counts(lines: list[str]) -> dict[str, int]:
    """How often each ledger line occurs."""
    out: dict[str, int] = {}
    for line in lines:
        out[line] = out.get(line, 0) + 1
    return out
