"""Hostile rows and arguments, on both backends: each gets a clear error and nothing is lost.

Rows are damaged by hand with plain SQL, the way a buggy tool, a newer tether or a bad
restore would leave them.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.hostile.conftest import counts, raw_sql
from tether import Chain, Resume, interrupt
from tether.agent import Agent
from tether.agent.supervisor import Supervisor, Worker
from tether.agent.swarm import Swarm
from tether.errors import (
    ChainResumeError,
    CorruptRecordError,
    RunNotFoundError,
    SchemaVersionError,
    StoreError,
)
from tether.testing import ScriptedLLM


def paused_chain(store: Any) -> Chain:
    chain = Chain("hostile", store)
    chain.add_node("a", lambda s: {"a": 1})
    chain.add_node("b", lambda s: {"b": interrupt("ok?", {"n": 1}).approved})
    chain.add_edge("a", "b")
    return chain


def runners(store: Any) -> list[Any]:
    llm = ScriptedLLM(["hi"], resume_aware=True)
    agent = Agent("solo", llm=llm, checkpointer=store)
    other = Agent("other", llm=llm, checkpointer=store)
    return [
        paused_chain(store),
        agent,
        Swarm("desk", [agent, other], entrypoint="solo", checkpointer=store),
        Supervisor("boss", llm=llm, workers=[Worker(other, "help", "helps")], checkpointer=store),
    ]


def test_unknown_execution_id_is_run_not_found_for_every_runner_and_verb(store: Any) -> None:
    store.setup()  # a Postgres store creates its tables on first use
    before = counts(store)
    for runner in runners(store):
        with pytest.raises(RunNotFoundError) as info:
            runner.resume("no-such-run")
        assert info.value.execution_id == "no-such-run"
        with pytest.raises(RunNotFoundError):
            runner.resume("no-such-run", Resume(True))
        with pytest.raises(RunNotFoundError):
            runner.fork("no-such-run")
    assert counts(store) == before


@pytest.mark.parametrize("value", [True, "approve", {"approved": True}, 1, Resume])
def test_resume_with_a_value_that_is_not_a_resume_is_refused_and_the_run_stays_paused(
    store: Any, value: Any
) -> None:
    chain = paused_chain(store)
    eid = chain.run({}).execution_id
    before = counts(store)
    with pytest.raises(ChainResumeError, match=r"must be a tether\.Resume"):
        chain.resume(eid, value)
    assert counts(store) == before
    pending = store.get_pending_interrupt(eid)
    assert pending.claimed_by is None and pending.resume_value is None
    assert chain.resume(eid, Resume(True)).output == {"a": 1, "b": True}


@pytest.mark.parametrize(
    ("column", "damage"),
    [
        ("state", b"{not json"),
        ("state", b"\x28\xb5\x2f\xfd and no Zstandard frame"),  # compressed rows start so
        ("node_input", b"{not json"),
        ("iteration_counters", b"{not json"),
    ],
)
def test_a_checkpoint_with_corrupt_json_is_a_corrupt_record_error_and_other_rows_survive(
    store: Any, column: str, damage: bytes
) -> None:
    chain = paused_chain(store)
    eid = chain.run({}).execution_id
    sql = raw_sql(store)
    sql(
        f"UPDATE {{t}}checkpoints SET {column} = ? WHERE execution_id = ? AND seq = 2",
        (damage, eid),
    )
    before = counts(store)
    with pytest.raises(CorruptRecordError) as info:
        paused_chain(reopen(store)).resume(eid, Resume(True))
    if column == "state":  # the error names the run and the row
        assert info.value.execution_id == eid and "seq 2" in str(info.value), info.value
    assert counts(store) == before
    assert store.get_run(eid).status == "paused"
    assert store.get_checkpoint(eid, store_first_id(store, eid)).node_id == "a"


def store_first_id(store: Any, eid: str) -> str:
    return raw_sql(store)(
        "SELECT checkpoint_id FROM {t}checkpoints WHERE execution_id = ? AND seq = 1", (eid,)
    )[0][0]


def reopen(store: Any) -> Any:
    """A second checkpointer on the same database, as another process would open it."""
    if hasattr(store, "path"):
        return type(store)(store.path)
    from tests.conftest import PG_DSN

    return type(store)(PG_DSN, schema=store.schema)


def test_a_missing_column_is_a_clear_store_error_and_data_is_kept(store: Any) -> None:
    chain = paused_chain(store)
    eid = chain.run({}).execution_id
    sql = raw_sql(store)
    sql("ALTER TABLE {t}checkpoints DROP COLUMN next_node_id")
    with pytest.raises(StoreError) as info:
        other = reopen(store)
        paused_chain(other).resume(eid, Resume(True))
    assert "next_node_id" in str(info.value)
    assert sql("SELECT COUNT(*) FROM {t}checkpoints WHERE execution_id = ?", (eid,))[0][0] == 2
    assert sql("SELECT COUNT(*) FROM {t}pending_interrupts")[0][0] == 1


def test_a_database_from_a_newer_schema_version_is_refused_and_left_intact(store: Any) -> None:
    chain = paused_chain(store)
    eid = chain.run({}).execution_id
    sql = raw_sql(store)
    sql(
        "INSERT INTO {t}tether_schema (version, applied_at) VALUES (99, "
        + ("0)" if hasattr(store, "path") else "now())")
    )
    before = counts(store)
    with pytest.raises(SchemaVersionError) as info:
        reopen(store).get_run(eid)  # Postgres checks on first use, SQLite on open
    assert info.value.found == 99 and "upgrade tether" in str(info.value)
    assert counts(store) == before
    assert sql("SELECT status FROM {t}runs WHERE execution_id = ?", (eid,)) == [("paused",)]


@pytest.mark.parametrize(("column", "value"), [("status", "superseded"), ("step_type", "warp")])
def test_a_row_with_a_status_or_step_type_this_tether_does_not_know_is_refused(
    store: Any, column: str, value: str
) -> None:
    # A newer (or broken) writer's row must not be guessed at: treating an unknown status as
    # "completed" would re-run or skip a step on the strength of a row it cannot read.
    chain = paused_chain(store)
    eid = chain.run({}).execution_id
    raw_sql(store)(
        f"UPDATE {{t}}checkpoints SET {column} = ? WHERE execution_id = ? AND seq = 2", (value, eid)
    )
    other = reopen(store)
    before = counts(store)
    with pytest.raises(CorruptRecordError, match=value):
        paused_chain(other).resume(eid)
    with pytest.raises(CorruptRecordError, match=value):
        paused_chain(other).resume(eid, Resume(True))
    assert counts(store) == before
    assert store.get_pending_interrupt(eid).resume_value is None
