"""``python -m benchmarks.workers``: many workers on one Postgres database.

Two numbers (``docs/workers.md``):

- **throughput**: runs per second of the 5-node chain of ``tests.workers.app`` (each node
  records one ``@idempotent`` effect in a ledger table, no sleep), with 1, 2 and 4 ``tether
  worker`` processes
  (``--concurrency 4`` each), from enqueueing a batch to its last run completing;
- **failover**: the time from SIGKILLing the worker that holds a run to another worker
  claiming it, and to that worker's first commit of the run, for two lease periods. It should
  be about one lease period (the lease lapses a period after its last renewal, which happened
  up to a third of a period before the kill; then up to one poll interval).

``TETHER_BENCH_QUICK=1`` runs a smaller batch. Needs Postgres at ``TETHER_BENCH_PG_DSN``.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

import tether
from tests.support.results import run_of
from tests.workers.app import LEDGER_DDL
from tests.workers.procs import spawn_worker, stop_all, wait_until

from .backends import PG_DSN

QUICK = os.environ.get("TETHER_BENCH_QUICK") == "1"
BATCH = 100 if QUICK else 400
REPS = 1 if QUICK else 3


def _schema() -> tuple[str, str]:
    schema = f"bench_w_{uuid.uuid4().hex[:8]}"
    url = f"{PG_DSN}?schema={schema}"
    tether.connect(url).setup()
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(LEDGER_DDL.format(schema=f'"{schema}"'))
    return schema, url


def _drop(schema: str) -> None:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def throughput(workers: int, logs: Path) -> float:
    """Runs per second with ``workers`` worker processes (already started and warm)."""
    schema, url = _schema()
    store = tether.connect(url)
    env = {"TETHER_TEST_STEP_SECONDS": "0"}  # measure the engine, not sleeping nodes
    procs = [
        spawn_worker(url, logs, f"t{workers}-{i}", lease_seconds=10, env=env)
        for i in range(workers)
    ]
    try:
        tether.enqueue(store, "five", {"eid": "warm"}, execution_id="warm")
        assert wait_until(lambda: run_of(store, "warm").status == "completed", 60)
        time.sleep(0.5)  # every worker has imported and connected
        ids = [f"r{i}" for i in range(BATCH)]
        started = time.perf_counter()
        for eid in ids:
            tether.enqueue(store, "five", {"eid": eid}, execution_id=eid)

        def done() -> bool:
            return len(store.list_runs(status="completed", limit=BATCH + 10)) == BATCH + 1

        assert wait_until(done, 300, every=0.02)
        return BATCH / (time.perf_counter() - started)
    finally:
        stop_all(procs)
        store.close()
        _drop(schema)


def failover(lease_seconds: float, logs: Path) -> tuple[float, float]:
    """Seconds from killing a run's worker to (another worker claiming it, its next commit)."""
    schema, url = _schema()
    store = tether.connect(url)
    env = {"TETHER_TEST_SLOW_SECONDS": "0.2"}
    procs = [
        spawn_worker(url, logs, f"f{i}", lease_seconds=lease_seconds, concurrency=1, env=env)
        for i in range(2)
    ]
    try:
        tether.enqueue(store, "slow", {}, execution_id="victim")
        assert wait_until(lambda: len(store.list("victim")) >= 1, 60, every=0.005)
        owner = run_of(store, "victim").owner
        assert owner is not None
        pid = int(owner.split(":")[1])
        os.kill(pid, signal.SIGKILL)
        killed = time.perf_counter()
        committed_before = len(store.list("victim"))
        assert wait_until(
            lambda: (run_of(store, "victim").owner or owner) != owner, 60, every=0.005
        )
        claimed = time.perf_counter() - killed
        assert wait_until(lambda: len(store.list("victim")) > committed_before, 60, every=0.005)
        return claimed, time.perf_counter() - killed
    finally:
        stop_all(procs)
        store.close()
        _drop(schema)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        print(f"## Workers on Postgres ({BATCH} runs of a 5-node chain per batch)\n")
        print(f"| workers | runs / s (median of {REPS}) |")
        print("|---|---|")
        for n in (1, 2, 4):
            rates = [throughput(n, logs) for _ in range(REPS)]
            print(f"| {n} | {statistics.median(rates):.0f} |")
        print("\n## Failover: a worker SIGKILLed mid-run\n")
        print("| lease | to claim by another worker | to its next commit |")
        print("|---|---|---|")
        for lease in (1.0, 3.0):
            got = [failover(lease, logs) for _ in range(REPS)]
            claim = statistics.median(g[0] for g in got)
            commit = statistics.median(g[1] for g in got)
            print(f"| {lease:g} s | {claim:.2f} s | {commit:.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
