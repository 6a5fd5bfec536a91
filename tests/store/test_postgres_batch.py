"""Group commit on Postgres (tether.store._postgres_batch): concurrent runs' steps share one
statement, and each step's outcome is still its own (a taken key, a lost lease, a refused
value fail that run's step only; a cancelled caller's queued step is never written)."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_DSN
from tether import Chain, Checkpoint, ConcurrentWriteError
from tether.errors import LeaseLost, RecordRejectedError
from tether.store import _postgres_batch
from tether.store.base import RunRecord

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(pg_schema):
    from tether.store.postgres import PostgresCheckpointer

    store = PostgresCheckpointer(PG_DSN, schema=pg_schema)
    yield store
    store.close()


def _cp(eid: str, node: str, n: int) -> Checkpoint:
    return Checkpoint(
        execution_id=eid, node_id=node, step_type="node", status="completed",
        state_snapshot={"n": n},
    )  # fmt: skip


async def _runs(store: Any, count: int) -> list[str]:
    eids = [f"run-{i}" for i in range(count)]
    for eid in eids:
        await store.acreate_run(RunRecord(eid, "batch", "chain"))
    return eids


async def test_concurrent_runs_steps_share_statements_and_read_back_whole(pg):
    chain = Chain("batched", pg)

    def inc(state):
        return {"n": state["n"] + 1, "seen": [*state["seen"], state["n"]]}

    for i in range(20):
        chain.add_node(f"n{i}", inc)
        if i:
            chain.add_edge(f"n{i - 1}", f"n{i}")

    results = await asyncio.gather(*(chain.arun({"n": 0, "seen": [i]}) for i in range(16)))

    assert [r.output for r in results] == [{"n": 20, "seen": [i, *range(20)]} for i in range(16)]
    stats = pg.pool_stats()
    assert stats["async_batches"] > 0 and stats["async_batched_steps"] > stats["async_batches"]
    for r in results:  # every row there, in order, each state whole (read on a fresh store)
        rows = pg.list(r.execution_id)
        assert [cp.node_id for cp in rows] == [f"n{i}" for i in range(20)] + ["run_end"]
        assert [cp.seq for cp in rows] == list(range(1, 22))
        assert [cp.state_snapshot["n"] for cp in rows[:20]] == list(range(1, 21))
        assert all(cp.created_at is not None for cp in rows)


async def test_a_taken_step_fails_only_its_own_run(pg, pg_schema):
    from tether.store.postgres import PostgresCheckpointer

    eids = await _runs(pg, 8)
    other = PostgresCheckpointer(PG_DSN, schema=pg_schema)
    try:
        await other.aput(_cp(eids[3], "theirs", 1))  # run-3's seq 1 goes to another writer
        outcomes = await asyncio.gather(
            *(pg.aput(_cp(eid, "ours", 1)) for eid in eids), return_exceptions=True
        )
    finally:
        await other.aclose()

    assert isinstance(outcomes[3], ConcurrentWriteError)
    assert all(isinstance(o, Checkpoint) for i, o in enumerate(outcomes) if i != 3), outcomes
    # The first step found none being written and went alone; the others went in together.
    assert pg.pool_stats()["async_batched_steps"] >= 5
    assert [cp.node_id for cp in pg.list(eids[3])] == ["theirs"]
    assert all([cp.node_id for cp in pg.list(e)] == ["ours"] for i, e in enumerate(eids) if i != 3)
    await pg.aput(_cp(eids[3], "ours", 2))  # the loser's next step goes on from the new head
    assert [cp.seq for cp in pg.list(eids[3])] == [1, 2]


async def test_a_step_whose_lease_was_taken_over_is_not_written(pg, pg_schema):
    from tether.store.postgres import PostgresCheckpointer

    eids = await _runs(pg, 6)
    for eid in eids:
        took = await pg.aacquire_run_lease(eid, owner="me", lease_seconds=60, steal_from=None)
        assert took.won
    # The first step after taking a lease reads the run's head; the next ones do not.
    await asyncio.gather(*(pg.aput(_cp(eid, "step", 1)) for eid in eids))
    thief = PostgresCheckpointer(PG_DSN, schema=pg_schema)
    try:
        took = await thief.aacquire_run_lease(eids[2], owner="thief", lease_seconds=60,
                                              steal_from="me")  # fmt: skip
        assert took.won
        outcomes = await asyncio.gather(
            *(pg.aput(_cp(eid, "step", 2)) for eid in eids), return_exceptions=True
        )
    finally:
        await thief.aclose()

    assert isinstance(outcomes[2], LeaseLost), outcomes[2]
    assert all(isinstance(o, Checkpoint) for i, o in enumerate(outcomes) if i != 2), outcomes
    assert pg.pool_stats()["async_batched_steps"] >= 3
    assert len(pg.list(eids[2])) == 1
    assert all(len(pg.list(e)) == 2 for i, e in enumerate(eids) if i != 2)


async def test_a_value_the_server_refuses_fails_only_its_own_step(pg, pg_schema):
    eids = await _runs(pg, 6)
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        check = "ADD CONSTRAINT no_bad CHECK (node_id <> 'bad')"
        admin.execute(f'ALTER TABLE "{pg_schema}".checkpoints {check}')
    outcomes = await asyncio.gather(
        *(pg.aput(_cp(eid, "bad" if i == 4 else "good", 1)) for i, eid in enumerate(eids)),
        return_exceptions=True,
    )

    assert isinstance(outcomes[4], RecordRejectedError) and "no_bad" in str(outcomes[4])
    assert all(isinstance(o, Checkpoint) for i, o in enumerate(outcomes) if i != 4), outcomes
    assert pg.list(eids[4]) == []
    assert all([cp.node_id for cp in pg.list(e)] == ["good"] for i, e in enumerate(eids) if i != 4)


async def test_a_step_cancelled_while_queued_is_never_written(pg, pg_schema):
    from tether.store._plans import StepInsert

    (eid_a, eid_b) = await _runs(pg, 2)
    gate = asyncio.Event()
    conn = await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True)

    @contextlib.asynccontextmanager
    async def connection():
        await gate.wait()  # the one flush holds here with its step taken
        yield conn

    loop = asyncio.get_running_loop()
    usage = SimpleNamespace(in_use=0, max_in_use=0)
    batcher = _postgres_batch.Batcher(loop, pg._q("{schema}"), connection, 1, usage)

    def step(eid: str) -> StepInsert:
        plan = pg._put_plan(_cp(eid, "step", 1), None, None, None, False, None)
        insert = next(plan)
        plan.close()
        assert isinstance(insert, StepInsert)
        return insert

    try:
        first = asyncio.ensure_future(batcher.submit(step(eid_a)))
        await asyncio.sleep(0)  # the flush starts and takes run A's step
        await asyncio.sleep(0)
        queued = asyncio.ensure_future(batcher.submit(step(eid_b)))
        await asyncio.sleep(0)
        queued.cancel()
        gate.set()
        assert (await first).rows  # A was written
        with pytest.raises(asyncio.CancelledError):
            await queued
        await asyncio.sleep(0.05)  # the flush finds B's caller gone
    finally:
        await conn.close()
    assert len(pg.list(eid_a)) == 1
    assert pg.list(eid_b) == []
