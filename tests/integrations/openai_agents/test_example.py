"""The OpenAI Agents SDK example runs offline against the stub model server: it pauses for
approval, is approved from a second runner object, forks a "no" branch, and pays once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.proc import ROOT, child_env


def test_the_example_pauses_is_approved_forks_a_rejection_and_pays_once(tmp_path: Path):
    ledger = tmp_path / "ledger.jsonl"
    env = child_env(SUPPORT_LEDGER=str(ledger))
    env.pop("OPENAI_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "examples/openai_agents/support.py", f"sqlite:///{tmp_path / 's.db'}"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "paused at turn:2/tool:issue_refund (tool_approval)" in out
    assert "approved -> status: completed, output: 'Your refund RF-1015 has been issued.'" in out
    assert "completed, output: 'Sorry, refund RF-1015 was declined by a manager.'" in out
    assert "openai_agents:support/agent:triage" in out
    assert "ledger: 1 payment(s) of RF-1015" in out
    assert [json.loads(line)["request_id"] for line in ledger.read_text().splitlines()] == [
        "RF-1015"
    ]
