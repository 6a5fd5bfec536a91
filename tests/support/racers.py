"""Long-lived racer processes: each repetition, every racer resumes the same paused run at
the same moment (a barrier), and reports what it got."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import tether
from tests.support.chains import orders_chain


def racer(url: str, barrier: Any, jobs: Any, results: Any) -> None:
    store = tether.connect(url)
    chain = orders_chain(store)
    while True:
        eid = jobs.get()
        outcome: str
        if eid is None:
            break
        barrier.wait()
        try:
            outcome = chain.resume(eid, tether.Resume(approved=True)).status
        except tether.AlreadyResumed:
            outcome = "AlreadyResumed"
        except BaseException as exc:  # report anything else as a failure of the race
            outcome = f"{type(exc).__name__}: {exc}"
        results.put(outcome)
    store.close()


def race(url: str, n_racers: int, execution_ids: list[str]) -> list[list[str]]:
    """Race ``n_racers`` processes on each run in turn; returns the outcomes per run."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n_racers)
    jobs = [ctx.Queue() for _ in range(n_racers)]
    results = ctx.Queue()
    procs = [
        ctx.Process(target=racer, args=(url, barrier, jobs[i], results), daemon=True)
        for i in range(n_racers)
    ]
    for p in procs:
        p.start()
    out = []
    try:
        for eid in execution_ids:
            for q in jobs:
                q.put(eid)
            out.append(sorted(results.get(timeout=60) for _ in range(n_racers)))
    finally:
        for q in jobs:
            q.put(None)
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return out
