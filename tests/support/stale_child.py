"""Start a run that commits one step and then blocks in its second node, so a test can SIGKILL
this process while the run is ``running`` (a run whose process died).

Usage: python -m tests.support.stale_child <db_url> <execution_id> <lease_seconds> <marker>

The marker file appears once the first step committed and the second node is running.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tether
from tests.support.proc import ROOT, child_env
from tests.support.waiting import wait_for


def build(store: tether.Checkpointer, marker: str = "") -> tether.Chain:
    """``stuck``: ``first`` -> ``block`` (waits for SIGKILL when ``marker`` is given) ->
    ``last``."""

    def first(state: dict[str, Any]) -> dict[str, Any]:
        return {"first": True}

    def block(state: dict[str, Any]) -> dict[str, Any]:
        if marker:
            Path(marker).write_text("running")
            while True:
                time.sleep(0.05)
        return {"blocked": False}

    def last(state: dict[str, Any]) -> dict[str, Any]:
        return {"last": True}

    chain = tether.Chain("stuck", store)
    chain.add_node("first", first).add_node("block", block).add_node("last", last)
    chain.add_edge("first", "block").add_edge("block", "last")
    return chain


def start_stuck(
    db_url: str, eid: str, lease_seconds: float, tmp_path: Path
) -> subprocess.Popen[bytes]:
    """Start this program for ``eid``; returns once the run blocks in its second node."""
    marker = tmp_path / f"{eid}.running"
    argv = [db_url, eid, str(lease_seconds), str(marker)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.stale_child", *argv],
        env=child_env(),
        cwd=ROOT,
    )
    try:
        wait_for(marker.exists, f"{eid} to block in its second node", timeout=60)
    except AssertionError:
        proc.kill()
        proc.wait()
        raise
    return proc


def main(argv: list[str]) -> int:
    url, eid, lease_seconds, marker = argv[:4]
    store = tether.connect(url)
    chain = build(store, marker)
    chain.lease_seconds = float(lease_seconds)
    chain.run({}, execution_id=eid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
