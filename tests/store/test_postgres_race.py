"""32 processes race to resume one paused run, 50 times over, on Postgres: exactly one wins
each time and the rest get ``AlreadyResumed`` (docs/design.md §5)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time

import pytest

import tether
from tests.store.pg_race_worker import LEDGER_ENV, approval_chain, worker
from tests.support.results import run_of
from tether.store.postgres import PostgresCheckpointer

pytestmark = pytest.mark.postgres

WORKERS = 32
REPETITIONS = 50


def test_32_processes_racing_to_resume_one_paused_run_have_exactly_one_winner(
    pg_schema, monkeypatch, tmp_path
):
    from tests.conftest import PG_DSN

    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    url = f"{PG_DSN}?schema={pg_schema}"
    store = tether.connect(url)
    assert isinstance(store, PostgresCheckpointer)
    chain = approval_chain(store)
    loop = asyncio.new_event_loop()

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.store.pg_race_worker"])
    barrier = ctx.Barrier(WORKERS)
    jobs = [ctx.Queue() for _ in range(WORKERS)]
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=worker, args=(i, url, str(ledger), barrier, jobs[i], results), daemon=True
        )
        for i in range(WORKERS)
    ]
    started = time.monotonic()
    for p in procs:
        p.start()
    try:
        ready = [results.get(timeout=60) for _ in range(WORKERS)]
        assert sorted(i for i, what in ready if what == "ready") == list(range(WORKERS)), ready
        spawn_seconds = time.monotonic() - started

        winners: list[int] = []
        for rep in range(REPETITIONS):
            paused = loop.run_until_complete(chain.arun({"order": f"order-{rep}"}))
            assert paused.status == "paused"
            eid = paused.execution_id
            for q in jobs:
                q.put(eid)
            got = [results.get(timeout=60) for _ in range(WORKERS)]
            outcomes = sorted(outcome for _, outcome in got)
            assert outcomes == ["AlreadyResumed"] * (WORKERS - 1) + ["completed"], (rep, outcomes)
            (winner,) = [i for i, outcome in got if outcome == "completed"]
            winners.append(winner)

            assert run_of(store, eid).status == "completed"
            assert store.get_pending_interrupt(eid) is None
            rows = store.list(eid)
            assert [cp.node_id for cp in rows] == [
                "prepare",
                "approve",
                "approve",
                "ship",
                "run_end",
            ]
            assert rows[-1].state_snapshot["by"] == f"worker-{winner}"
        race_seconds = time.monotonic() - started - spawn_seconds
    finally:
        for q in jobs:
            q.put(None)
        for p in procs:
            p.join(timeout=15)
            if p.is_alive():
                p.kill()
        loop.run_until_complete(store.aclose())
        loop.close()
        store.close()

    shipped = ledger.read_text().splitlines()
    assert sorted(shipped) == sorted(f"ship order-{rep}" for rep in range(REPETITIONS))
    assert len(set(winners)) > 1  # the race is real: different processes won
    print(
        f"\n{WORKERS} workers x {REPETITIONS} races: start {spawn_seconds:.1f} s, "
        f"races {race_seconds:.1f} s, {len(set(winners))} distinct winners"
    )
