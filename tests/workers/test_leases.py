"""Run leases and fencing in one process, on both backends (``docs/workers.md``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import tether
from tether import Chain, LeaseHeldError, LeaseLost, Resume, interrupt
from tether.checkpoint import Checkpoint


def _three(store: Any, seen: list[str] | None = None) -> Chain:
    chain = Chain("three", store)

    def step(name: str) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            if seen is not None:
                seen.append(name)
            return {name: True}

        return run

    chain.add_node("a", step("a"))
    chain.add_node("b", step("b"))
    chain.add_node("c", step("c"))
    chain.add_edge("a", "b")
    chain.add_edge("b", "c")
    return chain


def test_a_run_started_in_process_holds_no_lease_once_it_completed(store):
    result = _three(store).run({})
    assert result.status == "completed"
    run = store.get_run(result.execution_id)
    assert run.owner is None and run.lease_expires_at is None


def test_a_commit_after_another_owner_took_the_lease_is_refused_with_lease_lost(store):
    store.create_run(tether.RunRecord("r1", "three", "chain", owner="hostA:1:a"), lease_seconds=30)
    store.fence("r1", "hostA:1:a")
    store.put(Checkpoint("r1", "a", "node", "completed", {"a": 1}))
    won, previous, *_ = store.acquire_run_lease(
        "r1", owner="hostB:2:b", lease_seconds=30, steal_from="hostA:1:a"
    )
    assert won and previous == "hostA:1:a"
    store.unfence("r1")
    store.fence("r1", "hostA:1:a")  # the stale owner's view
    with pytest.raises(LeaseLost) as info:
        store.put(Checkpoint("r1", "b", "node", "completed", {"b": 1}))
    assert info.value.execution_id == "r1" and info.value.owner == "hostA:1:a"
    assert [cp.node_id for cp in store.list("r1")] == ["a"]
    assert isinstance(info.value, tether.ConcurrentWriteError)


def test_a_run_end_after_another_owner_took_the_lease_leaves_the_run_as_the_new_owner_has_it(
    store, db_url
):
    store.create_run(tether.RunRecord("r1e", "three", "chain", owner="hostA:1:a"), lease_seconds=30)
    store.fence("r1e", "hostA:1:a")
    store.put(Checkpoint("r1e", "a", "node", "completed", {"a": 1}))
    other = tether.connect(db_url)  # another process takes the run over
    assert isinstance(other, tether.SQLiteCheckpointer | tether.PostgresCheckpointer)
    try:
        won, *_ = other.acquire_run_lease(
            "r1e", owner="hostB:2:b", lease_seconds=30, steal_from="hostA:1:a"
        )
    finally:
        other.close()
    assert won
    with pytest.raises(LeaseLost):
        store.put(
            Checkpoint("r1e", "run_end", "run_end", "completed", {"a": 1}),
            run_status="failed",
            error="boom",
        )
    run = store.get_run("r1e")
    assert run.status == "running" and run.error is None and run.finished_at is None
    assert run.owner == "hostB:2:b"
    assert [cp.node_id for cp in store.list("r1e")] == ["a"]


def test_a_leaseholders_run_end_commits_its_checkpoint_and_the_run_status_together(store):
    store.create_run(tether.RunRecord("r1f", "three", "chain", owner="hostA:1:a"), lease_seconds=30)
    store.fence("r1f", "hostA:1:a")
    store.put(Checkpoint("r1f", "a", "node", "completed", {"a": 1}))
    store.put(
        Checkpoint("r1f", "run_end", "run_end", "completed", {"a": 1}), run_status="completed"
    )
    run = store.get_run("r1f")
    assert run.status == "completed" and run.finished_at is not None
    assert [cp.node_id for cp in store.list("r1f")] == ["a", "run_end"]


def test_the_commit_ending_a_drive_gives_the_lease_back_in_its_own_transaction(store):
    store.create_run(tether.RunRecord("r1g", "three", "chain", owner="hostA:1:a"), lease_seconds=30)
    store.fence("r1g", "hostA:1:a")
    store.put(Checkpoint("r1g", "a", "node", "completed", {"a": 1}))
    assert store.get_run("r1g").owner == "hostA:1:a"
    store.put(
        Checkpoint("r1g", "run_end", "run_end", "completed", {"a": 1}),
        run_status="completed",
        release_lease_of="hostA:1:a",
    )
    run = store.get_run("r1g")
    assert run.status == "completed" and run.owner is None and run.lease_expires_at is None
    assert store.fenced_by("r1g") is None
    # Naming someone who does not hold the lease changes nothing about it.
    store.create_run(tether.RunRecord("r1h", "three", "chain", owner="hostA:1:a"), lease_seconds=30)
    store.fence("r1h", "hostA:1:a")
    store.record_interrupt(
        Checkpoint("r1h", "a", "hitl_pause", "interrupted", {}, interrupt_reason="ok?"),
        release_lease_of="hostC:3:c",
    )
    run = store.get_run("r1h")
    assert run.status == "paused" and run.owner == "hostA:1:a"
    store.record_interrupt(
        Checkpoint("r1h", "a", "hitl_pause", "interrupted", {}, interrupt_reason="ok?"),
        release_lease_of="hostA:1:a",
    )
    assert store.get_run("r1h").owner is None and store.fenced_by("r1h") is None


@pytest.mark.parametrize("ending", ["completed", "paused", "failed"])
def test_a_drive_gives_its_lease_back_with_its_last_commit_not_after_it(store, monkeypatch, ending):
    released: list[str] = []
    real = store.arelease_run_lease

    async def counted(execution_id: str, *, owner: str) -> bool:
        released.append(execution_id)
        return await real(execution_id, owner=owner)

    monkeypatch.setattr(store, "arelease_run_lease", counted)
    chain = Chain("ends", store)

    def only(state: dict[str, Any]) -> dict[str, Any]:
        if ending == "paused":
            interrupt("ok?")
        if ending == "failed":
            raise RuntimeError("boom")
        return {"done": True}

    chain.add_node("only", only)
    result = chain.run({})
    assert result.status == ending
    run = store.get_run(result.execution_id)
    assert run.status == ending and run.owner is None and run.lease_expires_at is None
    assert released == []  # no separate release after the drive's last commit


def test_resume_by_hand_of_a_run_a_live_process_holds_raises_lease_held(store):
    chain = _three(store)
    store.create_run(tether.RunRecord("r2", "three", "chain", input={}))
    won, *_ = store.acquire_run_lease(
        "r2", owner="elsewhere:1:x", lease_seconds=60, steal_from=None
    )
    assert won
    with pytest.raises(LeaseHeldError) as info:
        chain.resume("r2")
    assert info.value.owner == "elsewhere:1:x"


def test_resume_by_hand_takes_over_a_lapsed_lease(store):
    seen: list[str] = []
    chain = _three(store, seen)
    store.create_run(tether.RunRecord("r3", "three", "chain", input={}))
    store.acquire_run_lease("r3", owner="elsewhere:1:x", lease_seconds=0.01, steal_from=None)
    import time

    time.sleep(0.05)
    assert chain.resume("r3").status == "completed"
    assert seen == ["a", "b", "c"]


def test_a_run_that_crashed_in_this_process_is_resumable_at_once(store):
    seen: list[str] = []
    chain = _three(store, seen)
    boom = {"on": True}

    def b(state: dict[str, Any]) -> dict[str, Any]:
        if boom["on"]:
            raise KeyboardInterrupt  # escapes the executor like a crash
        return {"b": True}

    chain.nodes["b"] = b
    with pytest.raises(KeyboardInterrupt):
        chain.run({}, execution_id="r4")
    assert store.get_run("r4").owner is not None  # the "crashed" drive kept its lease
    boom["on"] = False
    assert chain.resume("r4").status == "completed"


def test_enqueue_twice_with_one_id_records_one_run(store):
    eid = tether.enqueue(store, "three", {"x": 1}, execution_id="q1")
    again = tether.enqueue(store, "three", {"x": 2}, execution_id="q1", priority=9)
    assert eid == again == "q1"
    run = store.get_run("q1")
    assert run.status == "queued" and run.input == {"x": 1}


def test_a_worker_starts_queued_runs_in_priority_order_then_oldest(store):
    order: list[str] = []
    chain = Chain("three", store)

    def record(state: dict[str, Any]) -> dict[str, Any]:
        order.append(state["tag"])
        return {"done": True}

    chain.add_node("a", record)
    for tag, prio in [("low1", 0), ("high", 5), ("low2", 0), ("mid", 1)]:
        tether.enqueue(store, "three", {"tag": tag}, execution_id=tag, priority=prio)
    stop = threading.Event()
    registry = tether.Registry(chain)

    def until_done() -> bool:
        return len(order) == 4

    stats = tether.run_worker(
        registry, store, concurrency=1, poll_interval_seconds=0.01, stop=until_done
    )
    assert order == ["high", "mid", "low1", "low2"]
    assert stats.claimed == 4 and stats.finished == 4
    for tag in order:
        run = store.get_run(tag)
        assert run.status == "completed" and run.owner is None
    stop.set()


def test_a_worker_continues_an_interrupt_answered_from_anywhere(store):
    chain = Chain("approval", store)

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("ok?", {}).approved}

    chain.add_node("ask", ask)
    paused = chain.run({})
    assert paused.status == "paused"
    eid = paused.execution_id
    assert store.answer_interrupt(eid, Resume(approved=True).to_dict())
    stats = tether.run_worker(
        tether.Registry(chain),
        store,
        poll_interval_seconds=0.01,
        stop=lambda: store.get_run(eid).status == "completed",
    )
    assert stats.finished == 1
    assert store.get_pending_interrupt(eid) is None
    assert store.list(eid)[-1].state_snapshot["approved"] is True


def test_a_run_claimed_max_attempts_times_without_finishing_is_dead_lettered(store):
    chain = _three(store)
    tether.enqueue(store, "three", {}, execution_id="dl")
    for _ in range(2):  # two workers that die right after claiming
        (claimed,) = store.claim_runs(owner="gone:1:x", limit=5, lease_seconds=0.01, max_attempts=2)
        assert not claimed.dead_lettered
        store.unfence("dl")
        import time

        time.sleep(0.05)
    (last,) = store.claim_runs(owner="gone:1:y", limit=5, lease_seconds=30, max_attempts=2)
    assert last.dead_lettered
    run = store.get_run("dl")
    assert run.status == "failed" and run.error.startswith("DeadLetter:")
    assert store.claim_runs(owner="gone:1:z", limit=5, lease_seconds=30, max_attempts=2) == []
    assert chain.resume("dl").status == "completed"  # resumable by hand once fixed


def test_arun_worker_stops_on_an_asyncio_event(store):
    async def main() -> Any:
        stop = asyncio.Event()
        task = asyncio.create_task(
            tether.arun_worker(
                tether.Registry(_three(store)), store, stop=stop, poll_interval_seconds=0.01
            )
        )
        await asyncio.sleep(0.05)
        stop.set()
        return await task

    assert asyncio.run(main()).claimed == 0


def test_per_runner_limit_caps_how_many_runs_of_a_runner_a_worker_drives_at_once(store):
    live = {"now": 0, "most": 0, "done": 0}

    async def step(state: dict[str, Any]) -> dict[str, Any]:
        live["now"] += 1
        live["most"] = max(live["most"], live["now"])
        await asyncio.sleep(0.05)
        live["now"] -= 1
        live["done"] += 1
        return {"ok": True}

    limited = Chain("limited", store)
    limited.add_node("a", step)
    for i in range(4):
        tether.enqueue(store, "limited", {}, execution_id=f"l{i}")
    stats = tether.run_worker(
        tether.Registry(limited),
        store,
        concurrency=4,
        poll_interval_seconds=0.01,
        per_runner_limit={"limited": 1},
        stop=lambda: live["done"] == 4,
    )
    assert stats.finished == 4 and live["most"] == 1


@pytest.mark.parametrize("ending", ["completed", "paused", "failed"])
def test_a_workers_drive_gives_the_lease_back_with_its_last_commit_not_after_it(
    store, monkeypatch, ending
):
    # A separate give-back after the run ended could fail (the server restarting) and leave a
    # finished run owned for good.
    released: list[str] = []
    real = store.arelease_run_lease

    async def counted(execution_id: str, *, owner: str) -> bool:
        released.append(execution_id)
        return await real(execution_id, owner=owner)

    monkeypatch.setattr(store, "arelease_run_lease", counted)
    chain = Chain("ends", store)

    def only(state: dict[str, Any]) -> dict[str, Any]:
        if ending == "paused":
            interrupt("ok?")
        if ending == "failed":
            raise RuntimeError("boom")
        return {"done": True}

    chain.add_node("only", only)
    tether.enqueue(store, "ends", {}, execution_id="queued")
    stats = tether.run_worker(
        tether.Registry(chain),
        store,
        poll_interval_seconds=0.01,
        stop=lambda: store.get_run("queued").status == ending,
    )
    assert stats.finished == 1
    run = store.get_run("queued")
    assert run.owner is None and run.lease_expires_at is None
    assert released == []
