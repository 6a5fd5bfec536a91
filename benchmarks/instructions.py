"""Instructions: W1's step and W3's resume counted by valgrind's callgrind, beside the floor.

Wall time on a shared 2-core machine moves by 2x between runs; the instructions a step
executes do not. Each count runs a child Python under ``valgrind --tool=callgrind`` twice on
copies of the same files: once doing the work ``n`` times after a warm-up, once doing only the
warm-up (imports, connections, the untimed set-up), and divides the difference by the steps or
resumes done. ``PYTHONHASHSEED=0`` keeps the two runs alike.

- **W1**: ``N_RUNS`` runs of the 200-node counter chain (tiny state) on SQLite; the floor writes
  the same number of counter rows, each INSERT committed on its own.
- **W3**: ``N_RESUMES`` resumes of a 300-step run whose last node failed, each on a checkpointer
  opened (and its connection used once) before the count; the floor reads the run's newest
  row, decodes it and commits the step's row and a failure row, each resume on a connection
  opened (its schema read) before the count, as tether's: both prepare their statements once
  a resume, as a new process does. (Until 2026-12-03 the floor did its ten resumes on one
  connection, preparing its statements once for all ten; that count is still reported, as
  information.) Both counts (with and without
  the resumes) first do one resume uncounted: the modules a resume imports on first use are
  compiled once a process (from source when ``PYTHONDONTWRITEBYTECODE`` is set: ~27M
  instructions), which is not a cost of each resume, as the floor's imports are not.

SQLite NORMAL only: the instructions in the client do not depend on ``synchronous``. Reported
as skipped, saying so, when valgrind is not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import orjson

from .backends import Backend, SQLiteBackend, _bench_tmp, _SQLiteFloor
from .report import Section, Target

N_RUNS = 10
W1_STEPS = 200
W3_STEPS = 300
N_RESUMES = 10
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _tails(n: int) -> list[str]:
    return [f"t{i}" for i in range(n)]


def _w3_chain(store: Any, failed: set[str]) -> Any:
    from .workloads import _inc, linear_chain

    def tail(name: str) -> Any:
        def fn(state: dict[str, Any]) -> dict[str, Any]:
            if name not in failed:
                raise RuntimeError(f"{name} fails once")
            return {"n": state["n"] + 1}

        return fn

    return linear_chain("w3", store, [_inc] * W3_STEPS + [tail(t) for t in _tails(N_RESUMES + 2)])


def child(mode: str, directory: str, n: int) -> None:
    """Run in the child under callgrind: the warm-up, then the counted work ``n`` times."""
    from tether import SQLiteCheckpointer

    from .workloads import _inc, linear_chain

    db = os.path.join(directory, "tether.db")
    if mode == "w1-tether":
        chain = linear_chain("w1", SQLiteCheckpointer(db, synchronous="NORMAL"), [_inc] * W1_STEPS)
        chain.run({"n": 0})
        for _ in range(n):
            chain.run({"n": 0})
    elif mode == "w1-floor":
        floor = _SQLiteFloor(os.path.join(directory, "floor.db"), "NORMAL")
        for seq in range(1, W1_STEPS + 1):
            floor.write("warm-up", seq, orjson.dumps({"n": seq}), time.time())
        for run in range(n):
            for seq in range(1, W1_STEPS + 1):
                floor.write(f"run{run}", seq, orjson.dumps({"n": seq}), time.time())
    elif mode in ("w3-tether", "w3-open"):  # w3-open: the same without the resumes
        with open(os.path.join(directory, "eid"), encoding="ascii") as f:
            eid = f.read()
        failed: set[str] = set()
        for index, name in enumerate(_tails(n + 1)):
            store = SQLiteCheckpointer(db, synchronous="NORMAL")
            chain = _w3_chain(store, failed)
            store.get_run(eid)  # the connection, opened before the count in W3 too
            if mode == "w3-tether" or index == 0:  # the first: the warm-up (lazy imports)
                failed.add(name)
                result = chain.resume(eid)
                assert result.status == "failed", result
            store.close()
    elif mode == "w3-floor-warm":  # one connection: its statements prepared once
        floor = _SQLiteFloor(os.path.join(directory, "floor.db"), "NORMAL")
        floor.last("w3")
        for _ in range(n):
            _floor_resume(floor)
    elif mode in ("w3-floor", "w3-floor-open"):  # as W3 does: a connection a resume
        for index in range(n + 1):
            floor = _SQLiteFloor(os.path.join(directory, "floor.db"), "NORMAL")  # opened, used
            if mode == "w3-floor" or index == 0:
                _floor_resume(floor)
            floor.close()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def _floor_resume(floor: _SQLiteFloor) -> None:
    """The floor's resume: read the newest row, decode it, commit a step row and a failure."""
    seq, raw = floor.last("w3")
    value = orjson.loads(raw)["n"] + 1
    floor.write("w3", seq + 1, orjson.dumps({"n": value}), time.time())
    floor.write("w3", seq + 2, orjson.dumps({"n": value, "error": "x"}), time.time())


