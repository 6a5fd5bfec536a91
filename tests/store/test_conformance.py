"""The Checkpointer contract, written once and run against every backend (the ``store``
fixture is parametrized over SQLite and Postgres)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, cast

import pytest

from tether import Checkpoint, ConcurrentWriteError, ConfigurationError, SerializationError
from tether.checkpoint import latest_forkable, latest_resumable
from tether.errors import AlreadyResumed, RunNotFoundError
from tether.store.base import Checkpointer, RunRecord


def _run(store, eid: str = "run-1", name: str = "chain-a") -> str:
    store.create_run(RunRecord(eid, name, "chain"))
    return eid


def _cp(eid: str, node: str, state: dict, **kw) -> Checkpoint:
    return Checkpoint(
        execution_id=eid,
        node_id=node,
        step_type=kw.pop("step_type", "node"),
        status=kw.pop("status", "completed"),
        state_snapshot=state,
        **kw,
    )


def test_put_assigns_strictly_increasing_seq_and_ids(store):
    eid = _run(store)
    seqs = [store.put(_cp(eid, f"n{i}", {"i": i})).seq for i in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    ids = {cp.checkpoint_id for cp in store.list(eid)}
    assert len(ids) == 5 and all(ids)


def test_a_step_that_sets_another_run_status_keeps_its_own_row_status(store):
    eid = _run(store)
    store.put(_cp(eid, "n0", {"i": 0}), run_status="running")
    store.put(_cp(eid, "n1", {"i": 1}, status="failed"), run_status="paused", error="held")
    assert [cp.status for cp in store.list(eid)] == ["completed", "failed"]
    run = store.get_run(eid)
    assert (run.status, run.error) == ("paused", "held")


def test_get_last_is_highest_seq_with_full_state(store):
    eid = _run(store)
    for i in range(40):
        store.put(_cp(eid, f"n{i}", {"i": i, "log": list(range(i))}))
    last = store.get_last(eid)
    assert last.seq == 40 and last.node_id == "n39"
    assert last.state_snapshot == {"i": 39, "log": list(range(39))}
    before = store.get_last(eid, before_seq=10)
    assert before.seq == 9 and before.state_snapshot == {"i": 8, "log": list(range(8))}


def test_list_returns_every_row_in_seq_order_with_full_snapshots(store):
    eid = _run(store)
    states = [
        {"a": i, "items": ["x"] * i, **({"gone": 1} if i % 3 == 0 else {})} for i in range(50)
    ]
    for i, st in enumerate(states):
        store.put(_cp(eid, f"n{i}", st))
    rows = store.list(eid)
    assert [r.seq for r in rows] == list(range(1, 51))
    assert [r.state_snapshot for r in rows] == states


def test_get_checkpoint_by_id_returns_that_rows_state(store):
    eid = _run(store)
    ids = [store.put(_cp(eid, f"n{i}", {"v": i})).checkpoint_id for i in range(20)]
    cp = store.get_checkpoint(eid, ids[7])
    assert cp.node_id == "n7" and cp.state_snapshot == {"v": 7}
    assert store.get_checkpoint(eid, "no-such-id") is None


def test_fields_round_trip(store):
    eid = _run(store)
    cp = _cp(
        eid,
        "turn:2/tool:refund",
        {"k": 1},
        step_type="tool_call",
        node_index=4,
        node_input={"amount": Decimal("12.50")},
        node_output=[1, "two"],
        iteration_counters={"a->b": 2},
        agent_path="agent:support/tool:refund",
        parent_checkpoint_id="p1",
        next_node_id="b",
    )
    store.put(cp)
    got = store.get_last(eid)
    assert got.node_input == {"amount": Decimal("12.50")}
    assert got.node_output == [1, "two"]
    assert got.iteration_counters == {"a->b": 2}
    assert got.agent_path == "agent:support/tool:refund"
    assert (got.parent_checkpoint_id, got.next_node_id, got.node_index) == ("p1", "b", 4)
    assert got.created_at.tzinfo is not None


def test_a_step_row_keeps_each_nullable_column_set_or_unset(store):
    # Each set of unset columns is its own statement on SQLite (NULL written into it).
    eid = _run(store)
    fields: dict[str, Any] = {
        "node_input": {"q": "x"},
        "node_output": {"updated_keys": ["k"]},
        "iteration_counters": {"a->b": 1},
        "interrupt_reason": "why",
        "interrupt_context": {"c": [1]},
        "agent_path": "agent:a",
        "parent_checkpoint_id": "p",
        "next_node_id": "b",
    }
    names = list(fields)
    shapes = [dict.fromkeys(names, True), dict.fromkeys(names, False)]
    shapes += [{n: i % 2 == j for i, n in enumerate(names)} for j in (0, 1)]
    shapes += [{n: n == only for n in names} for only in names]
    for i, shape in enumerate(shapes):
        kw = {n: fields[n] for n in names if shape[n]}
        store.put(_cp(eid, f"n{i}", {"i": i, "blob": "\x00é"}, **kw))
    rows = store.list(eid)
    assert [r.state_snapshot["i"] for r in rows] == list(range(len(shapes)))
    for row, shape in zip(rows, shapes, strict=True):
        got = {n: getattr(row, n) for n in names}
        want = {
            n: fields[n] if shape[n] else ({} if n == "iteration_counters" else None) for n in names
        }
        assert got == want, shape


def test_agent_path_prefix_scopes_get_last_and_list(store):
    eid = _run(store)
    store.put(_cp(eid, "turn:0", {}, agent_path="swarm:s/agent:a"))
    store.put(_cp(eid, "turn:0", {}, agent_path="swarm:s/agent:ab"))
    store.put(_cp(eid, "turn:1/tool:x", {}, agent_path="swarm:s/agent:a/tool:x"))
    store.put(_cp(eid, "turn:1", {}, agent_path="swarm:s/agent:b"))
    last_a = store.get_last(eid, agent_path_prefix="swarm:s/agent:a")
    assert last_a.agent_path == "swarm:s/agent:a/tool:x"
    paths = [c.agent_path for c in store.list(eid, agent_path_prefix="swarm:s/agent:a")]
    assert paths == ["swarm:s/agent:a", "swarm:s/agent:a/tool:x"]


def test_record_interrupt_writes_row_pending_and_paused_status_together(store):
    eid = _run(store)
    store.put(_cp(eid, "a", {"x": 1}))
    pending = store.record_interrupt(
        _cp(
            eid,
            "review",
            {"x": 1},
            status="interrupted",
            step_type="hitl_pause",
            interrupt_reason="manager_approval",
            interrupt_context={"amount": 900},
        )
    )
    assert pending.reason == "manager_approval" and pending.context == {"amount": 900}
    assert store.get_last(eid).status == "interrupted"
    assert store.get_pending_interrupt(eid).checkpoint_id == pending.checkpoint_id
    assert store.get_run(eid).status == "paused"
    assert [p.execution_id for p in store.list_pending_interrupts()] == [eid]


def test_record_interrupt_with_bad_context_writes_nothing(store):
    eid = _run(store)
    store.put(_cp(eid, "a", {"x": 1}))
    with pytest.raises(SerializationError):
        store.record_interrupt(
            _cp(
                eid,
                "review",
                {"x": 1},
                status="interrupted",
                interrupt_reason="r",
                interrupt_context={"f": object()},
            )
        )
    assert store.get_last(eid).node_id == "a"
    assert store.get_pending_interrupt(eid) is None


def _paused(store, eid="run-p"):
    _run(store, eid)
    store.record_interrupt(_cp(eid, "review", {}, status="interrupted", interrupt_reason="r"))
    return eid


def test_claim_is_won_once(store):
    eid = _paused(store)
    first = store.claim_interrupt(
        eid, owner="o1", resume_value={"approved": True}, lease_seconds=60
    )
    assert first is not None and first.resume_value == {"approved": True}
    assert (
        store.claim_interrupt(eid, owner="o2", resume_value={"approved": False}, lease_seconds=60)
        is None
    )
    assert store.get_pending_interrupt(eid).resume_value == {"approved": True}


def test_claim_without_answer_needs_a_stored_answer_and_a_lapsed_lease(store):
    eid = _paused(store)
    assert store.claim_interrupt(eid, owner="o1", resume_value=None, lease_seconds=60) is None
    assert (
        store.claim_interrupt(eid, owner="o1", resume_value={"approved": True}, lease_seconds=-1)
        is not None
    )  # lease already lapsed
    got = store.claim_interrupt(eid, owner="o2", resume_value=None, lease_seconds=60)
    assert got is not None and got.claimed_by == "o2" and got.resume_value == {"approved": True}
    # the answer cannot be replaced once given
    assert (
        store.claim_interrupt(eid, owner="o3", resume_value={"approved": False}, lease_seconds=60)
        is None
    )


def test_claim_can_be_taken_from_a_named_dead_owner(store):
    eid = _paused(store)
    store.claim_interrupt(eid, owner="dead", resume_value={"approved": True}, lease_seconds=600)
    assert store.claim_interrupt(eid, owner="o2", resume_value=None, lease_seconds=60) is None
    got = store.claim_interrupt(
        eid, owner="o2", resume_value=None, lease_seconds=60, steal_from="dead"
    )
    assert got is not None and got.claimed_by == "o2"


def test_put_releasing_a_claim_deletes_pending_and_is_fenced(store):
    eid = _paused(store)
    store.claim_interrupt(eid, owner="o1", resume_value={"approved": True}, lease_seconds=-1)
    store.claim_interrupt(eid, owner="o2", resume_value=None, lease_seconds=60)
    with pytest.raises(ConcurrentWriteError):
        store.put(_cp(eid, "review", {"done": 1}), release_claim_of="o1")
    assert store.get_last(eid).status == "interrupted"  # nothing committed by the loser
    store.put(_cp(eid, "review", {"done": 1}), release_claim_of="o2")
    assert store.get_pending_interrupt(eid) is None


def test_a_run_end_that_loses_the_race_for_its_step_leaves_the_run_status_unchanged(store, db_url):
    import tether

    eid = _run(store)
    store.put(_cp(eid, "a", {"x": 1}))
    other = tether.connect(db_url)
    try:
        other.get_last(eid)  # primes the other writer's head at seq 1
        store.put(_cp(eid, "b", {"x": 2}))
        with pytest.raises(ConcurrentWriteError):
            other.put(_cp(eid, "run_end", {}, step_type="run_end"), run_status="failed")
    finally:
        other.close()
    run = store.get_run(eid)
    assert run.status == "running" and run.finished_at is None and run.error is None
    assert [cp.node_id for cp in store.list(eid)] == ["a", "b"]


def test_release_claim_keeps_the_answer(store):
    eid = _paused(store)
    store.claim_interrupt(eid, owner="o1", resume_value={"approved": True}, lease_seconds=60)
    assert store.release_claim(eid, owner="o1")
    got = store.claim_interrupt(eid, owner="o2", resume_value=None, lease_seconds=60)
    assert got.resume_value == {"approved": True}


def test_answer_interrupt_without_claim(store):
    eid = _paused(store)
    assert store.answer_interrupt(eid, {"approved": False, "data": 1})
    assert not store.answer_interrupt(eid, {"approved": True})
    got = store.claim_interrupt(eid, owner="w", resume_value=None, lease_seconds=60)
    assert got.resume_value == {"approved": False, "data": 1}


def test_duplicate_seq_from_a_stale_writer_is_refused(store, tmp_path, db_url):
    import tether

    eid = _run(store)
    store.put(_cp(eid, "a", {"v": 1}))
    other = tether.connect(db_url)
    try:
        other.get_last(eid)  # primes the other writer's head at seq 1
        store.put(_cp(eid, "b", {"v": 2}))
        with pytest.raises(ConcurrentWriteError):
            other.put(_cp(eid, "b2", {"v": 3}))
    finally:
        other.close()
    assert [c.node_id for c in store.list(eid)] == ["a", "b"]


def test_idempotency_cache_including_none(store):
    eid = _run(store)
    assert store.get_idempotent(eid, "k") == (False, None)
    store.put_idempotent(eid, "k", None)
    assert store.get_idempotent(eid, "k") == (True, None)
    store.put_idempotent(eid, "k2", {"charged": Decimal("9.99")})
    assert store.put_idempotent(eid, "k2", {"charged": 0}) == {"charged": Decimal("9.99")}
    assert store.list_idempotent(eid) == {"k": None, "k2": {"charged": Decimal("9.99")}}
    assert store.get_idempotent("other-run", "k") == (False, None)


def test_create_run_twice_is_refused(store):
    _run(store, "dup")
    with pytest.raises(ConfigurationError):
        _run(store, "dup")


def test_list_runs_filters(store):
    _run(store, "r1", "alpha")
    _run(store, "r2", "beta")
    store.set_run_status("r2", "completed")
    assert {r.execution_id for r in store.list_runs()} == {"r1", "r2"}
    assert [r.execution_id for r in store.list_runs(status="completed")] == ["r2"]
    assert [r.execution_id for r in store.list_runs(runner_name="alpha")] == ["r1"]
    assert store.get_run("r2").finished_at is not None


def test_prune_deletes_only_old_finished_runs(store):
    done = _run(store, "done")
    store.put(_cp(done, "a", {}))
    store.put_idempotent(done, "k", 1)
    store.put(_cp(done, "run_end", {}, step_type="run_end"), run_status="completed")
    paused = _paused(store, "paused")
    store.put_idempotent(paused, "k", 1)
    running = _run(store, "running")
    store.put(_cp(running, "a", {}))
    store.put_idempotent(running, "k", 1)

    assert store.prune(dt.timedelta(days=1)).runs == 0  # nothing old enough
    dry = store.prune(dt.timedelta(seconds=-1), dry_run=True)
    assert dry.execution_ids == ["done"] and store.get_run("done") is not None
    result = store.prune(dt.timedelta(seconds=-1))
    assert result.execution_ids == ["done"] and result.checkpoints == 2 and result.idempotency == 1
    assert store.get_run("done") is None and store.list("done") == []
    for eid in ("paused", "running"):
        assert store.get_run(eid) is not None
        assert store.list(eid)
        assert store.get_idempotent(eid, "k") == (True, 1)
    assert store.get_pending_interrupt("paused") is not None


def test_unicode_and_nul_round_trip(store):
    eid = _run(store, "ünï\x00cødé-🚀")
    state = {"text": "nul\x00inside", "emoji": "🧵𝄞", "ключ": "значение", "": "empty key"}
    store.put(_cp(eid, "nöde-✓", state))
    got = store.get_last(eid)
    assert got.state_snapshot == state and got.node_id == "nöde-✓"


def test_ten_megabyte_state(store):
    eid = _run(store)
    big = {"blob": "x" * (10 * 1024 * 1024), "n": 1}
    store.put(_cp(eid, "a", big))
    store.put(_cp(eid, "b", {**big, "n": 2}))
    assert store.get_last(eid).state_snapshot == {**big, "n": 2}


def test_typed_values_round_trip(store):
    import uuid

    eid = _run(store)
    state = {
        "when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "day": dt.date(2026, 1, 2),
        "id": uuid.UUID(int=7),
        "amount": Decimal("1.10"),
        "raw": b"\x00\xff",
    }
    store.put(_cp(eid, "a", state))
    assert store.get_last(eid).state_snapshot == state


def test_delta_storage_is_linear_for_an_append_only_list(store):
    eid = _run(store)
    items: list[str] = []
    for i in range(200):
        items = [*items, f"{i:04d}" + "y" * 96]
        store.put(_cp(eid, f"n{i}", {"items": items, "step": i}))
    rows = store.list(eid)
    assert rows[-1].state_snapshot["items"] == items
    assert rows[57].state_snapshot["items"] == items[:58]


class _GetLastOnly:
    """A store offering only the protocol's reads (no ``get_resumable``), as another
    implementation of ``Checkpointer`` would: ``latest_resumable`` walks back with
    ``get_last``."""

    def __init__(self, store: Any) -> None:
        self.get_last, self.get_run = store.get_last, store.get_run


@pytest.mark.parametrize("reader", ["get_resumable", "get_last"])
def test_latest_resumable_and_forkable_step_over_the_tombstone(store, reader):
    # latest_resumable reads only get_last and get_run of a store without get_resumable.
    plain = store if reader == "get_resumable" else cast(Checkpointer, _GetLastOnly(store))
    eid = _run(store)
    store.put(_cp(eid, "a", {"v": 1}))
    store.put(_cp(eid, "run_end", {"v": 1}, step_type="run_end", status="failed"))
    store.put(_cp(eid, "run_end", {"v": 1}, step_type="run_end", status="failed"))
    assert (row := latest_resumable(plain, eid)) is not None and row.node_id == "a"
    assert (row := latest_forkable(store, eid)) is not None and row.node_id == "a"
    store.put(_cp(eid, "b", {"v": 2}))
    store.put(_cp(eid, "run_end", {"v": 2}, step_type="run_end"))
    with pytest.raises(AlreadyResumed):
        latest_resumable(plain, eid)
    assert (row := latest_forkable(store, eid)) is not None and row.node_id == "b"
    with pytest.raises(RunNotFoundError):
        latest_resumable(plain, "nope")
    only_markers = _run(store, "run-2")
    store.put(_cp(only_markers, "run_end", {}, step_type="run_end", status="failed"))
    assert latest_resumable(plain, only_markers) is None
