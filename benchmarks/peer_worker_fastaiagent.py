"""fastaiagent workloads, run by ``benchmarks/.peers-venv/bin/python`` (never imports tether).

Runs fastaiagent's equivalents of W1, W2 and a W3-like resume with its durable checkpointers
(``SQLiteCheckpointer``, ``PostgresCheckpointer``) on SQLite WAL NORMAL, SQLite WAL FULL and
Postgres (a fresh schema, dropped after). Every chain node writes its checkpoint (one
committed INSERT) before the next node starts, as tether does; a run also writes fastaiagent's
``run_end`` row, as tether writes its own run-end row. Tracing is off: the master switch
``FASTAIAGENT_TRACE_ENABLED=0`` is set before fastaiagent is imported, so its tracer provider
is OTel's no-op one (checked below) and no span reaches any trace store; ``execute`` is also
called with ``trace=False``.

Measured exactly as :mod:`peer_worker` measures LangGraph, so that the peer ÷ ours ratios are
comparable:

- W1: a 200-node linear chain over ``{"n": int}``; each node is a ``FunctionTool`` that reads
  ``n`` through fastaiagent's ``input_mapping`` template and stores ``n + 1`` under
  ``output_key="n"``. One untimed warm-up run, then ``REPS`` timed runs: wall ms per step
  (``time.perf_counter``) and client CPU ms per step (``time.process_time``, all threads).
- W2: 300 nodes, each returning the list grown by one 1 KB chunk (same seed and bytes as
  tether's W2) under ``output_key="log"``. A tool node sees chain state only through string
  templates, so the list is carried by the node closure rather than re-parsed from state on
  every step: that spares fastaiagent a JSON render and parse of the whole list per step, so
  it can only flatter the peer. ms per step over the last 50 steps (a step = one node's start
  to the next node's start, as tether's W2: the last node's checkpoint and the return are
  not in it), row bytes and store bytes after the run, on a fresh store per repetition.
- W3 (resume): a 300-node chain whose last node raises on its first call. The run fails
  (fastaiagent writes a ``failed`` run-end row); a checkpointer opened on the same store (its
  connection opened untimed, as a new process would) then times ``Chain.resume(eid)``: load
  the latest resumable checkpoint, run the last node, commit its checkpoint and the run-end
  row. One failed run per repetition.

Bytes: row bytes are the summed lengths of every column of fastaiagent's three checkpointer
tables (``checkpoints``, ``pending_interrupts``, ``idempotency_cache``; on Postgres
``pg_column_size`` of each row of every table in the schema, as for LangGraph). Store bytes
are the SQLite file after ``PRAGMA wal_checkpoint(TRUNCATE)`` (the file holds fastaiagent's
whole unified ``local.db`` schema, mostly empty tables: that is what its checkpointer
creates), or ``pg_total_relation_size`` summed over the schema's tables.

SQLite ``synchronous``: ``SQLiteCheckpointer`` takes no such option and never sets the pragma
(SQLite's default, FULL, applies). Its connections are per thread and opened lazily, so the
pragma is set on the connection of the thread that runs the chain before the first timed
step, then read back after the run along with the number of connections the checkpointer
opened (one). A mismatch is reported as a skip, never under the wrong label.

Prints one JSON object: ``{backend: {metric: [values]}}`` with ms per step, ms per resume,
bytes, the checked settings, or ``{"skipped": reason}``.

Usage: ``python peer_worker_fastaiagent.py REPS TMPDIR PG_DSN`` (run with ``TMPDIR`` as the
working directory: fastaiagent writes its project file ``.fastaiagent/config.toml`` there).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from peer_common import (
    W1_STEPS,
    W2_STEPS,
    W3_STEPS,
    each_backend,
    first_last_ms,
    pg_schema_bytes,
    w2_chunks,
)

CHECKPOINT_TABLES = ("checkpoints", "pending_interrupts", "idempotency_cache")


def _tracing_off(tmp: str) -> str:
    """Switch fastaiagent's tracing off before it is imported; the path of its trace store.

    Returns:
        The ``local.db`` path fastaiagent would write spans (and its default checkpoints) to;
        it lies in ``tmp`` and must not exist after the run.
    """
    sink = os.path.join(tmp, "fastaiagent-local.db")
    os.environ["FASTAIAGENT_TRACE_ENABLED"] = "0"
    os.environ["FASTAIAGENT_LOCAL_DB"] = sink
    from fastaiagent.trace.otel import get_tracer_provider, tracing_enabled

    assert not tracing_enabled()
    provider = type(get_tracer_provider()).__name__
    assert provider == "NoOpTracerProvider", provider
    return sink


def _linear_chain(name: str, store: Any, fns: list[Callable[..., Any]], **node: Any) -> Any:
    """A chain ``n0 -> n1 -> ...`` of tool nodes, one per function, each with ``**node``."""
    from fastaiagent import Chain
    from fastaiagent.tool import FunctionTool

    chain = Chain(name, checkpointer=store)
    for i, fn in enumerate(fns):
        chain.add_node(f"n{i}", tool=FunctionTool(name=f"n{i}", fn=fn), **node)
        if i:
            chain.connect(f"n{i - 1}", f"n{i}")
    return chain


def _inc(n: int) -> int:
    return n + 1


def _counter_chain(name: str, store: Any, fns: list[Callable[..., Any]]) -> Any:
    return _linear_chain(name, store, fns, input_mapping={"n": "{{state.n}}"}, output_key="n")


def w1(store: Any, reps: int) -> dict[str, list[float]]:
    chain = _counter_chain("w1", store, [_inc] * W1_STEPS)
    chain.execute({"n": 0}, trace=False)
    wall, cpu = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        out = chain.execute({"n": 0}, trace=False)
        wall.append((time.perf_counter() - w) / W1_STEPS * 1e3)
        cpu.append((time.process_time() - c) / W1_STEPS * 1e3)
        assert out.status == "completed" and out.final_state["n"] == W1_STEPS, out
    return {"w1_ms": wall, "w1_cpu_ms": cpu}


def w2_once(store: Any) -> tuple[float, float]:
    """One W2 run; ms per step over the first and the last 50 steps."""
    chunks = w2_chunks()
    marks: list[float] = []
    log: list[str] = []

    def make(i: int) -> Callable[[], list[str]]:
        def append() -> list[str]:
            marks.append(time.perf_counter())
            log.append(chunks[i])
            return list(log)

        return append

    chain = _linear_chain("w2", store, [make(i) for i in range(W2_STEPS)], output_key="log")
    out = chain.execute({"log": []}, trace=False)
    assert out.status == "completed" and out.final_state["log"] == chunks
    return first_last_ms(marks)


def _w3_chain(store: Any, armed: list[bool]) -> Any:
    """A ``W3_STEPS``-node counter chain whose last node raises while ``armed[0]`` is true,
    disarming it (so the next call of that node succeeds)."""

    def last(n: int) -> int:
        if armed[0]:
            armed[0] = False
            raise RuntimeError("W3: the last step fails once")
        return n + 1

    return _counter_chain("w3", store, [_inc] * (W3_STEPS - 1) + [last])


def w3(
    open_store: Callable[[], Any], reps: int, check: Callable[[Any], None] = lambda store: None
) -> dict[str, list[float]]:
    """Per repetition: fail a fresh run at its last step, then time one resume of it.

    ``check`` is called with the resuming store after each resume (and may raise).
    """
    armed = [False]
    builder = open_store()
    resume_ms = []
    for _ in range(reps):
        eid = uuid.uuid4().hex
        armed[0] = True
        try:
            _w3_chain(builder, armed).execute({"n": 0}, trace=False, execution_id=eid)
        except Exception as exc:
            if "the last step fails once" not in str(exc):
                raise
        assert not armed[0], "W3: the run did not reach its last step"
        store = open_store()  # as another process would; its connection opened untimed
        chain = _w3_chain(store, armed)
        t = time.perf_counter()
        out = asyncio.run(chain.resume(eid))
        resume_ms.append((time.perf_counter() - t) * 1e3)
        assert out.status == "completed" and out.final_state["n"] == W3_STEPS, out
        check(store)
        store.close()
    builder.close()
    return {"w3_resume_ms": resume_ms}


# --- SQLite --------------------------------------------------------------------------------


def _sqlite_store(path: str, sync: str) -> Any:
    """A ``SQLiteCheckpointer`` on ``path`` whose connection for this thread is open, in WAL
    with ``synchronous = sync`` (fastaiagent puts the file in WAL itself)."""
    from fastaiagent import SQLiteCheckpointer

    store = SQLiteCheckpointer(path)
    store.setup()
    conn = store._conn()._get_conn()  # private: the pragma has no public setter
    conn.execute(f"PRAGMA synchronous = {sync}")
    return store


def _check_sqlite_settings(store: Any, sync: str) -> None:
    """Raise unless every statement went through the one connection set to ``sync``."""
    helper = store._conn()
    conns = list(helper._connections)
    levels = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    got = [levels[c.execute("PRAGMA synchronous").fetchone()[0]] for c in conns]
    modes = [c.execute("PRAGMA journal_mode").fetchone()[0].upper() for c in conns]
    if got != [sync] or modes != ["WAL"]:
        raise RuntimeError(f"asked for WAL + synchronous={sync}, the store ran {modes} + {got}")


def _sqlite_bytes(path: str) -> tuple[int, int]:
    """(row bytes of the checkpointer tables, file bytes after emptying the WAL)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        assert busy == 0, f"could not empty the WAL of {path}"
        rows = 0
        for table in CHECKPOINT_TABLES:
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            expr = " + ".join(f"COALESCE(SUM(LENGTH(CAST({c} AS BLOB))), 0)" for c in cols)
            rows += conn.execute(f"SELECT {expr} FROM {table}").fetchone()[0]
        spans = conn.execute("SELECT COUNT(*) FROM spans").fetchone()[0]
        assert spans == 0, f"tracing is off, yet {spans} spans were stored in {path}"
    finally:
        conn.close()
    size = os.path.getsize(path)
    if os.path.exists(path + "-wal"):
        size += os.path.getsize(path + "-wal")
    return rows, size


