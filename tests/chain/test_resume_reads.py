"""What a resume reads and writes before its first node runs: the run from its lease take, the
resumable row in one read (``get_resumable``), and a failed run set ``running`` only once the
resume cannot be refused any more."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether import Chain, Checkpoint
from tether.errors import AlreadyResumed, ConfigurationError


def _walk_back(store: Any, eid: str) -> tuple[Checkpoint | None, str | None]:
    """The resumable row found the long way: get_last, then back over run-end markers."""
    last = store.get_last(eid)
    ended = last.status if last is not None and last.is_run_end else None
    while last is not None and last.is_run_end:
        last = store.get_last(eid, before_seq=last.seq)
    return last, ended


def _failing_chain(store: Any, nodes: int, fail_at: set[int], name: str = "reads") -> Chain:
    """``nodes`` counter nodes appending to a list; node ``i`` in ``fail_at`` raises."""

    def make(i: int) -> Any:
        def step(state: dict[str, Any]) -> dict[str, Any]:
            if i in fail_at:
                raise RuntimeError(f"node {i} fails")
            return {"n": state["n"] + 1, "items": [*state["items"], f"item-{i}"]}

        return step

    chain = Chain(name, store)
    for i in range(nodes):
        chain.add_node(f"n{i}", make(i))
        if i:
            chain.add_edge(f"n{i - 1}", f"n{i}")
    return chain


def _same(a: Checkpoint | None, b: Checkpoint | None) -> None:
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert (a.checkpoint_id, a.seq, a.node_id, a.status) == (
            b.checkpoint_id,
            b.seq,
            b.node_id,
            b.status,
        )
        assert a.state_snapshot == b.state_snapshot
        assert a.next_node_id == b.next_node_id


def test_get_resumable_finds_the_row_walking_back_would_over_markers_and_snapshots(store):
    fail_at = {37}
    chain = _failing_chain(store, 40, fail_at)
    eid = chain.run({"n": 0, "items": []}).execution_id  # 37 rows (past a snapshot), a marker
    got = store.get_resumable(eid)
    assert got[1] == "failed" and got[0] is not None and got[0].node_id == "n36"
    _same(got[0], _walk_back(store, eid)[0])
    assert got[0].state_snapshot["items"][-1] == "item-36"

    chain.resume(eid)  # fails at n37 again: two markers one after another
    rows = store.list(eid)
    assert [r.step_type for r in rows[-2:]] == ["run_end", "run_end"]
    got = store.get_resumable(eid)
    assert got[1] == "failed"
    _same(got[0], _walk_back(store, eid)[0])

    fail_at.clear()
    done = chain.resume(eid)  # the head get_resumable primed continues the run
    assert done.status == "completed" and done.output["n"] == 40
    cp, ended = store.get_resumable(eid)
    assert ended == "completed" and cp is not None and cp.node_id == "n39"
    _same(cp, _walk_back(store, eid)[0])


def test_get_resumable_of_a_run_with_only_markers_or_no_run_at_all(store):
    fail_at = {0}
    chain = _failing_chain(store, 2, fail_at, "first-fails")
    eid = chain.run({"n": 0, "items": []}).execution_id
    chain.resume(eid)
    chain.resume(eid)
    assert [r.step_type for r in store.list(eid)] == ["run_end"] * 3
    assert store.get_resumable(eid) == (None, "failed")
    assert tether.latest_resumable(store, eid) is None
    assert store.get_resumable("no-such-run") == (None, None)
    with pytest.raises(tether.RunNotFoundError):
        tether.latest_resumable(store, "no-such-run")
    fail_at.clear()
    assert chain.resume(eid).output["n"] == 2  # starts over from the input


def test_a_resumed_failed_run_is_running_while_its_node_runs(store):
    seen: list[tether.RunRecord] = []
    failing = [True]

    def flaky(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(store.get_run(state["eid"]))
        if failing[0]:
            raise RuntimeError("down")
        return {"ok": True}

    chain = Chain("flaky", store)
    chain.add_node("first", lambda s: {"eid": s["eid"]})
    chain.add_node("flaky", flaky)
    chain.add_edge("first", "flaky")
    eid = "flaky-run"
    assert chain.run({"eid": eid}, execution_id=eid).status == "failed"
    before = store.get_run(eid)
    assert before.status == "failed" and before.error == "RuntimeError: down"
    assert before.finished_at is not None

    failing[0] = False
    assert chain.resume(eid).status == "completed"
    during = seen[-1]
    assert during.status == "running" and during.error is None and during.finished_at is None
    assert during.owner is not None
    after = store.get_run(eid)
    assert after.status == "completed" and after.owner is None


@pytest.mark.parametrize("refusal", ["answer", "graph"])
def test_a_refused_resume_leaves_a_failed_run_failed_with_its_error(store, refusal):
    chain = _failing_chain(store, 3, {1}, "refused")
    eid = chain.run({"n": 0, "items": []}).execution_id
    before = store.get_run(eid)
    assert before.status == "failed"
    if refusal == "answer":  # an answer for a run that is not paused
        with pytest.raises(AlreadyResumed):
            chain.resume(eid, tether.Resume(approved=True))
    else:  # the run continues at a node this chain no longer has
        other = Chain("refused", store)
        other.add_node("n0", lambda s: {})
        with pytest.raises(ConfigurationError):
            other.resume(eid)
    after = store.get_run(eid)
    assert (after.status, after.error, after.finished_at) == (
        "failed",
        before.error,
        before.finished_at,
    )
    assert after.owner is None and after.lease_expires_at is None
    assert [r.node_id for r in store.list(eid)] == ["n0", "run_end"]


def test_a_sqlite_resume_and_its_steps_read_and_commit_what_the_design_says(tmp_path):
    """Statement by statement: the lease take (one statement), the resumable row and its state
    chain (two reads), the status, then per step one INSERT and no read; the run's end gives
    the lease back in its own commit."""
    store = tether.SQLiteCheckpointer(str(tmp_path / "t.db"))
    fail_at = {5}
    chain = _failing_chain(store, 8, fail_at, "counted")
    eid = chain.run({"n": 0, "items": []}).execution_id
    fail_at.clear()
    statements: list[str] = []
    store._conn().set_trace_callback(lambda sql: statements.append(sql.split()[0].upper()))
    assert chain.resume(eid).status == "completed"
    # the lease take of a free run: one compare-and-set UPDATE, a transaction of its own
    assert statements[0] == "UPDATE"
    # two reads: the two newest rows, then their state chain (seq, kind and state only)
    assert statements[1:3] == ["SELECT", "SELECT"]
    # the failed run set running once nothing can refuse the resume any more: one statement,
    # a transaction of its own
    assert statements[3] == "UPDATE"
    # n5, n6, n7: one INSERT each, a transaction of its own, and no read in between
    assert statements[4:7] == ["INSERT", "INSERT", "INSERT"]
    # the run's end: its row, then its status with the lease given back, in one commit
    assert statements[7:] == ["BEGIN", "INSERT", "UPDATE", "COMMIT"]
    store.close()


def test_a_resume_that_dies_right_after_its_lease_take_leaves_a_failed_run_failed(
    store, monkeypatch
):
    from tether._faults import SimulatedCrash

    chain = _failing_chain(store, 3, {1}, "dies-after-take")
    eid = chain.run({"n": 0, "items": []}).execution_id
    before = store.get_run(eid)
    took = store.aacquire_run_lease

    async def take_then_die(*args: Any, **kwargs: Any) -> Any:
        await took(*args, **kwargs)
        raise SimulatedCrash("killed right after the lease take")

    monkeypatch.setattr(store, "aacquire_run_lease", take_then_die)
    with pytest.raises(SimulatedCrash):
        chain.resume(eid)
    monkeypatch.undo()
    after = store.get_run(eid)
    assert (after.status, after.error, after.finished_at) == (
        "failed",
        before.error,
        before.finished_at,
    )
    assert after.owner is not None  # the dead drive's lease, taken over below
    with pytest.raises(AlreadyResumed):  # refused: an answer for a run that is not paused
        chain.resume(eid, tether.Resume(approved=True))
    assert store.get_run(eid).status == "failed"
    chain = _failing_chain(store, 3, set(), "dies-after-take")
    assert chain.resume(eid).status == "completed"


def test_a_store_without_get_resumable_is_walked_back_with_get_last(store, monkeypatch):
    monkeypatch.setattr(store, "aget_resumable", None)  # as a store that lacks it
    fail_at = {3}
    chain = _failing_chain(store, 5, fail_at, "walked")
    eid = chain.run({"n": 0, "items": []}).execution_id
    chain.resume(eid)  # fails at n3 again: two markers in a row
    fail_at.clear()
    done = chain.resume(eid)
    assert done.status == "completed" and done.output["n"] == 5
    with pytest.raises(AlreadyResumed, match="already completed"):
        chain.resume(eid)
