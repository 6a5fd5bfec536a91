"""LangGraph workloads, run by ``benchmarks/.peers-venv/bin/python`` (never imports tether).

Runs LangGraph's equivalents of W1 (200-node linear graph, a counter), W2 (300 steps each
appending 1 KB of random text through a list reducer) and W3 (resume of a 300-node run that
failed at its last node, on a saver opened just before) with ``durability="sync"`` (each step's
checkpoint written before the next step starts, as tether does), on SQLite WAL NORMAL, FULL
and Postgres (a fresh schema, dropped after). Prints one JSON object: ``{"version": str,
backend: {metric: [values], "settings": str}}`` with ms per step, ms per resume, bytes, the
settings read back, or ``{"skipped": reason}`` for a backend that failed.

Usage: ``python peer_worker.py REPS TMPDIR PG_DSN``
"""

from __future__ import annotations

import json
import operator
import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from peer_common import (
    W1_STEPS,
    W2_STEPS,
    W3_STEPS,
    each_backend,
    first_last_ms,
    pg_schema_bytes,
    w2_chunks,
)


class Counter(TypedDict):
    n: int


class Log(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph(schema: type, fns: list[Any], saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(schema)
    for i, fn in enumerate(fns):
        g.add_node(f"n{i}", fn)
        g.add_edge(START if i == 0 else f"n{i - 1}", f"n{i}")
    g.add_edge(f"n{len(fns) - 1}", END)
    return g.compile(checkpointer=saver)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": 10_000}


def _invoke(graph: Any, state: dict[str, Any] | None, thread_id: str | None = None) -> Any:
    return graph.invoke(state, _config(thread_id or uuid.uuid4().hex), durability="sync")


def w1(saver: Any, reps: int) -> dict[str, list[float]]:
    graph = _graph(Counter, [lambda s: {"n": s["n"] + 1}] * W1_STEPS, saver)
    _invoke(graph, {"n": 0})
    wall, cpu = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        out = _invoke(graph, {"n": 0})
        wall.append((time.perf_counter() - w) / W1_STEPS * 1e3)
        cpu.append((time.process_time() - c) / W1_STEPS * 1e3)
        assert out["n"] == W1_STEPS
    return {"w1_ms": wall, "w1_cpu_ms": cpu}


def w2_once(saver: Any) -> tuple[float, float]:
    chunks = w2_chunks()
    marks: list[float] = []

    def make(i: int) -> Any:
        def fn(state: dict[str, Any]) -> dict[str, Any]:
            marks.append(time.perf_counter())
            return {"log": [chunks[i]]}

        return fn

    graph = _graph(Log, [make(i) for i in range(W2_STEPS)], saver)
    _invoke(graph, {"log": []})
    return first_last_ms(marks)


def w3(open_saver: Callable[[], tuple[Any, Callable[[], None]]], reps: int) -> list[float]:
    """Per repetition: a ``W3_STEPS``-node counter run fails at its last node; then, on a
    saver opened just before (as another process would; untimed), time the resume
    (``invoke(None)`` on the same thread: LangGraph re-runs the failed node), which completes.

    ``open_saver`` returns ``(saver, close)``. Returns ms per resume.
    """
    armed = [False]

    def last(state: dict[str, Any]) -> dict[str, Any]:
        if armed[0]:
            armed[0] = False
            raise RuntimeError("the last step fails once")
        return {"n": state["n"] + 1}

    def graph_on(saver: Any) -> Any:
        return _graph(Counter, [lambda s: {"n": s["n"] + 1}] * (W3_STEPS - 1) + [last], saver)

    builder, close_builder = open_saver()
    resume_ms = []
    for _ in range(reps):
        thread_id = uuid.uuid4().hex
        armed[0] = True
        try:
            _invoke(graph_on(builder), {"n": 0}, thread_id)
        except RuntimeError as exc:
            if "the last step fails once" not in str(exc):
                raise
        assert not armed[0], "W3: the run did not reach its last node"
        saver, close = open_saver()
        # Untimed, as tether's fresh checkpointer reads its run row first: one read of the
        # saver's table on the new connection, not of the checkpoint resume loads.
        saver.conn.execute("SELECT 1 FROM checkpoints LIMIT 0").fetchall()
        graph = graph_on(saver)
        t = time.perf_counter()
        out = _invoke(graph, None, thread_id)
        resume_ms.append((time.perf_counter() - t) * 1e3)
        assert out["n"] == W3_STEPS, out
        close()
    close_builder()
    return resume_ms


def sqlite_backend(tmp: str, sync: str, reps: int) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    def open_saver(path: str) -> tuple[Any, sqlite3.Connection]:
        # As SqliteSaver.from_conn_string opens it (default isolation level: the saver commits
        # each step's checkpoint and writes together), with the bench's PRAGMAs.
        conn = sqlite3.connect(path, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {sync}")
        saver = SqliteSaver(conn)
        saver.setup()
        return saver, conn

    out: dict[str, Any] = {}
    saver, conn = open_saver(os.path.join(tmp, f"peer-w1-{sync}.db"))
    out.update(w1(saver, reps))
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0].upper()
    level = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[
        conn.execute("PRAGMA synchronous").fetchone()[0]
    ]
    if (mode, level) != ("WAL", sync):
        raise RuntimeError(f"asked for WAL + synchronous={sync}, the saver ran {mode} + {level}")
    out["settings"] = f"{mode}, synchronous={level} (read back after W1)"
    conn.close()
    first, last, file_b, row_b = [], [], [], []
    for rep in range(reps):
        path = os.path.join(tmp, f"peer-w2-{sync}-{rep}.db")
        saver, conn = open_saver(path)
        f, la = w2_once(saver)
        first.append(f)
        last.append(la)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = 0
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            expr = " + ".join(f"COALESCE(SUM(LENGTH(CAST({c} AS BLOB))), 0)" for c in cols)
            rows += conn.execute(f"SELECT {expr} FROM {table}").fetchone()[0]
        conn.close()
        size = os.path.getsize(path)
        if os.path.exists(path + "-wal"):
            size += os.path.getsize(path + "-wal")
        file_b.append(size)
        row_b.append(rows)
    out.update(w2_first_ms=first, w2_last_ms=last, w2_file_bytes=file_b, w2_row_bytes=row_b)
    w3_path = os.path.join(tmp, f"peer-w3-{sync}.db")

    def open_w3() -> tuple[Any, Callable[[], None]]:
        saver, conn = open_saver(w3_path)
        return saver, conn.close

    out["w3_resume_ms"] = w3(open_w3, reps)
    return out


def postgres_backend(dsn: str, reps: int) -> dict[str, Any]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    schema = f"peer_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(
            dsn,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,  # type: ignore[arg-type]
            options=f"-c search_path={schema}",
        )

    def open_w3() -> tuple[Any, Callable[[], None]]:
        conn = connect()
        return PostgresSaver(conn), conn.close

    try:
        with connect() as conn:
            saver = PostgresSaver(conn)
            saver.setup()
            out: dict[str, Any] = w1(saver, reps)
            first, last, file_b, row_b = [], [], [], []
            for _ in range(reps):
                conn.execute("TRUNCATE checkpoints, checkpoint_blobs, checkpoint_writes")
                f, la = w2_once(saver)
                first.append(f)
                last.append(la)
                total, rows = pg_schema_bytes(conn, schema)
                file_b.append(total)
                row_b.append(rows)
            out.update(w2_first_ms=first, w2_last_ms=last, w2_file_bytes=file_b, w2_row_bytes=row_b)
        out["w3_resume_ms"] = w3(open_w3, reps)
        out["settings"] = f"schema {schema} (dropped after)"
        return out
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> None:
    reps, tmp, dsn = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    from importlib.metadata import version

    results: dict[str, Any] = {
        "version": f"{version('langgraph')} (checkpoint-sqlite "
        f"{version('langgraph-checkpoint-sqlite')}, checkpoint-postgres "
        f"{version('langgraph-checkpoint-postgres')})"
    }
    results.update(each_backend(sqlite_backend, postgres_backend, reps, tmp, dsn))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
