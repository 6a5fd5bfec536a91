"""The pydantic-ai example runs offline: it pauses for approval, another process approves,
and the refund is paid once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.proc import ROOT, child_env


def test_the_pydantic_ai_example_pauses_is_approved_elsewhere_and_pays_once(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    env = child_env(
        SUPPORT_LEDGER=str(ledger), TETHER_DATABASE_URL=f"sqlite:///{tmp_path / 'd.db'}"
    )
    env.pop("OPENAI_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "examples/pydantic_ai/support.py"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "paused at turn:1/tool:issue_refund (tool_approval)" in proc.stdout
    assert "status: completed" in proc.stdout
    assert "model requests the local server answered: 3" in proc.stdout
    paid = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [p["request_id"] for p in paid] == ["RF-1015"]
