"""``python -m benchmarks``: run every workload on every backend, print and save the tables.

``TETHER_BENCH_ONLY=W1,W2,PEERS`` runs only the named workloads (``PEERS``: the peer
comparison, after the others, with ratios against whichever of W1-W3 ran). Only a full run at
full repetitions writes ``results/latest.md``: a partial or ``TETHER_BENCH_QUICK=1`` run only
prints.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from . import instructions, long_run, memory, openai_agents, peers, workloads
from . import langgraph as langgraph_bench
from . import pydantic_ai as pydantic_ai_bench
from .backends import Backend, _bench_tmp, all_backends
from .report import QUICK, REPS, Section, render

RESULTS = Path(__file__).parent / "results"

WORKLOADS: list[tuple[str, Callable[[Backend], Section]]] = [
    ("W1: 200-node linear chain, tiny state", workloads.w1_linear),
    ("W2: 300 steps appending 1 KB each", workloads.w2_growing),
    ("W3: resume latency after a failure", workloads.w3_resume),
    ("W4: 16 and 64 concurrent runs of 50 steps (Postgres)", workloads.w4_concurrent),
    ("W5: agent, 200 turns", workloads.w5_agent),
    (
        "PYDANTIC_AI: pydantic-ai run, durable vs bare (local model server)",
        pydantic_ai_bench.pydantic_ai,
    ),
    (
        "OPENAI_AGENTS: OpenAI Agents SDK run, durable vs bare (local model server)",
        openai_agents.openai_agents,
    ),
    (
        "LANGGRAPH: LangGraph graphs on TetherSaver vs LangGraph's own savers (W2, W1, W3)",
        langgraph_bench.langgraph,
    ),
    ("Memory: one 10,000-step run", memory.memory),
    (
        "W6: 10,000 steps appending a 1 KB message each, beside an append-only log",
        long_run.w6_long_run,
    ),
    ("W6-100K: the same at 100,000 steps (SQLite NORMAL)", long_run.w6_long_run_100k),
    (
        "INSTRUCTIONS: W1 step and W3 resume, counted by valgrind callgrind",
        instructions.instructions,
    ),
]


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def header() -> str:
    """What the numbers were measured on, and why they are noisy."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    dirty = " (uncommitted changes under src/)" if _git("status", "--porcelain", "src") else ""
    return "\n".join(
        [
            "# tether benchmarks",
            "",
            f"- run at {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC on commit "
            f"`{_git('rev-parse', '--short', 'HEAD')}`"
            f"{dirty}",
            f"- Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
            f"{platform.system()} {platform.release()}, {os.cpu_count()} cores, "
            f"load average at start {load}",
            f"- {REPS} repetitions per measurement{' (TETHER_BENCH_QUICK=1)' if QUICK else ''}; "
            "median, min-max over repetitions. A ratio of tether to its floor pairs each "
            "repetition with the floor's, measured side by side in one process; a peer ratio "
            "is the peer's median ÷ ours, from a separate process run after ours.",
            "- **Noise:** a 2-core machine shared with other engineers' test runs; single "
            "numbers can move by 2x between runs. Read the side-by-side ratios before the "
            "absolute times.",
            "- floor = the same database through the plain driver: one small-row INSERT "
            "committed on its own per step (sqlite3 with the same PRAGMAs; psycopg).",
            "",
        ]
    )


def _selection() -> set[str] | str:
    """The workloads ``TETHER_BENCH_ONLY`` names (upper case; empty: all), or why it is wrong."""
    raw = os.environ.get("TETHER_BENCH_ONLY")
    if raw is None:
        return set()
    only = {w.strip().upper() for w in raw.split(",") if w.strip()}
    valid = [title.split(":")[0].upper() for title, _ in WORKLOADS] + ["PEERS"]
    unknown = sorted(only - set(valid))
    if not only or unknown:
        return (
            f"TETHER_BENCH_ONLY={raw!r}: {'unknown ' + str(unknown) if unknown else 'empty'}; "
            f"name one or more of {', '.join(valid)}, comma-separated"
        )
    return only


