"""Cancel: a queued run never starts, a paused run's question is withdrawn, a running run stops
at its next step boundary wherever it runs (docs/design.md, "Cancel and delete"). Both
backends; the running cases drive the run in a ``tether worker`` subprocess."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import tether
from tests.hostile.conftest import raw_sql
from tests.support.proc import ROOT, child_env
from tests.support.results import question_of
from tests.support.waiting import wait_for
from tests.workers.procs import spawn_worker, stop_all
from tether import Chain, Resume, interrupt

APP = "tests.control.app:app"
LEASE_SECONDS = 1.5


def _ledger(store: Any) -> dict[str, int]:
    """``{"<kind>:<node>": calls}`` of the run database's ledger (``started`` rows and
    ``@idempotent`` effects; see tests/control/app.py)."""
    store.setup()  # the schema the table goes in
    sql = raw_sql(store)
    sql(
        "CREATE TABLE IF NOT EXISTS {t}ledger (key text PRIMARY KEY, execution_id text, "
        "node text, calls integer NOT NULL DEFAULT 1)"
    )
    out: dict[str, int] = {}
    for key, node, calls in sql("SELECT key, node, calls FROM {t}ledger"):
        kind = "started" if key.startswith("started:") else "effect"
        out[f"{kind}:{node}"] = out.get(f"{kind}:{node}", 0) + calls
    return out


def _approval_chain(store: Any) -> Chain:
    chain = Chain("approval", store)
    chain.add_node("prepare", lambda state: {"prepared": True})
    chain.add_node("ask", lambda state: {"approved": interrupt("approve", {"n": 1}).approved})
    return chain


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(),
        timeout=60,
    )


def test_a_cancelled_paused_run_leaves_the_inbox_and_a_late_answer_is_refused(store, db_url):
    chain = _approval_chain(store)
    paused = chain.run({})
    eid, question = paused.execution_id, question_of(paused)["checkpoint_id"]

    done = _cli("cancel", eid, "--reason", "duplicate request", "--by", "alice", "--db", db_url)
    assert done.returncode == 0, done.stderr
    assert "question withdrawn" in done.stdout

    assert store.get_pending_interrupt(eid) is None
    assert [p.execution_id for p in store.list_pending_interrupts()] == []
    run = store.get_run(eid)
    assert run.status == "cancelled" and run.owner is None and run.finished_at is not None
    assert run.error == "Cancelled by alice: duplicate request"
    end = store.list(eid)[-1]
    assert (end.step_type, end.status, end.label) == ("run_end", "cancelled", "run cancelled")
    assert end.node_output["cancelled_by"] == "alice"
    assert end.node_output["reason"] == "duplicate request"
    assert end.node_output["status_before"] == "paused"
    assert end.state_snapshot == {"prepared": True}
    [entry] = store.list_audit(eid)
    assert (entry.action, entry.via, entry.actor, entry.note) == (
        "cancelled",
        "cli",
        "alice",
        "duplicate request",
    )
    assert entry.checkpoint_id == question and entry.data == {"status_before": "paused"}

    # A late answer from the CLI (stored for a worker) and from code (resumed here).
    late = _cli("approve", eid, "--checkpoint", question, "--db", db_url)
    assert late.returncode == 2, late.stdout + late.stderr
    assert "RunCancelledError" in late.stderr and "alice" in late.stderr
    with pytest.raises(tether.RunCancelledError) as refused:
        chain.resume(eid, Resume(approved=True, checkpoint_id=question))
    assert refused.value.cancelled_by == "alice"
    assert refused.value.reason == "duplicate request"
    with pytest.raises(tether.RunCancelledError):
        chain.resume(eid)
    assert store.get_run(eid).status == "cancelled"

    # Forkable: a branch from its question carries on as a new run.
    branch = chain.fork(eid, resume_value=Resume(approved=True))
    assert branch.status == "completed" and branch.output["approved"] is True


def test_cancelling_again_or_a_completed_run_changes_nothing(store):
    chain = Chain("two", store)
    chain.add_node("a", lambda state: {"a": 1})
    finished = chain.run({})
    rows = len(store.list(finished.execution_id))
    result = tether.cancel(finished.execution_id, store=store)
    assert (result.cancelled, result.status) == (False, "completed")
    assert len(store.list(finished.execution_id)) == rows

    paused = _approval_chain(store).run({})
    first = tether.cancel(paused.execution_id, reason="first", by="bob", store=store)
    again = tether.cancel(paused.execution_id, reason="second", store=store)
    assert first.cancelled and not again.cancelled
    assert (again.status, again.cancelled_by, again.reason) == ("cancelled", "bob", "first")
    with pytest.raises(tether.RunNotFoundError):
        tether.cancel("no-such-run", store=store)


def test_a_cancelled_queued_run_is_never_started_by_a_worker(store_and_url, tmp_path):
    store, url = store_and_url
    _ledger(store)  # creates the table the steps write to
    kept = tether.enqueue(store, "steps", {"eid": "kept"}, execution_id="kept")
    gone = tether.enqueue(store, "steps", {"eid": "gone"}, execution_id="gone")
    assert tether.cancel(gone, reason="not needed", store=store).status_before == "queued"
    worker = spawn_worker(
        url,
        tmp_path,
        "w",
        lease_seconds=LEASE_SECONDS,
        app=APP,
        env={"TETHER_TEST_STEP_SECONDS": "0"},
    )
    try:
        wait_for(lambda: store.get_run(kept).finished_at, "the other run to finish", 30)
    finally:
        stop_all([worker])
    assert store.get_run(kept).status == "completed", store.get_run(kept).error
    assert store.get_run(gone).status == "cancelled"
    assert [cp.label for cp in store.list(gone)] == ["run cancelled"]
    # Only the kept run's steps ran, each once.
    nodes = ("n1", "n2", "n3", "n4")
    assert _ledger(store) == {f"{k}:{n}": 1 for k in ("started", "effect") for n in nodes}


@pytest.mark.parametrize("runner", ["steps", "steps_async"])
def test_a_run_in_a_worker_process_stops_at_the_next_step_boundary_with_effects_once(
    store_and_url, tmp_path, runner
):
    store, url = store_and_url
    _ledger(store)  # creates the table the steps write to
    eid = tether.enqueue(store, runner, {"eid": "r"}, execution_id="r")
    worker = spawn_worker(
        url,
        tmp_path,
        "w",
        lease_seconds=LEASE_SECONDS,
        app=APP,
        # A synchronous n2 is stopped only by its refused commit, so the cancel below must land
        # within n2's step: 3 s leaves room for a loaded 2-core machine (1 s did not always).
        env={"TETHER_TEST_STEP_SECONDS": "3.0"},
    )
    try:
        wait_for(lambda: "started:n2" in _ledger(store), "step n2 to start", 30)
        cancelled_at = time.monotonic()
        result = tether.cancel(eid, reason="stop it", by="ops", store=store)
        assert result.cancelled and result.status_before == "running" and result.stopping
        # The worker's drive notices (its heartbeat, a third of the lease; or the refused
        # commit at the end of the step) and lets go of the run.
        log = tmp_path / "w.log"
        wait_for(lambda: "cancelled" in log.read_text(), "the worker to log the cancel", 15)
        stopped_after = time.monotonic() - cancelled_at
        time.sleep(1.5)  # long enough for n3 to start, had the drive gone on
    finally:
        stop_all([worker])
    print(f"{runner}: the worker let go {stopped_after:.2f} s after the cancel")
    ledger = _ledger(store)
    assert "started:n3" not in ledger and "effect:n3" not in ledger
    assert ledger["effect:n1"] == 1 and ledger.get("effect:n2", 0) <= 1
    assert ledger["started:n2"] == 1
    run = store.get_run(eid)
    assert run.status == "cancelled" and run.owner is None
    labels = [cp.label for cp in store.list(eid)]
    # n2's commit, if it came after the cancel, was refused: n2 is not in the timeline.
    assert labels == ["node completed", "run cancelled"], labels
    assert store.list(eid)[-1].node_output["status_before"] == "running"
    if runner == "steps_async":  # cancelled at its await, not after its 3 s sleep
        assert stopped_after < LEASE_SECONDS
    same = Chain(runner, store)
    for node in ("n1", "n2", "n3", "n4"):
        same.add_node(node, lambda state: {})
    with pytest.raises(tether.RunCancelledError):
        same.resume(eid)


def test_an_async_run_in_this_process_is_cancelled_from_another_thread(store):
    started = threading.Event()

    async def slow(state: dict[str, Any]) -> dict[str, Any]:
        import asyncio

        started.set()
        await asyncio.sleep(30)
        return {"slow": True}

    chain = Chain("inproc", store)
    chain.add_node("first", lambda state: {"first": True})
    chain.add_node("slow", slow)
    chain.add_node("never", lambda state: {"never": True})
    box: dict[str, Any] = {}

    def drive() -> None:
        try:
            box["result"] = chain.run({}, execution_id="inproc-1")
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=drive)
    began = time.monotonic()
    thread.start()
    assert started.wait(10)
    tether.cancel("inproc-1", reason="too slow", store=store)
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - began < 10
    assert isinstance(box.get("error"), tether.RunCancelledError), box
    assert box["error"].reason == "too slow"
    assert [cp.label for cp in store.list("inproc-1")] == ["node completed", "run cancelled"]
    assert store.get_run("inproc-1").status == "cancelled"
