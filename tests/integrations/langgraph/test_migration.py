"""Schema version 5 adds the LangGraph saver's tables through the store's own migrations: a
version 4 store keeps its runs and gains the tables; a version 4 tether refuses the result."""

from __future__ import annotations

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

import tether
from tests.integrations.langgraph.graphs import saved
from tests.workers.test_migration import _open_at
from tether import Chain
from tether.integrations.langgraph import TetherSaver
from tether.store.sqlite import SCHEMA_VERSION


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_version_4_store_gains_the_langgraph_tables_and_keeps_its_runs(
    kind, tmp_path, monkeypatch, request
):
    where = str(tmp_path / "v4.db") if kind == "sqlite" else request.getfixturevalue("pg_schema")
    old = _open_at(kind, where, monkeypatch, 4)
    chain = Chain("counter", old)
    chain.add_node("a", lambda s: {"n": s.get("n", 0) + 1})
    run_id = chain.run({}).execution_id
    old.close()

    store = _open_at(kind, where, monkeypatch, None)
    try:
        assert SCHEMA_VERSION >= 5 and store.schema_version() == SCHEMA_VERSION
        assert store.get_last(run_id).state_snapshot == {"n": 1}
        saver = TetherSaver(store)
        config: RunnableConfig = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
        stored = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        assert saved(saver, stored).checkpoint["id"] == stored["configurable"]["checkpoint_id"]
    finally:
        store.close()
    with pytest.raises(tether.errors.SchemaVersionError) as refused:
        _open_at(kind, where, monkeypatch, 4)
    assert refused.value.found == SCHEMA_VERSION and refused.value.supported == 4
