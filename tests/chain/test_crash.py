"""Crash tests: a child process SIGKILLed at named fault points, resumed from another process.

After each scenario: the final state equals a crash-free run's, each idempotent charge is in
the ledger exactly once, and no node whose checkpoint committed before the crash ran again.
"""

from __future__ import annotations

import json
import signal
from collections import Counter

import pytest

from tests.support.chains import read_lines
from tests.support.proc import run_child

ORDER = {"order_id": "A-1", "amount": 500}
EXPECTED_LOG = ["validate", "charge", "review", "notify"]


@pytest.fixture
def files(tmp_path):
    return {
        "TETHER_TEST_LEDGER": str(tmp_path / "ledger.txt"),
        "TETHER_TEST_STEPS": str(tmp_path / "steps.txt"),
    }


def _final(store, eid):
    run = store.get_run(eid)
    last = store.get_last(eid)
    return run.status, last


@pytest.mark.parametrize(
    ("fault", "ran_twice"),
    [
        ("chain.before_commit@2", {"charge"}),  # charge ran, its checkpoint did not commit
        ("chain.after_commit@2", set()),  # charge committed; nothing re-runs
        ("idempotent.after_cache", {"charge"}),  # inside charge, after the cached effect
        ("idempotent.after_effect", {"charge"}),  # effect ran, cache not written: at-least-once
    ],
)
def test_crash_before_pause_then_resume_from_another_process(
    store, db_url, files, fault, ran_twice
):
    eid = f"crash-{fault.replace('@', '-')}"
    code, _ = run_child([db_url, "orders", "run", eid, json.dumps(ORDER)], fault=fault, **files)
    assert code == -signal.SIGKILL
    code, out = run_child([db_url, "orders", "resume", eid], **files)
    assert out is not None and out["status"] == "paused", out
    code, out = run_child([db_url, "orders", "resume", eid, "approve"], **files)
    assert out is not None and out["status"] == "completed", out

    status, last = _final(store, eid)
    assert status == "completed" and last.state_snapshot["log"] == EXPECTED_LOG
    ledger = read_lines(files["TETHER_TEST_LEDGER"])
    if fault == "idempotent.after_effect":
        # documented at-least-once window: the body ran, the process died before caching
        assert ledger == ["charge A-1 500", "charge A-1 500"]
    else:
        assert ledger == ["charge A-1 500"]
    steps = Counter(read_lines(files["TETHER_TEST_STEPS"]))
    assert steps["validate"] == 1
    assert steps["charge"] == (2 if "charge" in ran_twice else 1)
    assert steps["notify"] == 1
    assert steps["review"] == 2  # paused once, re-run with the answer


def test_crash_after_claim_does_not_strand_the_run_and_keeps_the_answer(store, db_url, files):
    eid = "crash-after-claim"
    _, out = run_child([db_url, "orders", "run", eid, json.dumps(ORDER)], **files)
    assert out is not None and out["status"] == "paused"
    code, _ = run_child(
        [db_url, "orders", "resume", eid, "reject"], fault="chain.after_claim", **files
    )
    assert code == -signal.SIGKILL
    pending = store.get_pending_interrupt(eid)
    assert pending.resume_value["approved"] is False and pending.claimed_by
    # A different answer is refused: the interrupt was answered already.
    _, out = run_child([db_url, "orders", "resume", eid, "approve"], **files)
    assert out == {"status": "error", "error": "AlreadyResumed"}
    # Resuming without a value picks up the given answer from the dead claimer.
    _, out = run_child([db_url, "orders", "resume", eid], **files)
    assert out is not None and out["status"] == "completed"
    _status, last = _final(store, eid)
    assert last.state_snapshot["rejected"] is True and "approved" in last.state_snapshot
    assert last.state_snapshot["approved"] is False
    assert read_lines(files["TETHER_TEST_LEDGER"]) == ["charge A-1 500"]


def test_crash_inside_resumed_node_before_commit(store, db_url, files):
    eid = "crash-in-resumed-node"
    _, out = run_child([db_url, "orders", "run", eid, json.dumps(ORDER)], **files)
    code, _ = run_child(
        [db_url, "orders", "resume", eid, "approve"], fault="chain.before_commit", **files
    )
    assert code == -signal.SIGKILL
    _, out = run_child([db_url, "orders", "resume", eid], **files)
    assert out is not None and out["status"] == "completed"
    assert _final(store, eid)[1].state_snapshot["log"] == EXPECTED_LOG
    assert read_lines(files["TETHER_TEST_LEDGER"]) == ["charge A-1 500"]


def test_crash_before_run_end_only_writes_the_run_end(store, db_url, files):
    eid = "crash-before-end"
    small = {"order_id": "B-1", "amount": 20}
    code, _ = run_child(
        [db_url, "orders", "run", eid, json.dumps(small)], fault="run.before_end", **files
    )
    assert code == -signal.SIGKILL
    assert store.get_run(eid).status == "running"
    _, out = run_child([db_url, "orders", "resume", eid], **files)
    assert out is not None and out["status"] == "completed"
    assert Counter(read_lines(files["TETHER_TEST_STEPS"])) == {
        "validate": 1,
        "charge": 1,
        "notify": 1,
    }
    assert [c.node_id for c in store.list(eid)][-1] == "run_end"