def main() -> int:
    only = _selection()
    if isinstance(only, str):
        print(only, file=sys.stderr)
        return 2
    started = time.perf_counter()
    backends = all_backends()
    unavailable = {b.name: b.unavailable() for b in backends}
    doc = [header()]
    print(doc[0], flush=True)
    all_sections: list[Section] = []
    for title, fn in WORKLOADS:
        if only and title.split(":")[0].upper() not in only:
            continue
        sections = []
        for b in backends:
            reason = unavailable[b.name]
            if reason is not None:
                sections.append(Section(title.split(":")[0], b.name, skipped=reason))
                continue
            t = time.perf_counter()
            try:
                sections.append(fn(b))
            except Exception as exc:  # one broken workload must not hide the others
                traceback.print_exc()
                sections.append(
                    Section(
                        title.split(":")[0], b.name, skipped=f"error: {type(exc).__name__}: {exc}"
                    )
                )
            print(
                f"  ({title.split(':')[0]} on {b.name}: {time.perf_counter() - t:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
        table = render(title, sections)
        print(table, flush=True)
        doc.append(table)
        all_sections.extend(sections)

    if not only or "PEERS" in only:
        ours = _ours_for_peers(all_sections)
        t = time.perf_counter()
        try:
            peer_sections = peers.run_peers(ours)
        except Exception as exc:  # the peers must not cost the results measured above
            traceback.print_exc()
            peer_sections = [Section("Peers", "all peers", skipped=f"{type(exc).__name__}: {exc}")]
        print(f"  (peers: {time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
        table = render(
            "Peers: LangGraph and fastaiagent on W1, W2 and W3 (peer ÷ ours: above 1, the peer "
            "costs more)",
            peer_sections,
        )
        print(table, flush=True)
        doc.append(table)
        all_sections.extend(peer_sections)

    if only or QUICK:  # for looking: only a full run at full repetitions replaces the results
        print(_summary(all_sections, time.perf_counter() - started))
        why = "a partial run (TETHER_BENCH_ONLY)" if only else "a quick run (TETHER_BENCH_QUICK=1)"
        print(f"{why}: benchmarks/results/latest.md left as it was", file=sys.stderr)
        return 0
    shutil.rmtree(_bench_tmp(), ignore_errors=True)
    summary = _summary(all_sections, time.perf_counter() - started)
    print(summary)
    doc.append(summary)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.md").write_text("\n".join(doc), encoding="utf-8")
    (RESULTS / "latest.json").write_text(
        json.dumps(
            [
                {
                    "workload": s.workload,
                    "backend": s.backend,
                    "skipped": s.skipped,
                    "metrics": [m.as_dict() for m in s.metrics],
                }
                for s in all_sections
            ],
            indent=1,
        ),
        encoding="utf-8",
    )
    return 0


def _ours_for_peers(sections: list[Section]) -> dict[str, dict[str, list[float]]]:
    """Our W1, W2 and W3 numbers under the keys the peer workers use: backend -> key -> values.

    A backend maps only the keys of the workloads that ran on it.
    """
    keys = {
        ("W1", "tether wall / step"): "w1_ms",
        ("W1", "tether client CPU / step"): "w1_cpu_ms",
        ("W2", "last 50 steps"): "w2_last_ms",
        ("W2", "row bytes"): "w2_row_bytes",
        ("W2", "store bytes (file / relations)"): "w2_file_bytes",
        ("W3", "resume, 300-step run, fresh checkpointer"): "w3_resume_ms",
    }
    out: dict[str, dict[str, list[float]]] = {}
    for s in sections:
        for m in s.metrics:
            key = keys.get((s.workload, m.name))
            if key is not None:
                out.setdefault(s.backend, {})[key] = m.values
    return out


def _summary(sections: list[Section], seconds: float) -> str:
    lines = ["### Targets", ""]
    for s in sections:
        for m in s.metrics:
            if m.target is not None:
                lines.append(
                    f"- {m.verdict} {s.workload} / {s.backend}: {m.name} = "
                    f"{m.median:.3g} {m.unit} (target {m.target})"
                )
    met = sum(1 for s in sections for m in s.metrics if m.verdict == "✓")
    total = sum(1 for s in sections for m in s.metrics if m.target is not None)
    lines += ["", f"{met} of {total} targets met; whole bench took {seconds:.0f} s.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