def sqlite_backend(tmp: str, sync: str, reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    path = os.path.join(tmp, f"fa-w1-{sync}.db")
    store = _sqlite_store(path, sync)
    out.update(w1(store, reps))
    _check_sqlite_settings(store, sync)
    store.close()
    first, last, file_b, row_b = [], [], [], []
    for rep in range(reps):
        path = os.path.join(tmp, f"fa-w2-{sync}-{rep}.db")
        store = _sqlite_store(path, sync)
        f, la = w2_once(store)
        _check_sqlite_settings(store, sync)
        store.close()
        first.append(f)
        last.append(la)
        rows, size = _sqlite_bytes(path)
        row_b.append(rows)
        file_b.append(size)
        os.remove(path)  # about 90 MB each
    out.update(w2_first_ms=first, w2_last_ms=last, w2_file_bytes=file_b, w2_row_bytes=row_b)
    path = os.path.join(tmp, f"fa-w3-{sync}.db")
    out.update(
        w3(lambda: _sqlite_store(path, sync), reps, lambda s: _check_sqlite_settings(s, sync))
    )
    out["settings"] = f"WAL, synchronous={sync} (set on the checkpointer's connection)"
    return out


# --- Postgres ------------------------------------------------------------------------------


def postgres_backend(dsn: str, reps: int) -> dict[str, Any]:
    import psycopg
    from fastaiagent.checkpointers.postgres import PostgresCheckpointer

    schema = f"fa_{uuid.uuid4().hex[:12]}"

    def open_store() -> Any:
        store = PostgresCheckpointer(dsn, schema=schema)
        store.setup()  # creates the schema and tables on first use; opens the pool
        return store

    try:
        store = open_store()
        out: dict[str, Any] = w1(store, reps)
        first, last, file_b, row_b = [], [], [], []
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(reps):
                conn.execute(
                    "TRUNCATE " + ", ".join(f'"{schema}"."{t}"' for t in CHECKPOINT_TABLES)
                )
                f, la = w2_once(store)
                first.append(f)
                last.append(la)
                total, rows = pg_schema_bytes(conn, schema)
                file_b.append(total)
                row_b.append(rows)
        store.close()
        out.update(w2_first_ms=first, w2_last_ms=last, w2_file_bytes=file_b, w2_row_bytes=row_b)
        out.update(w3(open_store, reps))
        out["settings"] = f"schema {schema} (dropped after)"
        return out
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    reps, tmp, dsn = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    sink = _tracing_off(tmp)
    import fastaiagent

    results: dict[str, Any] = {"version": fastaiagent.__version__}
    results.update(each_backend(sqlite_backend, postgres_backend, reps, tmp, dsn))
    if os.path.exists(sink):
        raise RuntimeError(f"tracing is off, yet fastaiagent wrote its trace store {sink}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
