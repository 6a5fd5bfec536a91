"""The support-agent example runs offline: it pauses for a manager, resumes, pays once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.proc import ROOT, child_env


def test_support_agent_example_pauses_resumes_and_pays_once(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    db_url = f"sqlite:///{tmp_path / 's.db'}"
    code = (
        "import sys; sys.path.insert(0, 'examples/refunds'); import support_agent; "
        f"support_agent.main({db_url!r})"
    )
    env = child_env(SUPPORT_LEDGER=str(ledger))
    env.pop("OPENAI_API_KEY", None)
    env.pop("ANTHROPIC_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "paused at turn:1/tool:issue_refund" in proc.stdout
    assert "status: completed" in proc.stdout
    assert "run_end" in proc.stdout
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [e["request_id"] for e in lines] == ["RF-1015"]


def test_support_agent_example_resumes_in_a_fresh_process_and_prints_like_the_demo(
    tmp_path: Path,
) -> None:
    env = child_env(SUPPORT_LEDGER=str(tmp_path / "ledger.jsonl"))
    env.pop("OPENAI_API_KEY", None)
    env.pop("ANTHROPIC_API_KEY", None)
    db_url = f"sqlite:///{tmp_path / 's.db'}"
    code = (
        "import sys; sys.path.insert(0, 'examples/refunds'); import support_agent; "
        f"support_agent.main({db_url!r})"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    paused_by = re.search(r"process (\d+) stops driving it", proc.stdout)
    resumed_by = re.search(r"process (\d+) approves and resumes", proc.stdout)
    assert paused_by and resumed_by and paused_by.group(1) != resumed_by.group(1)
    assert out.index(next(x for x in out if "stops driving" in x)) < out.index(
        next(x for x in out if "approves and resumes" in x)
    )
    assert all(line.startswith("   ") for line in out), out  # indented like the demo's steps
    assert "tokens" not in proc.stdout  # a scripted model counts none
    assert "before tool call" in proc.stdout and "paused for a human" in proc.stdout
    assert "tool_call" not in proc.stdout
