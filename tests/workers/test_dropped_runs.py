"""A run whose drive raised is given back for a retry, never kept by a live process that no
longer drives it; ``max_attempts`` still stops one that fails every time (``docs/workers.md``,
"When a drive raises"); a cancelled worker or drive stops even when an ``await`` inside a
store call swallowed the cancel."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
import time
from typing import Any, cast

import pytest

import tether
from tests.hostile.conftest import raw_sql
from tests.support.waiting import wait_for
from tests.workers.procs import spawn_worker, stop_all
from tether import Chain
from tether.checkpoint import Checkpoint
from tether.engine.claim import claim_heartbeat
from tether.errors import CorruptRecordError, StoreUnavailableError

LEASE_SECONDS = 3.0


def _setup(store: Any) -> None:
    getattr(store, "setup", lambda: None)()


def test_a_run_whose_drive_raised_is_retried_by_the_live_worker_within_a_lease(
    store_and_url, tmp_path
):
    store, url = store_and_url
    _setup(store)
    marks = tmp_path / "marks"
    marks.mkdir()
    ids = [f"flaky-{i}" for i in range(3)]
    for eid in ids:
        tether.enqueue(store, "flaky", {"eid": eid}, execution_id=eid)
    # One worker: nobody else can retry the runs its drives gave up.
    worker = spawn_worker(
        url, tmp_path, "w", lease_seconds=LEASE_SECONDS, env={"TETHER_TEST_MARKS": str(marks)}
    )
    try:

        def finished() -> bool:
            return all(store.get_run(eid).status == "completed" for eid in ids)

        wait_for(finished, "the runs whose first drive raised to complete", 30)
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    finally:
        stop_all([worker])
    log = (tmp_path / "w.log").read_text()
    assert log.count("drive raised") == len(ids), log
    assert f"worker stopped: {2 * len(ids)} claimed" in log, log
    for eid in ids:
        run = store.get_run(eid)
        assert run.owner is None and run.lease_expires_at is None
        assert [cp.node_id for cp in store.list(eid)] == ["once", "run_end"]
        failed_at = dt.datetime.fromtimestamp((marks / eid).stat().st_mtime, dt.UTC)
        retried_after = (run.finished_at - failed_at).total_seconds()
        print(f"{eid}: retried and finished {retried_after:.2f} s after its drive raised")
        # The store "went away": nothing was written, and the lease lapsed one period after
        # its last renewal (at most that long before the drive raised).
        assert retried_after < 2 * LEASE_SECONDS


def _broken_chain(store: Any) -> Chain:
    chain = Chain("broken", store)
    chain.add_node("a", lambda state: {"a": 1})
    chain.add_node("b", lambda state: {"b": 2})
    chain.add_edge("a", "b")
    return chain


def _crashed_run_with_a_corrupt_row(store: Any, eid: str) -> None:
    """A run whose process died after step ``a``, whose row for ``a`` cannot be decoded: every
    drive that continues it raises ``CorruptRecordError``."""
    store.create_run(tether.RunRecord(eid, "broken", "chain", input={}))
    store.put(Checkpoint(eid, "a", "node", "completed", {"a": 1}, next_node_id="b"))
    raw_sql(store)("UPDATE {t}checkpoints SET state = ? WHERE execution_id = ?", (b"{bad", eid))


def test_a_run_whose_drive_raises_every_time_is_dead_lettered_after_max_attempts(store):
    chain = _broken_chain(store)
    _crashed_run_with_a_corrupt_row(store, "corrupt")
    started = time.monotonic()
    stats = tether.run_worker(
        tether.Registry(chain),
        store,
        lease_seconds=30,
        max_attempts=3,
        poll_interval_seconds=0.01,
        # Well inside one lease: each retry follows a give-back, not a lapse.
        stop=lambda: store.get_run("corrupt").status == "failed" or time.monotonic() > started + 20,
    )
    run = store.get_run("corrupt")
    assert run.status == "failed" and run.error.startswith("DeadLetter:"), run
    assert "claimed 3 times" in run.error and run.owner is None
    assert stats.errors == 3 and stats.dead_lettered == 1 and stats.finished == 0
    rows = raw_sql(store)("SELECT node_id FROM {t}checkpoints WHERE execution_id = ?", ("corrupt",))
    assert rows == [("a",)]  # nothing written by the failed drives


def test_a_resume_by_hand_that_raised_gives_the_run_back_at_once(store):
    chain = _broken_chain(store)
    _crashed_run_with_a_corrupt_row(store, "corrupt")
    with pytest.raises(CorruptRecordError):
        chain.resume("corrupt")
    run = store.get_run("corrupt")
    assert run.status == "running" and run.owner is None
    # Nobody drives it: a worker, of any lease length, claims it now.
    (claimed,) = store.claim_runs(owner="w:1:x", limit=5, lease_seconds=30, max_attempts=5)
    assert claimed.execution_id == "corrupt" and claimed.previous_owner is None


def test_an_in_process_drive_whose_store_went_away_leaves_its_lease_to_lapse_unrenewed(store):
    chain = Chain("unavailable", store)
    chain.lease_seconds = 1

    def step(state: dict[str, Any]) -> dict[str, Any]:
        raise StoreUnavailableError("the store went away")

    chain.add_node("step", step)
    with pytest.raises(StoreUnavailableError):
        chain.run({}, execution_id="away")
    run = store.get_run("away")
    # Nothing written on the way out (the store was away); the lease is the creation's.
    assert run.status == "running" and run.owner is not None
    assert run.lease_expires_at <= run.created_at + dt.timedelta(seconds=1)
    wait_for(
        lambda: store.claim_runs(owner="w:1:x", limit=5, lease_seconds=30, max_attempts=5),
        "a worker's claim of the lapsed run",
        5,
    )
    assert store.get_run("away").owner == "w:1:x"


def _enqueue_a_long_run(store: Any, state: dict[str, int]) -> tether.Registry:
    """A queued run "long" whose one step counts ``started``, sleeps 2 s, counts ``finished``."""

    async def long_step(s: dict[str, Any]) -> dict[str, Any]:
        state["started"] += 1
        await asyncio.sleep(2)
        state["finished"] += 1
        return {"done": True}

    chain = Chain("long", store)
    chain.add_node("step", long_step)
    tether.enqueue(store, "long", {}, execution_id="long")
    return tether.Registry(chain)


def test_a_cancelled_worker_stops_its_drives_and_stops_renewing_their_leases(store):
    state = {"started": 0, "finished": 0}
    registry = _enqueue_a_long_run(store, state)

    async def main() -> None:
        worker = asyncio.create_task(
            tether.arun_worker(registry, store, lease_seconds=0.3, poll_interval_seconds=0.01)
        )
        while not state["started"]:
            await asyncio.sleep(0.01)
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
        await asyncio.sleep(2.5)  # the loop lives on, as in a long-lived application

    asyncio.run(main())
    assert state == {"started": 1, "finished": 0}  # the drive stopped with its worker
    run = store.get_run("long")
    assert run.status == "running" and store.list("long") == []
    # Its lease was left to lapse (nothing renews it), not given back: the cancelled drive may
    # still have a step in flight in a thread, so the next owner waits one lease period.
    assert run.lease_expires_at is not None
    assert run.lease_expires_at < dt.datetime.now(dt.UTC)
    (claimed,) = store.claim_runs(owner="w:1:y", limit=5, lease_seconds=30, max_attempts=5)
    assert claimed.execution_id == "long"


@pytest.mark.parametrize(
    ("value", "named"),
    [("not a dict", "a chain's input is a dict of state, got str"), ([1, 2], "got list")],
)
def test_a_queued_run_whose_input_the_runner_refuses_fails_at_once_naming_why(store, value, named):
    # Bad input is no crash: it used to be retried with a traceback per claim and end as a
    # DeadLetter saying its workers kept dying.
    chain = _broken_chain(store)
    tether.enqueue(store, "broken", value, execution_id="bad-input")
    tether.enqueue(store, "broken", {}, execution_id="good-input")
    started = time.monotonic()
    stats = tether.run_worker(
        tether.Registry(chain),
        store,
        lease_seconds=30,
        max_attempts=3,
        poll_interval_seconds=0.01,
        stop=lambda: (
            (
                store.get_run("bad-input").status == "failed"
                and store.get_run("good-input").status == "completed"
            )
            or time.monotonic() > started + 20
        ),
    )
    run = store.get_run("bad-input")
    assert run.status == "failed" and run.error.startswith("ConfigurationError: "), run
    assert named in run.error
    assert run.owner is None and run.finished_at is not None
    assert stats.errors == 0 and stats.dead_lettered == 0 and stats.refused == 1, stats
    assert store.get_run("good-input").status == "completed"
    assert store.list("bad-input") == []


class _SwallowedCancel:
    """Makes ``store.<method>`` swallow one cancel, as CPython 3.11's ``asyncio.wait_for`` does
    when its inner future finished as the cancel landed (gh-86296; psycopg_pool waits for a free
    connection that way): the call ``holds(*args, **kwargs)`` picks sets ``holding`` and waits
    for a cancel, then returns the call's result instead of raising. The request stays counted
    on the task (``Task.cancelling()``)."""

    def __init__(self, monkeypatch: Any, store: Any, method: str, holds: Any) -> None:
        self.holding = asyncio.Event()
        self.swallowed = 0
        call = getattr(store, method)

        async def swallowing(*args: Any, **kwargs: Any) -> Any:
            inner = asyncio.ensure_future(call(*args, **kwargs))
            if not holds(*args, **kwargs):
                return await inner
            self.holding.set()
            try:
                return await asyncio.shield(asyncio.sleep(5))
            except asyncio.CancelledError:
                self.swallowed += 1
                return await inner

        monkeypatch.setattr(store, method, swallowing)

    async def cancel_when_holding(self, task: asyncio.Task[Any]) -> None:
        """Cancel ``task`` inside the held call; it must stop within 5 s all the same."""
        await asyncio.wait_for(self.holding.wait(), 10)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=5)
        assert done, "the task went on after its cancel was swallowed"
        with pytest.raises(asyncio.CancelledError):
            await task


def test_a_cancel_swallowed_by_a_store_call_still_stops_the_worker(store, monkeypatch):
    state = {"started": 0, "finished": 0}
    # The claim after the step started swallows the worker's cancel.
    swallow = _SwallowedCancel(monkeypatch, store, "aclaim_runs", lambda **_: state["started"])
    registry = _enqueue_a_long_run(store, state)

    async def main() -> None:
        worker = asyncio.create_task(
            tether.arun_worker(registry, store, lease_seconds=5, poll_interval_seconds=0.01)
        )
        await swallow.cancel_when_holding(worker)

    asyncio.run(main())
    assert state == {"started": 1, "finished": 0} and swallow.swallowed == 1
    assert store.get_run("long").status == "running"


def test_a_cancel_swallowed_by_a_step_commit_stops_the_drive_before_the_next_step(
    store, monkeypatch
):
    ran: list[str] = []
    swallow = _SwallowedCancel(monkeypatch, store, "aput", lambda cp, **_: cp.node_id == "first")

    def step(name: str) -> Any:
        def node(s: dict[str, Any]) -> dict[str, Any]:
            ran.append(name)
            return {name: True}

        return node

    chain = Chain("two", store)
    chain.add_node("first", step("first"))
    chain.add_node("second", step("second"))

    async def main() -> None:
        await swallow.cancel_when_holding(asyncio.create_task(chain.arun({}, execution_id="two")))

    asyncio.run(main())
    assert ran == ["first"] and swallow.swallowed == 1
    # The first step's commit landed; the run is left to be resumed at the second.
    assert [cp.node_id for cp in store.list("two")] == ["first"]


def test_a_cancel_swallowed_by_a_claim_renewal_does_not_hang_the_drive():
    holding = asyncio.Event()
    swallowed: list[bool] = []

    class Renewing:  # only what claim_heartbeat calls
        async def arenew_claim(self, execution_id: str, *, owner: str, lease_seconds: float):
            if not swallowed:
                holding.set()
                try:
                    await asyncio.shield(asyncio.sleep(5))
                except asyncio.CancelledError:
                    swallowed.append(True)  # once, as 3.11's wait_for may
            return True

    async def beating() -> None:
        async with claim_heartbeat(cast(Any, Renewing()), "r", "w:1:x", 0.03):
            await holding.wait()  # the beat is inside its renewal: leaving cancels it there

    async def main() -> None:
        done, _ = await asyncio.wait([asyncio.create_task(beating())], timeout=3)
        assert done, "the heartbeat went on renewing after its cancel: the drive hangs"

    asyncio.run(main())
    assert swallowed == [True]
