"""``python -m benchmarks.cli_show``: how long ``tether runs show`` takes on a 300-checkpoint run.

The target is under one second, end to end, for an operator typing the command: the whole
process (interpreter start, imports, opening the store, reading 300 rows with their full
states, diffing each against the one before, drawing the table) is timed, and so is the same
work in-process without the interpreter start. The run is a chain of 300 nodes whose state
grows by ~1 KB per step (W2's shape), on SQLite, then on Postgres when a server answers
``TETHER_TEST_PG_DSN``. Prints a markdown table; not a test (nothing asserts).
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tether import Chain, Checkpointer, SQLiteCheckpointer

STEPS = 300
REPS = int(os.environ.get("TETHER_BENCH_REPS", "5"))
TARGET_SECONDS = 1.0
PG_DSN = os.environ.get("TETHER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parents[1]


def _chain(store: Checkpointer) -> Chain:
    chain = Chain("bench_show", store)

    def step(i: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def fn(state: dict[str, Any]) -> dict[str, Any]:
            return {"items": [*state.get("items", []), "x" * 1000], "i": i}

        return fn

    for i in range(STEPS - 1):  # plus the run_end row: 300 checkpoints
        chain.add_node(f"s{i:03d}", step(i))
        if i:
            chain.add_edge(f"s{i - 1:03d}", f"s{i:03d}")
    return chain


def _show_argv(url: str, execution_id: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tether.cli", "runs", "show", execution_id, "--db", url, *extra]


def _time_process(argv: list[str]) -> float:
    env = {**os.environ, "COLUMNS": "200"}
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr}")
    return elapsed


def _time_in_process(url: str, execution_id: str) -> float:
    from tether.cli._app import invoke

    sink = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(sink):
        code = invoke(["runs", "show", execution_id, "--db", url, "--json"])
    elapsed = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"runs show exited {code}")
    return elapsed


@contextlib.contextmanager
def _sqlite() -> Iterator[tuple[Checkpointer, str]]:
    with tempfile.TemporaryDirectory(prefix="tether-bench-show-") as tmp:
        path = Path(tmp) / "show.db"
        store = SQLiteCheckpointer(path)
        try:
            yield store, f"sqlite:///{path}"
        finally:
            store.close()


@contextlib.contextmanager
def _postgres() -> Iterator[tuple[Checkpointer, str] | None]:
    try:
        import psycopg

        from tether.store.postgres import PostgresCheckpointer

        with psycopg.connect(PG_DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception:
        yield None
        return
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    store = PostgresCheckpointer(PG_DSN, schema=schema)
    try:
        yield store, f"{PG_DSN}?schema={schema}"
    finally:
        store.close()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _measure(name: str, store: Checkpointer, url: str) -> list[str]:
    result = _chain(store).run({})
    rows = len(store.list(result.execution_id))
    eid = result.execution_id
    table = [_time_process(_show_argv(url, eid)) for _ in range(REPS)]
    as_json = [_time_process(_show_argv(url, eid, "--json")) for _ in range(REPS)]
    inproc = [_time_in_process(url, eid) for _ in range(REPS)]
    floor = [_time_process([sys.executable, "-c", "import tether.cli._app"]) for _ in range(REPS)]
    cells = []
    for label, samples in (
        ("`runs show` (table), whole process", table),
        ("`runs show --json`, whole process", as_json),
        ("`runs show --json`, in-process", inproc),
        ("interpreter + CLI imports alone", floor),
    ):
        median = statistics.median(samples)
        verdict = "" if "alone" in label else ("ok" if median < TARGET_SECONDS else "SLOW")
        cells.append(
            f"| {name} | {rows} | {label} | {median * 1000:.0f} | {max(samples) * 1000:.0f} "
            f"| {verdict} |"
        )
    return cells


def main() -> int:
    """Print the table; returns 0 (a benchmark, not a test)."""
    lines = [
        f"## `tether runs show` of a {STEPS}-checkpoint run (target < {TARGET_SECONDS:.0f} s)",
        "",
        f"{REPS} repetitions each; state grows ~1 KB per step.",
        "",
        "| backend | rows | what | median ms | max ms | |",
        "|---|---|---|---|---|---|",
    ]
    with _sqlite() as (store, url):
        lines += _measure("SQLite", store, url)
    with _postgres() as pg:
        if pg is None:
            lines.append("| Postgres | - | no server at TETHER_TEST_PG_DSN | - | - | skipped |")
        else:
            lines += _measure("Postgres", *pg)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
