"""What ``TetherSaver`` stores: deltas of an appended list, no pickle, bounded reads, and a
second writer on the same thread (SQLite and Postgres)."""

from __future__ import annotations

import operator
import random
import string
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, empty_checkpoint
from langgraph.graph import END, START, StateGraph

from tests.integrations.langgraph.graphs import saved
from tether.errors import CorruptRecordError
from tether.integrations.langgraph import TetherSaver, TetherSerializer
from tether.store import langgraph_sql as q
from tether.store.drivers import Plan


class Log(TypedDict):
    items: Annotated[list[str], operator.add]


def appender(steps: int, chunk_bytes: int) -> StateGraph[Log]:
    rng = random.Random(7)

    def step(state: Log) -> dict[str, Any]:
        return {"items": ["".join(rng.choices(string.ascii_letters, k=chunk_bytes))]}

    builder = StateGraph(Log)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges(
        "step", lambda s: "step" if len(s["items"]) < steps else END, ["step", END]
    )
    return builder


def execute(store: Any, sql: str, *, write: bool = False) -> Any:
    """The first row of ``sql`` (``{schema}`` for the schema), run by the store's driver."""
    sqlite = type(store).__name__ == "SQLiteCheckpointer"
    query = q.for_sqlite(sql) if sqlite else store.render_sql(sql)

    def plan() -> Plan[Any]:
        return (yield query, None).one()

    return store.driver.run("test", plan(), write=write)


def stored_bytes(store: Any) -> int:
    tables = (("langgraph_checkpoints", "state", "metadata"), ("langgraph_writes", "value", "''"))
    total = 0
    for table, col, other in tables:
        sql = f"SELECT COALESCE(SUM(length({col}) + length({other})), 0) FROM {{schema}}.{table}"
        total += execute(store, sql)[0]
    return int(total)


def test_a_list_that_grows_by_appending_stores_each_item_about_once(store):
    saver = TetherSaver(store)
    graph = appender(steps=120, chunk_bytes=1024).compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "log"}, "recursion_limit": 1000}
    final = graph.invoke({"items": []}, config)
    assert len(final["items"]) == 120
    data = 120 * 1024
    assert stored_bytes(store) <= 2 * data  # LangGraph's own savers: ~60x here
    # Every checkpoint still reads back whole.
    history = list(saver.list({"configurable": {"thread_id": "log"}}))
    assert [len(t.checkpoint["channel_values"].get("items", [])) for t in history[:3]] == [
        120,
        119,
        118,
    ]
    assert saved(TetherSaver(store), config).checkpoint["channel_values"]["items"] == final["items"]


def test_the_newest_checkpoint_is_read_from_a_bounded_chain_of_rows(store):
    saver = TetherSaver(store)
    config: RunnableConfig = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    for i in range(600):
        cp = empty_checkpoint()
        cp["channel_values"] = {"n": i}
        cp["channel_versions"] = {"n": i + 1}
        config = saver.put(config, cp, {"step": i}, {"n": i + 1})
    sql = "SELECT seq - base_seq FROM {schema}.langgraph_checkpoints ORDER BY seq DESC LIMIT 1"
    span = execute(store, sql)[0]
    assert span < 512
    assert saved(TetherSaver(store), config).checkpoint["channel_values"] == {"n": 599}


def test_two_savers_writing_one_thread_in_turn_each_store_a_readable_checkpoint(
    store_and_url, backend
):
    store, url = store_and_url
    first = TetherSaver(store)
    second = TetherSaver.from_url(url)
    try:
        config: RunnableConfig = {"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}
        for i in range(6):
            saver = first if i % 2 == 0 else second
            cp = empty_checkpoint()
            cp["channel_values"] = {"turns": list(range(i + 1))}
            cp["channel_versions"] = {"turns": i + 1}
            config = saver.put(config, cp, {"step": i}, {"turns": i + 1})
        for saver in (first, second):
            got = saved(saver, {"configurable": {"thread_id": "shared"}})
            assert got.checkpoint["channel_values"] == {"turns": [0, 1, 2, 3, 4, 5]}
            assert len(list(saver.list({"configurable": {"thread_id": "shared"}}))) == 6
    finally:
        second.close()


def test_a_pickled_payload_is_never_loaded(store):
    saver = TetherSaver(store)
    config = saver.put(
        {"configurable": {"thread_id": "p", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
    )
    saver.put_writes(config, [("ch", "fine")], "task-1")
    sql = "UPDATE {schema}.langgraph_writes SET type = 'pickle'"
    execute(store, sql, write=True)
    with pytest.raises(CorruptRecordError, match="pickle"):
        saver.get_tuple(config)
    with pytest.raises(CorruptRecordError, match="pickle"):
        TetherSerializer().loads_typed(("pickle", b"\x80\x04K\x01."))


def test_versions_changed_in_place_after_put_are_stored_as_changed(store):
    saver = TetherSaver(store)
    config: RunnableConfig = {"configurable": {"thread_id": "v", "checkpoint_ns": ""}}
    seen: dict[str, ChannelVersions] = {"node": {"ch": 1}}
    for version in (1, 2):
        seen["node"]["ch"] = version  # the caller's own dict, changed in place
        cp = empty_checkpoint()
        cp["channel_values"] = {"ch": version}
        cp["channel_versions"] = {"ch": version}
        cp["versions_seen"] = seen
        config = saver.put(config, cp, {}, {"ch": version})
    got = saved(TetherSaver(store), config).checkpoint
    assert got["versions_seen"] == {"node": {"ch": 2}} and got["channel_values"] == {"ch": 2}


def test_a_task_writing_one_special_channel_twice_in_one_call_keeps_the_last(store):
    from langgraph.checkpoint.serde.types import INTERRUPT

    saver = TetherSaver(store)
    config = saver.put(
        {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
    )
    saver.put_writes(config, [(INTERRUPT, "first"), (INTERRUPT, "second")], "task-1")
    saver.put_writes(config, [("ch", 1), ("ch", 2)], "task-2")
    writes = saved(saver, config).pending_writes
    assert writes is not None
    assert sorted((t, c, v) for t, c, v in writes) == [
        ("task-1", INTERRUPT, "second"),
        ("task-2", "ch", 1),
        ("task-2", "ch", 2),
    ]
