"""The LangGraph example runs offline: a thread pauses, a fresh process approves it through the
runner, and a second thread is answered the LangGraph way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.proc import ROOT, child_env


def test_the_langgraph_example_pauses_is_approved_in_a_fresh_process_and_answers_langgraph_style(
    tmp_path: Path,
) -> None:
    env = child_env(TETHER_DATABASE_URL=f"sqlite:///{tmp_path / 'd.db'}")
    proc = subprocess.run(
        [sys.executable, "examples/langgraph/support.py"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "paused at approve: {'refund': 'RF-1015', 'amount': '725.00'}" in proc.stdout
    assert "approved in a fresh process: completed, paid 725.00" in proc.stdout
    assert "answered with Command(resume=...): paid 0" in proc.stdout
