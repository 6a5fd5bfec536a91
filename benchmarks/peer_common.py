"""What the peer workers share (run by ``benchmarks/.peers-venv/bin/python``, beside them as a
plain module: it never imports tether or the ``benchmarks`` package)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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
        store += cur.execute("SELECT pg_total_relation_size(%s)", (q,)).fetchone()[0]
        rows += cur.execute(f"SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {q} t").fetchone()[
            0
        ]
    return store, rows
