"""Every lease carries its owner's expiry from the commit that takes it, and no reader puts its
own lease length in its place (``docs/workers.md``, "Leases and heartbeats")."""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import tether
from tests.conftest import PG_DSN
from tests.support.proc import ROOT, child_env
from tests.support.waiting import wait_for
from tests.workers.procs import spawn_worker, stop_all
from tether import Chain, ConfigurationError

RUN_SLOW_IN_PROCESS = """
import json, sys
from tests.workers.app import slow
result = slow.run({}, execution_id=sys.argv[1])
print(json.dumps({"status": result.status, "state": result.state}))
"""


def _blocking_chain(store: Any, name: str, gate: threading.Event) -> Chain:
    chain = Chain(name, store)
    chain.lease_seconds = 60
    chain.add_node("first", lambda state: {"first": True})

    def wait(state: dict[str, Any]) -> dict[str, Any]:
        assert gate.wait(30), "the test never opened the gate"
        return {"waited": True}

    chain.add_node("wait", wait)
    chain.add_edge("first", "wait")
    return chain


def _leased_for_seconds(run: tether.RunRecord) -> float:
    """How long after its creation the run's lease expires."""
    assert run.owner is not None and run.lease_expires_at is not None, run
    assert run.created_at is not None
    return (run.lease_expires_at - run.created_at).total_seconds()


def test_a_worker_with_a_shorter_lease_leaves_a_run_started_in_process_to_its_process(
    store_and_url, tmp_path
):
    store, url = store_and_url
    getattr(store, "setup", lambda: None)()
    env = {"TETHER_TEST_SLOW_SECONDS": "1.5"}
    # The in-process run keeps the default 30 s lease, renewed first 10 s in; the worker's own
    # lease is 0.5 s, so before the fix it counted the new run's missing expiry as lapsed.
    worker = spawn_worker(url, tmp_path, "w", lease_seconds=0.5, env=env)
    try:
        wait_for(lambda: "started" in (tmp_path / "w.log").read_text(), "the worker", 60)
        child = subprocess.run(
            [sys.executable, "-c", RUN_SLOW_IN_PROCESS, "in-process"],
            env=child_env(TETHER_DATABASE_URL=url, **env),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    finally:
        stop_all([worker])
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout.splitlines()[-1])
    assert out["status"] == "completed"
    # All three steps ran in the run's own process, each once.
    assert out["state"]["0"] == out["state"]["1"] == out["state"]["2"] != "none"
    assert [cp.node_id for cp in store.list("in-process")] == ["s1", "s2", "s3", "run_end"]
    assert "worker stopped: 0 claimed" in (tmp_path / "w.log").read_text()


@pytest.mark.parametrize("verb", ["run", "fork"])
def test_a_new_run_is_leased_with_its_owners_expiry_by_the_commit_that_creates_it(store, verb):
    gate = threading.Event()
    chain = _blocking_chain(store, "blocking", gate)
    if verb == "fork":
        gate.set()
        assert chain.run({}, execution_id="source").status == "completed"
        gate.clear()
        first = store.list("source")[0].checkpoint_id
        start: Any = lambda: chain.fork("source", first, new_execution_id="new")  # noqa: E731
    else:
        start = lambda: chain.run({}, execution_id="new")  # noqa: E731
    thread = threading.Thread(target=start)
    thread.start()
    try:
        run = wait_for(lambda: store.get_run("new"), "the new run")
        # Long before its first heartbeat (a third of 60 s), the row holds a 60 s lease.
        assert 59 <= _leased_for_seconds(run) <= 60
    finally:
        gate.set()
        thread.join(30)
    assert store.get_run("new").status == "completed"


def test_a_run_created_with_an_owner_and_no_lease_period_is_refused(store):
    with pytest.raises(ConfigurationError, match="lease_seconds"):
        store.create_run(tether.RunRecord("owned", "three", "chain", owner="hostA:1:a"))
    assert store.get_run("owned") is None
    store.create_run(
        tether.RunRecord("owned", "three", "chain", owner="hostA:1:a"), lease_seconds=45
    )
    assert 44 <= _leased_for_seconds(store.get_run("owned")) <= 45


def test_a_takers_short_lease_does_not_lapse_the_owners_longer_one(store):
    store.create_run(
        tether.RunRecord("held", "three", "chain", owner="hostA:1:a"), lease_seconds=30
    )
    time.sleep(0.05)
    took = store.acquire_run_lease("held", owner="hostB:2:b", lease_seconds=0.01, steal_from=None)
    assert not took.won and took.previous_owner == "hostA:1:a"
    assert store.claim_runs(owner="hostB:2:b", limit=5, lease_seconds=0.01, max_attempts=5) == []
    assert store.get_run("held").owner == "hostA:1:a"


def _age_owner_without_expiry(store: Any, execution_id: str, seconds: float) -> None:
    """Leave the run as a tether before run leases had expiries wrote it: owned, no expiry,
    last updated ``seconds`` ago."""
    when = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    if isinstance(store, tether.SQLiteCheckpointer):
        with store._write() as conn:
            conn.execute(
                "UPDATE runs SET lease_expires_at = NULL, updated_at = ? WHERE execution_id = ?",
                (when.timestamp(), execution_id),
            )
        return
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{store.schema}".runs SET lease_expires_at = NULL, updated_at = %s '
            "WHERE execution_id = %s",
            (when, execution_id),
        )


def test_an_owned_run_with_no_recorded_expiry_counts_as_leased_for_30_seconds_to_every_reader(
    store,
):
    store.create_run(tether.RunRecord("legacy", "three", "chain", owner="old:1:a"), lease_seconds=1)
    _age_owner_without_expiry(store, "legacy", 10)
    # Not the reader's own (short) lease: 30 s after the last update, for everyone.
    assert store.claim_runs(owner="w:1:x", limit=5, lease_seconds=0.01, max_attempts=5) == []
    took = store.acquire_run_lease("legacy", owner="w:1:x", lease_seconds=0.01, steal_from=None)
    assert not took.won
    _age_owner_without_expiry(store, "legacy", 31)
    (claimed,) = store.claim_runs(owner="w:1:x", limit=5, lease_seconds=30, max_attempts=5)
    assert claimed.execution_id == "legacy" and claimed.previous_owner == "old:1:a"
