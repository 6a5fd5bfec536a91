"""What the peer workers share (run by ``benchmarks/.peers-venv/bin/python``, beside them as a
plain module: it never imports tether or the ``benchmarks`` package)."""

from __future__ import annotations

import itertools
import random
import string
from collections.abc import Callable
from typing import Any

# The workloads' sizes, as in tether's benchmarks/workloads.py.
W1_STEPS = 200
W2_STEPS = 300
W3_STEPS = 300


def w2_chunks() -> list[str]:
    """W2's appended texts: ``W2_STEPS`` strings of 1,024 random letters, digits and spaces,
    the same bytes as tether's W2 (same seed and alphabet)."""
    rng = random.Random(8)
    alphabet = string.ascii_letters + string.digits + "      "
    return ["".join(rng.choices(alphabet, k=1024)) for _ in range(W2_STEPS)]


def first_last_ms(marks: list[float]) -> tuple[float, float]:
    """W2's ms per step over the first and the last 50 steps, from the ``time.perf_counter``
    seconds at which each node started. A step runs from one node's start to the next, as in
    tether's W2, so the last node's checkpoint, the run end and the return are in neither."""
    steps = [b - a for a, b in itertools.pairwise(marks)]
    return sum(steps[:50]) / 50 * 1e3, sum(steps[-50:]) / 50 * 1e3


def each_backend(
    sqlite_backend: Callable[[str, str, int], dict[str, Any]],
    postgres_backend: Callable[[str, int], dict[str, Any]],
    reps: int,
    tmp: str,
    dsn: str,
) -> dict[str, Any]:
    """Run a peer on SQLite NORMAL, SQLite FULL and Postgres.

    Args:
        sqlite_backend: ``(tmp, synchronous, reps)`` -> that backend's metrics.
        postgres_backend: ``(dsn, reps)`` -> that backend's metrics.

    Returns:
        Backend name -> its metrics (name -> values), or ``{"skipped": reason}`` when it raised:
        a backend that fails is reported (the parent prints the reason), never hidden.
    """
    results: dict[str, Any] = {}
    runs: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        *(
            (f"SQLite {sync}", lambda sync=sync: sqlite_backend(tmp, sync, reps))
            for sync in ("NORMAL", "FULL")
        ),
        ("Postgres", lambda: postgres_backend(dsn, reps)),
    ]
    for name, run in runs:
        try:
            results[name] = run()
        except Exception as exc:
            results[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
    return results


def pg_schema_bytes(conn: Any, schema: str) -> tuple[int, int]:
    """Space the tables of ``schema`` use, as tether's bench measures its own Postgres store.

    Args:
        conn: a psycopg connection (any row factory) to the server holding ``schema``.

    Returns:
        ``(store_bytes, row_bytes)``: ``pg_total_relation_size`` (heap, TOAST, indexes) and
        ``pg_column_size`` of every row, each summed over the schema's tables.
    """
    from psycopg.rows import tuple_row

    cur = conn.cursor(row_factory=tuple_row)
    tables = [
        r[0]
        for r in cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
    ]
    store = rows = 0
    for t in tables:
        q = f'"{schema}"."{t}"'
        row_sizes = f"SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {q} t"
        store += cur.execute("SELECT pg_total_relation_size(%s)", (q,)).fetchone()[0]
        rows += cur.execute(row_sizes).fetchone()[0]
    return store, rows
