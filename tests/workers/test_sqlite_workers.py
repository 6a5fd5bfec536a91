"""Worker processes on one SQLite file (one machine): killed at random, they still finish every
run exactly once (``docs/workers.md``, "SQLite: one machine")."""

from __future__ import annotations

import random
import sqlite3
import time

import tether
from tests.workers.app import NODES
from tests.workers.procs import spawn_worker, stop_all, wait_until

RUNS = 60


def test_sqlite_workers_killed_at_random_finish_every_run_once(tmp_path):
    path = tmp_path / "w.db"
    url = f"sqlite:///{path}"
    store = tether.connect(url)
    ids = [f"s-{i:02d}" for i in range(RUNS)]
    for eid in ids:
        tether.enqueue(store, "five", {"eid": eid}, execution_id=eid)
    env = {"TETHER_TEST_STEP_SECONDS": "0.05"}
    procs = [spawn_worker(url, tmp_path, f"w{i}", env=env) for i in range(3)]
    every = [*procs]
    rng = random.Random(11)
    kills = 0

    def done() -> int:
        return len(store.list_runs(status="completed", limit=1000))

    started = time.monotonic()
    try:
        while time.monotonic() - started < 30 and done() < RUNS:
            time.sleep(rng.uniform(0.5, 1.0))
            i = rng.randrange(len(procs))
            procs[i].kill()
            procs[i].wait(10)
            kills += 1
            procs[i] = spawn_worker(url, tmp_path, f"w{i}", env=env)
            every.append(procs[i])
        assert wait_until(lambda: done() == RUNS, 60, every=0.2), done()
    finally:
        stop_all(every)
    for eid in ids:
        assert [cp.node_id for cp in store.list(eid)] == [*NODES, "run_end"], eid
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT execution_id, node FROM ledger").fetchall()
    assert sorted(rows) == sorted((e, n) for e in ids for n in NODES)
    assert kills >= 1
