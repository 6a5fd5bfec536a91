"""Peers: LangGraph (with its SQLite and Postgres checkpointers) on the same workloads.

The peers live in their own venv, ``benchmarks/.peers-venv``, created here on first use when
the package registry answers, so that their dependencies never touch tether's. Their
workloads run as a child process (:mod:`benchmarks.peer_worker`) and the results are compared
with ours as peer ÷ ours (above 1: the peer costs more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from .backends import PG_DSN, _bench_tmp
from .report import REPS, Section, ratios

VENV = Path(__file__).parent / ".peers-venv"
PACKAGES = (
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "psycopg[binary]",
    "psycopg-pool",
)
PEER_BACKENDS = ("SQLite NORMAL", "SQLite FULL", "Postgres")


def _python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> str | None:
    """Create and fill the peers' venv if needed; the reason it cannot be used, or ``None``."""
    py = _python()
    if py.exists():
        probe = subprocess.run(
            [str(py), "-c", "import langgraph.checkpoint.sqlite, langgraph.checkpoint.postgres"],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return None
    with tempfile.TemporaryDirectory() as tmp:
        check = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, "langgraph"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if check.returncode != 0:
        return f"the registry does not serve langgraph ({_last_line(check.stderr)})"
    print("peers: creating benchmarks/.peers-venv (one time) ...", flush=True)
    venv.create(VENV, with_pip=True, clear=True)
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", *PACKAGES],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if install.returncode != 0:
        return f"pip install failed ({_last_line(install.stderr)})"
    return None


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def run_peers(ours: dict[str, dict[str, list[float]]]) -> list[Section]:
    """Run the peer workloads and compare with ``ours`` (backend -> metric -> values).

    ``ours`` uses the keys the peer worker reports: ``w1_ms``, ``w1_cpu_ms``, ``w2_last_ms``,
    ``w2_row_bytes``, ``w2_file_bytes``.
    """
    sections = [Section("Peers", "fastaiagent", skipped="not wired in this first cut")]
    reason = ensure_venv()
    if reason is not None:
        return [Section("Peers", "LangGraph", skipped=reason), *sections]
    with tempfile.TemporaryDirectory(dir=_bench_tmp()) as tmp:
        proc = subprocess.run(
            [
                str(_python()),
                str(Path(__file__).with_name("peer_worker.py")),
                str(REPS),
                tmp,
                PG_DSN,
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )
    if proc.returncode != 0:
        return [
            Section("Peers", "LangGraph", skipped=f"worker failed: {_last_line(proc.stderr)}"),
            *sections,
        ]
    peer = json.loads(proc.stdout.strip().splitlines()[-1])
    out = []
    for backend in PEER_BACKENDS:
        s = Section("Peers", f"LangGraph / {backend}")
        got = peer.get(backend, {"skipped": "not run"})
        mine = ours.get(backend)
        if "skipped" in got:
            s.skipped = got["skipped"]
        elif mine is None:
            s.skipped = f"tether did not run on {backend}"
        else:
            s.add("W1 wall / step", "ms", got["w1_ms"])
            s.add("W1 wall: peer ÷ ours", "x", ratios(got["w1_ms"], mine["w1_ms"]))
            s.add("W1 client CPU / step", "ms", got["w1_cpu_ms"])
            s.add("W1 CPU: peer ÷ ours", "x", ratios(got["w1_cpu_ms"], mine["w1_cpu_ms"]))
            s.add("W2 last 50 steps", "ms/step", got["w2_last_ms"])
            s.add("W2 last50: peer ÷ ours", "x", ratios(got["w2_last_ms"], mine["w2_last_ms"]))
            s.add("W2 row bytes", "B", got["w2_row_bytes"])
            s.add(
                "W2 row bytes: peer ÷ ours", "x", ratios(got["w2_row_bytes"], mine["w2_row_bytes"])
            )
            s.add(
                "W2 store bytes: peer ÷ ours",
                "x",
                ratios(got["w2_file_bytes"], mine["w2_file_bytes"]),
            )
        out.append(s)
    return [*out, *sections]
