"""Workers through a PostgreSQL crash and restart, on a throwaway cluster (never the shared
server): every run completes soon after the server is back, every step commits once, every
``@idempotent`` effect lands once (``docs/workers.md``, "When a drive raises")."""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import psycopg
import pytest

import tether
from tests.conftest import PG_DSN
from tests.support.waiting import wait_for
from tests.workers.app import LEDGER_DDL, NODES
from tests.workers.procs import spawn_worker, stop_all
from tether.errors import StoreError

pytestmark = pytest.mark.postgres

RUNS = 48
WORKERS = 4
CONCURRENCY = 12  # every run in flight at once; the steps are async, so they overlap
LEASE_SECONDS = 5.0
STEP_SECONDS = 0.3  # a run's five steps take 1.5 s: the crash lands mid-run for each
DOWN_SECONDS = 2.0


def _quiet(read: Any) -> Any:
    """``read()``, or ``None`` while the server is away."""
    try:
        return read()
    except StoreError:
        return None


def test_a_postgres_restart_under_four_workers_leaves_every_run_completed_once(
    pg_cluster, pg_schema, tmp_path
):
    schema = pg_schema  # a fresh name; the runs live on the throwaway cluster
    url = f"{pg_cluster.dsn}?schema={schema}"
    store = tether.connect(url)
    store.setup()
    # The "provider" (the ledger) is another system: it stays up while tether's server restarts.
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
        conn.execute(LEDGER_DDL.format(schema=f'"{pg_schema}"'))
    ids = [f"run-{i:03d}" for i in range(RUNS)]
    for eid in ids:
        tether.enqueue(store, "five_async", {"eid": eid}, execution_id=eid)
    env = {
        "TETHER_TEST_STEP_SECONDS": str(STEP_SECONDS),
        "TETHER_TEST_LEDGER_URL": f"{PG_DSN}?schema={pg_schema}",
    }
    procs = [
        spawn_worker(
            url, tmp_path, f"w{i}", lease_seconds=LEASE_SECONDS, concurrency=CONCURRENCY, env=env
        )
        for i in range(WORKERS)
    ]
    try:

        def steps() -> int:
            return sum(len(store.list(eid)) for eid in ids)

        # Every run claimed, most with a step or two committed and none finished: the crash
        # hits runs in every stage.
        wait_for(lambda: steps() >= RUNS, "a step per run on average", 120)
        pg_cluster.crash()
        crashed_at = time.monotonic()
        time.sleep(DOWN_SECONDS)
        pg_cluster.start()
        back = time.monotonic()

        def completed() -> int:
            runs = _quiet(lambda: store.list_runs(status="completed", limit=1000)) or []
            return len(runs)

        wait_for(lambda: completed() == RUNS, "every run to complete after the restart", 120)
        all_done = time.monotonic() - back
        # The workers give each lease back after the run's last commit.
        wait_for(
            lambda: all(r.owner is None for r in store.list_runs(limit=1000)),
            "every lease given back",
            30,
        )
    finally:
        stop_all(procs)
    logs = {i: (tmp_path / f"w{i}.log").read_text() for i in range(WORKERS)}
    raised = _drives_raised(logs.values())

    runs = {r.execution_id: r for r in store.list_runs(limit=1000)}
    assert {eid: runs[eid].status for eid in ids} == {eid: "completed" for eid in ids}
    retried_after: list[float] = []
    for eid in ids:
        rows = store.list(eid)
        # Each step committed exactly once, whoever committed it.
        assert [cp.node_id for cp in rows] == [*NODES, "run_end"], eid
        stamps = [cp.created_at for cp in rows if cp.created_at is not None]
        assert len(stamps) == len(rows), eid  # every stored row has its commit time
        later = [at for at in stamps if eid in raised and at > raised[eid]]
        if later:
            retried_after.append((min(later) - raised[eid]).total_seconds())
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        ledger = conn.execute(
            f'SELECT execution_id, node, calls FROM "{pg_schema}".ledger'
        ).fetchall()
    # One effect per (run, step) at the provider: a body re-run after the crash (between its
    # effect and its cache commit) reused its idempotency key.
    assert sorted((e, n) for e, n, _ in ledger) == sorted((e, n) for e in ids for n in NODES)
    reran = sum(calls for *_, calls in ledger) - len(ledger)
    print(
        f"\n{RUNS} runs, {WORKERS} workers, server down {back - crashed_at:.1f} s; "
        f"{len(raised)} drives raised, each retried (its next step committed) "
        f"{min(retried_after, default=0):.1f}-{max(retried_after, default=0):.1f} s after; "
        f"all runs completed {all_done:.1f} s after the server's return (lease "
        f"{LEASE_SECONDS:g} s); {reran} effect bodies re-ran under their key"
    )
    # A drive that raised is retried once its lease lapses: one period after its last renewal,
    # which was decided before the raise (a renewal held up by the outage still counts from
    # then), plus a claim round and one step. Measured 4.3-5.8 s at a 5 s lease.
    assert max(retried_after, default=0) < 2 * LEASE_SECONDS, retried_after
    # Every run within two lease periods of the server's return (the rest of a run is 1.5 s
    # of steps): the pools reconnect at once, so only the lapsing leases take time. Measured
    # 4.4-5.5 s.
    assert all_done < 2 * LEASE_SECONDS + 5 * STEP_SECONDS, all_done


def _drives_raised(logs: Any) -> dict[str, dt.datetime]:
    """``execution_id -> when its drive raised`` (the last time), from the workers' logs."""
    out: dict[str, dt.datetime] = {}
    for log in logs:
        for m in re.finditer(r"^(\S+ \S+) tether\.worker run (\S+): drive raised", log, re.M):
            when = dt.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").astimezone(dt.UTC)
            out[m[2]] = max(when, out.get(m[2], when))
    return out
