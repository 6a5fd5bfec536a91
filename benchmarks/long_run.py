"""W6: the agent shape at length. One run of 10,000 steps, each appending one 1 KB message to
a list in state, beside the raw database's floor: an append-only log of the same messages.

Measured in a child process (so that resident memory is this run's alone), per backend:

- **flatness**: mean ms per step over the last 10% of steps ÷ the first 10% (a step = from one
  node's start to the next node's start, so it holds the node and its checkpoint); the same
  ratio of the thread's CPU time (a diagnostic: wall time on a loaded machine is noisy); the
  node's own body run alone with no store (its ``[*log, msg]`` copy grows with the history:
  ~13 ms a step at 100,000 messages on this machine) and tether's step minus it; the floor's
  own ratio beside them, and tether's mean step ÷ the floor's;
- **bytes at rest**: the store after the run (SQLite: file + WAL after a TRUNCATE checkpoint;
  Postgres: every tether relation) ÷ the floor's table holding the same messages, one row each;
- **resident memory growth**: ``VmRSS`` after the run (its result still held) minus before;
- **resume**: a fresh checkpointer (connection opened untimed) resumes the run after its last
  node failed: it reads the newest state, runs one more step (appending one message) and
  records the next failure. The floor does the same on a warm connection: reads the whole log
  back (one SELECT, each message decoded), then commits the step's row and a failure row.
  Median of :data:`RESUMES` of each, alternating.

The node returns the grown list (``{"log": [*log, message]}``), the ordinary way to write it.
One repetition: each run is long and its numbers are means over 1,000 steps.

``TETHER_BENCH_W6_LONG=1`` adds the same run at 100,000 steps on SQLite NORMAL (about 100 MB
of messages; it takes minutes, so it is opt-in).
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import orjson

from .backends import Backend, SQLiteBackend, floor_from_spec
from .memory import _open, _status_bytes
from .report import Section, Target, ratios

STEPS = 10_000
LONG_STEPS = 100_000
LONG = os.environ.get("TETHER_BENCH_W6_LONG") == "1"
MESSAGE_BYTES = 1024
RESUMES = 5
_POOL = 512  # distinct random bodies; each message is made unique by its number


def messages(n: int) -> list[str]:
    """``n`` distinct 1 KB messages of random letters, digits and spaces (fixed seed)."""
    from .workloads import _chunks

    pool = _chunks(_POOL, MESSAGE_BYTES)
    return [f"{i:09d} " + pool[i % _POOL][10:] for i in range(n)]


def _chain(
    store: Any,
    texts: list[str],
    steps: int,
    marks: list[float],
    failed: set[str],
    cpu_marks: list[float] | None = None,
) -> Any:
    """``steps`` nodes that each append one message, then ``RESUMES + 1`` nodes that append one
    too but raise on their first call (each resume runs one and stops at the next)."""
    from .workloads import linear_chain

    def append(i: int) -> Any:
        def fn(state: dict[str, Any]) -> dict[str, Any]:
            marks.append(time.perf_counter())
            if cpu_marks is not None:
                cpu_marks.append(time.thread_time())
            return {"log": [*state["log"], texts[i]]}

        return fn

    def tail(i: int) -> Any:
        name = f"t{i}"

        def fn(state: dict[str, Any]) -> dict[str, Any]:
            if name not in failed:
                failed.add(name)
                raise RuntimeError(f"{name} fails once")
            return {"log": [*state["log"], texts[steps + i]]}

        return fn

    fns = [append(i) for i in range(steps)] + [tail(i) for i in range(RESUMES + 1)]
    return linear_chain("w6", store, fns)


def _tenths(marks: list[float]) -> tuple[float, float, float]:
    """Mean ms per step over the first 10% of intervals, the last 10%, and all of them."""
    steps = [b - a for a, b in itertools.pairwise(marks)]
    tenth = max(1, len(steps) // 10)
    return (
        sum(steps[:tenth]) / tenth * 1e3,
        sum(steps[-tenth:]) / tenth * 1e3,
        sum(steps) / len(steps) * 1e3,
    )


def _floor_resume(floor: Any, execution_id: str, text: str) -> float:
    t = time.perf_counter()
    log = [orjson.loads(b) for b in floor.history(execution_id)]
    seq = len(log)
    floor.write(execution_id, seq + 1, orjson.dumps(text), time.time())
    floor.write(execution_id, seq + 2, orjson.dumps({"error": "fails once"}), time.time())
    return time.perf_counter() - t


def child(spec: dict[str, Any], steps: int) -> dict[str, Any]:
    """Run in the child: the measurement itself."""
    texts = messages(steps + RESUMES + 1)
    store = _open(spec)
    floor = floor_from_spec(spec)
    marks: list[float] = []
    cpu_marks: list[float] = []
    failed: set[str] = set()
    chain = _chain(store, texts, steps, marks, failed, cpu_marks)
    gc.collect()
    before = _status_bytes("VmRSS")
    result = chain.run({"log": []})
    assert result.status == "failed" and len(result.state["log"]) == steps, result.status
    gc.collect()
    after = _status_bytes("VmRSS")
    peak = _status_bytes("VmHWM")
    eid = result.execution_id
    del result
    first, last, mean = _tenths(marks)
    cpu_first, cpu_last, _ = _tenths(cpu_marks)

    fmarks = []
    for seq in range(1, steps + 1):
        fmarks.append(time.perf_counter())
        floor.write(eid, seq, orjson.dumps(texts[seq - 1]), time.time())
    fmarks.append(time.perf_counter())
    floor.write(eid, steps + 1, orjson.dumps({"error": "t0 fails once"}), time.time())
    f_first, f_last, f_mean = _tenths(fmarks)

    # The node's own work with no store: it copies the whole list every step (``[*log, msg]``
    # touches every message to count a reference), which grows with the history by itself.
    nmarks: list[float] = []
    log: list[str] = []
    for i in range(steps):
        nmarks.append(time.perf_counter())
        log = [*log, texts[i]]
    nmarks.append(time.perf_counter())
    del log
    n_first, n_last, _ = _tenths(nmarks)

    resumes, floor_resumes = [], []
    for r in range(RESUMES):
        fresh = _open(spec)
        fresh.get_run(eid)  # open the connection untimed
        again = _chain(fresh, texts, steps, [], failed)
        t = time.perf_counter()
        res = again.resume(eid)
        resumes.append((time.perf_counter() - t) * 1e3)
        assert res.status == "failed" and len(res.state["log"]) == steps + r + 1, res.status
        fresh.close()
        floor_resumes.append(_floor_resume(floor, eid, texts[steps + r]) * 1e3)
    floor_bytes = floor.size()
    floor.close()
    store.close()
    return {
        "first": first,
        "last": last,
        "mean": mean,
        "cpu_first": cpu_first,
        "cpu_last": cpu_last,
        "node_first": n_first,
        "node_last": n_last,
        "floor_first": f_first,
        "floor_last": f_last,
        "floor_mean": f_mean,
        "rss_before": before,
        "rss_after": after,
        "rss_peak": peak,
        "resume_ms": statistics.median(resumes),
        "floor_resume_ms": statistics.median(floor_resumes),
        "floor_bytes": floor_bytes,
        "message_bytes": sum(len(t) for t in texts[: steps + RESUMES]),
    }


def _measure(backend: Backend, steps: int, label: str) -> Section:
    section = Section(label, backend.name)
    with backend.fresh() as handle:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.long_run", json.dumps(handle.spec()), str(steps)],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if proc.returncode != 0:
            section.skipped = f"child failed: {proc.stderr.strip().splitlines()[-1:]}"
            return section
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        size = handle.size()
    mb = 1024 * 1024
    section.add("first 10% of steps", "ms/step", [out["first"]])
    section.add("last 10% of steps", "ms/step", [out["last"]])
    section.add("last10% ÷ first10%", "x", [out["last"] / out["first"]], Target("<=", 1.2))
    section.add(
        "CPU last10% ÷ first10% (diagnostic)",
        "x",
        [out["cpu_last"] / out["cpu_first"]],
        note="the run's thread CPU per step, which the machine's load does not stretch",
    )
    section.add(
        "node alone, no store: last10% ÷ first10% (diagnostic)",
        "x",
        [out["node_last"] / out["node_first"]],
        note=f"the node's own list copy: {out['node_first']:.3g} -> {out['node_last']:.3g} ms/step",
    )
    section.add(
        "tether minus node alone: last10% ÷ first10% (diagnostic)",
        "x",
        [(out["last"] - out["node_last"]) / (out["first"] - out["node_first"])],
        note="what the store adds to a step, at the end of the run against its start",
    )
    section.add("floor last10% ÷ first10%", "x", [out["floor_last"] / out["floor_first"]])
    section.add("tether step ÷ floor step (mean)", "x", [out["mean"] / out["floor_mean"]])
    section.add("store bytes (file / relations)", "B", [size.file_bytes])
    section.add("floor bytes (append-only log)", "B", [out["floor_bytes"]])
    section.add(
        "store bytes ÷ floor bytes",
        "x",
        ratios([size.file_bytes], [out["floor_bytes"]]),
        Target("<=", 1.5),
    )
    section.add(
        "RSS growth (after - before, result held)",
        "MB",
        [(out["rss_after"] - out["rss_before"]) / mb],
        Target("<=", 50) if steps == STEPS else None,
        "" if steps == STEPS else "the state itself holds about 100 MB at 100,000 steps",
    )
    section.add(
        "peak RSS growth (VmHWM - before)", "MB", [(out["rss_peak"] - out["rss_before"]) / mb]
    )
    section.add(f"resume (median of {RESUMES}), fresh checkpointer", "ms", [out["resume_ms"]])
    section.add(f"floor resume (median of {RESUMES})", "ms", [out["floor_resume_ms"]])
    section.add(
        "resume ÷ floor resume",
        "x",
        ratios([out["resume_ms"]], [out["floor_resume_ms"]]),
        Target("<=", 2),
    )
    return section


def w6_long_run(backend: Backend) -> Section:
    """W6 at 10,000 steps on ``backend``."""
    return _measure(backend, STEPS, "W6")


def w6_long_run_100k(backend: Backend) -> Section:
    """W6 at 100,000 steps, SQLite NORMAL only, when ``TETHER_BENCH_W6_LONG=1``."""
    if not (isinstance(backend, SQLiteBackend) and backend.synchronous == "NORMAL"):
        return Section("W6-100K", backend.name, skipped="SQLite NORMAL only")
    if not LONG:
        return Section("W6-100K", backend.name, skipped="opt-in: TETHER_BENCH_W6_LONG=1")
    return _measure(backend, LONG_STEPS, "W6-100K")


if __name__ == "__main__":
    print(json.dumps(child(json.loads(sys.argv[1]), int(sys.argv[2]))))
