"""LANGGRAPH: LangGraph graphs on ``TetherSaver`` against LangGraph's own savers, in one run.

The same compiled graphs run with tether's saver and with LangGraph's own on the same backend
(``SqliteSaver`` on a SQLite file in WAL with the backend's ``synchronous``; ``PostgresSaver``
on the same server, in its own schema), with LangGraph's default durability. The two alternate
within each repetition, so machine noise hits both alike:

- **W2**: 300 steps, each appending a 1 KB string (random letters) to a list channel
  (``operator.add``). Bytes stored ÷ bytes appended, counting every stored value: checkpoints,
  blobs, writes and metadata (SQLite: each column's length; Postgres: ``pg_column_size`` of
  each row). last-50 ÷ first-50: the mean interval between consecutive steps over the last 50
  steps, over that of the first 50 (does a step slow down as the history grows?).
- **W1**: a 200-node line over a one-counter state: wall ms per step of ``graph.invoke``.
- **W3**: resume of the W2 thread (300 steps) from a fresh saver, as a new process does it:
  ``graph.get_state(config)`` (the newest checkpoint and its channels), median over 20.

Named ``langgraph_saver``, not ``langgraph``: the peer workers run as scripts from this
directory, where a module named ``langgraph`` would shadow the package they import.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import operator
import random
import sqlite3
import statistics
import string
import time
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

from .backends import Backend, Handle, PostgresBackend
from .report import REPS, Section, Target, ratios

W1_NODES = 200
W2_STEPS = 300
W2_CHUNK_BYTES = 1024
W3_READS = 20


class _Log(TypedDict):
    items: Annotated[list[str], operator.add]


class _Counter(TypedDict):
    n: int


def _appender(stamps: list[float]) -> Any:
    from langgraph.graph import END, START, StateGraph

    rng = random.Random(7)

    def step(state: _Log) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        return {"items": ["".join(rng.choices(string.ascii_letters, k=W2_CHUNK_BYTES))]}

    builder = StateGraph(_Log)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges(
        "step", lambda s: "step" if len(s["items"]) < W2_STEPS else END, ["step", END]
    )
    return builder


def _line() -> Any:
    from langgraph.graph import END, START, StateGraph

    def inc(state: _Counter) -> dict[str, int]:
        return {"n": state["n"] + 1}

    builder = StateGraph(_Counter)
    for i in range(W1_NODES):
        builder.add_node(f"n{i}", inc)
        builder.add_edge(START if i == 0 else f"n{i - 1}", f"n{i}")
    builder.add_edge(f"n{W1_NODES - 1}", END)
    return builder


# --- the savers ------------------------------------------------------------------------------

# The tables each saver stores a thread in, and their value columns (the rest are keys).
TETHER_TABLES = {"langgraph_checkpoints": ("state", "metadata"), "langgraph_writes": ("value",)}
SQLITESAVER_TABLES = {"checkpoints": ("checkpoint", "metadata"), "writes": ("value",)}
POSTGRESSAVER_TABLES = {
    "checkpoints": ("checkpoint", "metadata"),
    "checkpoint_blobs": ("blob",),
    "checkpoint_writes": ("blob",),
}


def _sqlite_bytes(conn: sqlite3.Connection, tables: dict[str, tuple[str, ...]]) -> tuple[int, int]:
    """``(value bytes, row bytes)``: the value columns' lengths, and every column's."""
    values = rows = 0
    for t, cols in tables.items():
        every = [r[1] for r in conn.execute(f"PRAGMA table_info({t})")]
        length = "COALESCE(SUM(LENGTH(CAST({} AS BLOB))), 0)".format
        values += sum(conn.execute(f"SELECT {', '.join(map(length, cols))} FROM {t}").fetchone())
        rows += sum(conn.execute(f"SELECT {', '.join(map(length, every))} FROM {t}").fetchone())
    return values, rows


def _pg_bytes(conn: Any, schema: str, tables: dict[str, tuple[str, ...]]) -> tuple[int, int]:
    """As :func:`_sqlite_bytes`, by ``pg_column_size`` (rows: whole rows, headers included)."""
    values = rows = 0
    for t, cols in tables.items():
        size = ", ".join(
            f"COALESCE(SUM(pg_column_size({c})), 0) AS v{i}" for i, c in enumerate(cols)
        )
        got = conn.execute(
            f'SELECT COALESCE(SUM(pg_column_size(t.*)), 0) AS r, {size} FROM "{schema}".{t} t'
        ).fetchone()
        got = list(got.values()) if isinstance(got, dict) else list(got)
        rows += int(got[0])
        values += sum(int(v) for v in got[1:])
    return values, rows


@contextlib.contextmanager
def _tether_saver(handle: Handle) -> Iterator[tuple[Any, Any]]:
    from tether.integrations.langgraph import TetherSaver

    spec = handle.spec()

    def stored() -> tuple[int, int]:
        if spec["kind"] == "sqlite":
            lite = sqlite3.connect(spec["path"])
            try:
                return _sqlite_bytes(lite, TETHER_TABLES)
            finally:
                lite.close()
        import psycopg

        with psycopg.connect(spec["dsn"], autocommit=True) as conn:
            return _pg_bytes(conn, spec["schema"], TETHER_TABLES)

    yield TetherSaver(handle.store), stored


@contextlib.contextmanager
def _langgraph_saver(handle: Handle) -> Iterator[tuple[Any, Any]]:
    spec = handle.spec()
    if spec["kind"] == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(spec["path"] + ".langgraph", check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={spec['synchronous']}")
        lite_saver = SqliteSaver(conn)
        lite_saver.setup()
        try:
            yield lite_saver, lambda: _sqlite_bytes(conn, SQLITESAVER_TABLES)
        finally:
            conn.close()
        return
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    # Its own schema: LangGraph's "checkpoints" table would collide with tether's.
    schema = spec["schema"] + "_lg"
    with psycopg.connect(spec["dsn"], autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    pg = psycopg.connect(
        spec["dsn"],
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={schema}",
    )
    saver = PostgresSaver(pg)
    saver.setup()
    try:
        yield saver, lambda: _pg_bytes(pg, schema, POSTGRESSAVER_TABLES)
    finally:
        pg.close()
        with psycopg.connect(spec["dsn"], autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


# --- one repetition --------------------------------------------------------------------------


def _w2(saver: Any, stored: Any, thread_id: str) -> tuple[float, float, float, float]:
    """``(value bytes ÷ data, row bytes ÷ data, last-50 ÷ first-50, wall seconds)`` of one
    300-step thread."""
    stamps: list[float] = []
    graph = _appender(stamps).compile(checkpointer=saver)
    gc.collect()
    t = time.perf_counter()
    out = graph.invoke(
        {"items": []}, {"configurable": {"thread_id": thread_id}, "recursion_limit": 10_000}
    )
    wall = time.perf_counter() - t
    assert len(out["items"]) == W2_STEPS
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    growth = statistics.mean(gaps[-50:]) / statistics.mean(gaps[:50])
    values, rows = stored()
    data = W2_STEPS * W2_CHUNK_BYTES
    return values / data, rows / data, growth, wall


def _w1(saver: Any, thread_id: str) -> float:
    graph = _line().compile(checkpointer=saver)
    gc.collect()
    t = time.perf_counter()
    out = graph.invoke({"n": 0}, {"configurable": {"thread_id": thread_id}})
    assert out["n"] == W1_NODES
    return (time.perf_counter() - t) / W1_NODES * 1e3


def _w3(saver: Any, thread_id: str) -> float:
    graph = _appender([]).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread_id}}
    times = []
    for _ in range(W3_READS):
        t = time.perf_counter()
        state = graph.get_state(config)
        times.append(time.perf_counter() - t)
        assert len(state.values["items"]) == W2_STEPS
    return statistics.median(times) * 1e3


def langgraph(backend: Backend) -> Section:
    """tether's saver and LangGraph's own on W2, W1 and W3 (see the module docstring)."""
    section = Section("LANGGRAPH", backend.name)
    try:
        import langgraph.checkpoint.postgres
        import langgraph.checkpoint.sqlite  # noqa: F401

        from tether.integrations.langgraph import TetherSaver
    except ImportError as exc:
        section.skipped = f"the langgraph extras are not installed ({exc})"
        return section
    own = "PostgresSaver" if isinstance(backend, PostgresBackend) else "SqliteSaver"
    m: dict[str, list[float]] = {}

    def rep(i: int) -> None:
        with backend.fresh() as handle:
            handle.store.setup()
            with (
                _tether_saver(handle) as (ours, ours_bytes),
                _langgraph_saver(handle) as (theirs, their_bytes),
            ):
                for who, saver, stored in (("t", ours, ours_bytes), ("l", theirs, their_bytes)):
                    ratio, row_ratio, growth, wall = _w2(saver, stored, f"w2-{i}")
                    m.setdefault(f"{who}_bytes", []).append(ratio)
                    m.setdefault(f"{who}_row_bytes", []).append(row_ratio)
                    m.setdefault(f"{who}_growth", []).append(growth)
                    m.setdefault(f"{who}_w2_ms", []).append(wall / W2_STEPS * 1e3)
                    m.setdefault(f"{who}_w1", []).append(_w1(saver, f"w1-{i}"))
                fresh = TetherSaver(handle.reopen())
                for who, saver in (("t", fresh), ("l", theirs)):
                    m.setdefault(f"{who}_w3", []).append(_w3(saver, f"w2-{i}"))
                fresh.store.close()

    rep(-1)  # warm-up: imports, schemas, first connections
    m.clear()
    for i in range(REPS):
        rep(i)
    section.add(
        "W2 bytes ÷ data, tether", "x", m["t_bytes"], Target("<=", 2.0),
        note="stored values (states, blobs, writes, metadata) ÷ the 300 KB appended",
    )  # fmt: skip
    section.add(f"W2 bytes ÷ data, {own}", "x", m["l_bytes"])
    section.add(
        "W2 row bytes ÷ data, tether", "x", m["t_row_bytes"],
        note="every column of every row: keys (thread, checkpoint and task ids) too",
    )  # fmt: skip
    section.add(f"W2 row bytes ÷ data, {own}", "x", m["l_row_bytes"])
    section.add("W2 last-50 ÷ first-50, tether", "x", m["t_growth"], Target("<=", 1.2))
    section.add(f"W2 last-50 ÷ first-50, {own}", "x", m["l_growth"])
    section.add("W2 step, tether", "ms", m["t_w2_ms"])
    section.add(f"W2 step, {own}", "ms", m["l_w2_ms"])
    section.add("W1 step, tether", "ms", m["t_w1"])
    section.add(f"W1 step, {own}", "ms", m["l_w1"])
    section.add(
        f"W1 tether ÷ {own}", "x", ratios(m["t_w1"], m["l_w1"]), Target("<=", 1.0),
        note="per step of a 200-node line, paired per repetition",
    )  # fmt: skip
    section.add("W3 resume, tether", "ms", m["t_w3"])
    section.add(f"W3 resume, {own}", "ms", m["l_w3"])
    section.add(
        f"W3 tether ÷ {own}", "x", ratios(m["t_w3"], m["l_w3"]), Target("<=", 1.0),
        note="graph.get_state of the 300-step W2 thread from a fresh saver, median of 20",
    )  # fmt: skip
    return section
