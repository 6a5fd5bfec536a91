"""Memory: resident-set growth over one 10,000-step run, measured in a child process.

The child opens the store the parent created, warms up with a 200-step run, then runs one node
that loops on itself 9,999 times (10,000 checkpoints) and reports ``VmRSS`` before and after
and the peak ``VmHWM``, in bytes, as one JSON line. A child keeps the other workloads' memory
out of the numbers. One repetition per backend: the run is long and the number is stable.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from typing import Any

from .backends import Backend
from .report import Section, Target

STEPS = 10_000


def _status_bytes(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _open(spec: dict[str, Any]) -> Any:
    if spec["kind"] == "sqlite":
        from tether import SQLiteCheckpointer

        return SQLiteCheckpointer(spec["path"], synchronous=spec["synchronous"])
    from tether.store.postgres import PostgresCheckpointer

    return PostgresCheckpointer(spec["dsn"], schema=spec["schema"])


def child(spec: dict[str, Any]) -> dict[str, int]:
    """Run in the child: the measurement itself."""
    from tether import Chain

    from .workloads import _inc, linear_chain

    store = _open(spec)
    linear_chain("warm-up", store, [_inc] * 200).run({"n": 0})
    chain = Chain("memory", store)
    chain.add_node("tick", _inc)
    chain.add_edge("tick", "tick", max_iterations=STEPS - 1)
    gc.collect()
    before = _status_bytes("VmRSS")
    result = chain.run({"n": 0})
    assert result.status == "completed" and result.output["n"] == STEPS, result
    gc.collect()
    return {
        "before": before,
        "after": _status_bytes("VmRSS"),
        "peak": _status_bytes("VmHWM"),
    }


def memory(backend: Backend) -> Section:
    """Resident memory growth of a 10,000-step run (target: < 50 MB)."""
    section = Section("Memory", backend.name)
    with backend.fresh() as handle:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.memory", json.dumps(handle.spec())],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if proc.returncode != 0:
        section.skipped = f"child failed: {proc.stderr.strip().splitlines()[-1:]}"
        return section
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    mb = 1024 * 1024
    section.add("RSS before the run", "MB", [out["before"] / mb])
    section.add(
        "RSS growth (after - before)", "MB", [(out["after"] - out["before"]) / mb], Target("<", 50)
    )
    section.add(
        "peak RSS growth (VmHWM - before)",
        "MB",
        [(out["peak"] - out["before"]) / mb],
        Target("<", 50),
    )
    return section


if __name__ == "__main__":
    print(json.dumps(child(json.loads(sys.argv[1]))))