def _prepare(directory: str) -> None:
    """The W3 run (300 steps, then a node that failed) and the floor's rows of it."""
    from tether import SQLiteCheckpointer

    store = SQLiteCheckpointer(os.path.join(directory, "tether.db"), synchronous="NORMAL")
    result = _w3_chain(store, set()).run({"n": 0})
    assert result.status == "failed", result
    store.close()
    with open(os.path.join(directory, "eid"), "w", encoding="ascii") as f:
        f.write(result.execution_id)
    floor = _SQLiteFloor(os.path.join(directory, "floor.db"), "NORMAL")
    for seq in range(1, W3_STEPS + 2):
        floor.write("w3", seq, orjson.dumps({"n": seq}), time.time())
    floor.close()


def _count(mode: str, source: str, n: int) -> int:
    """Instructions of one child run on a copy of ``source``."""
    with tempfile.TemporaryDirectory(dir=_bench_tmp()) as work:
        for name in os.listdir(source):
            shutil.copy(os.path.join(source, name), work)
        out = os.path.join(work, "callgrind.out")
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "benchmarks.instructions",
                mode,
                work,
                str(n),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            timeout=1800,
            check=False,
        )
    found = _COLLECTED.findall(proc.stderr)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"callgrind run {mode} failed: {proc.stderr.strip()[-300:]}")
    return int(found[-1])


def _per(mode: str, source: str, n: int, per: int, baseline: str | None = None) -> float:
    """Instructions per unit: ``mode`` doing ``n`` times ``per`` units, minus ``baseline``
    (default: ``mode`` doing none) with the same ``n``."""
    base = _count(baseline, source, n) if baseline else _count(mode, source, 0)
    return (_count(mode, source, n) - base) / (n * per)


def instructions(backend: Backend) -> Section:
    """Instructions per W1 step and per W3 resume, tether and floor (SQLite NORMAL)."""
    section = Section("INSTRUCTIONS", backend.name)
    if not (isinstance(backend, SQLiteBackend) and backend.synchronous == "NORMAL"):
        section.skipped = "SQLite NORMAL only (client instructions do not depend on synchronous)"
        return section
    if shutil.which("valgrind") is None:
        section.skipped = "valgrind is not installed (apt-get install valgrind): not measured"
        return section
    source = tempfile.mkdtemp(prefix="tether-instr-", dir=_bench_tmp())
    try:
        _prepare(source)
        w1 = _per("w1-tether", source, N_RUNS, W1_STEPS)
        w1_floor = _per("w1-floor", source, N_RUNS, W1_STEPS)
        w3 = _per("w3-tether", source, N_RESUMES, 1, baseline="w3-open")
        w3_floor = _per("w3-floor", source, N_RESUMES, 1, baseline="w3-floor-open")
        w3_floor_warm = _per("w3-floor-warm", source, N_RESUMES, 1)
    finally:
        shutil.rmtree(source, ignore_errors=True)
    section.add("W1 tether instructions / step", "instr", [w1])
    section.add("W1 floor instructions / step", "instr", [w1_floor])
    section.add("W1 tether ÷ floor", "x", [w1 / w1_floor], Target("<=", 2))
    section.add("W3 tether instructions / resume", "instr", [w3])
    section.add("W3 floor instructions / resume", "instr", [w3_floor])
    section.add(
        "W3 floor, one connection for all resumes, instructions / resume", "instr", [w3_floor_warm]
    )
    section.add("W3 tether ÷ floor", "x", [w3 / w3_floor], Target("<=", 4))
    return section


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
