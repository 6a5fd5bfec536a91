"""Many ``tether worker`` processes on one Postgres database, killed, frozen and racing
(``docs/workers.md``; docs/design.md §10)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import psycopg
import pytest

import tether
from tests.conftest import PG_DSN
from tests.support.proc import ROOT, child_env, run_together
from tests.support.results import run_of
from tests.workers.app import LEDGER_DDL, NODES
from tests.workers.procs import spawn_worker, stop_all, wait_until

pytestmark = pytest.mark.postgres

FULL = os.environ.get("TETHER_FULL_MATRIX") == "1"
CHAOS_RUNS = 500 if FULL else 200


def _open(pg_schema: str) -> tuple[str, tether.PostgresCheckpointer]:
    url = f"{PG_DSN}?schema={pg_schema}"
    store = tether.connect(url)
    assert isinstance(store, tether.PostgresCheckpointer)
    store.setup()
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(LEDGER_DDL.format(schema=f'"{pg_schema}"'))
    return url, store


def _ledger(pg_schema: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        return conn.execute(
            f'SELECT execution_id, node, calls FROM "{pg_schema}".ledger'
        ).fetchall()


def test_workers_killed_at_random_leave_every_run_completed_with_each_effect_once(
    pg_schema, tmp_path
):
    url, store = _open(pg_schema)
    ids = [f"run-{i:03d}" for i in range(CHAOS_RUNS)]
    for eid in ids:
        tether.enqueue(store, "five", {"eid": eid}, execution_id=eid)
    rng = random.Random(7)
    env = {"TETHER_TEST_STEP_SECONDS": "0.05"}  # a run takes ~0.3 s: kills land mid-run
    procs = [spawn_worker(url, tmp_path, f"w{i}", env=env) for i in range(4)]
    every = [*procs]
    kills = 0
    started = time.monotonic()

    def done() -> int:
        return sum(r.status == "completed" for r in store.list_runs(limit=1000))

    try:
        while time.monotonic() - started < 60 and done() < len(ids):
            time.sleep(rng.uniform(0.5, 1.0))
            i = rng.randrange(len(procs))
            procs[i].kill()
            procs[i].wait(10)
            kills += 1
            procs[i] = spawn_worker(url, tmp_path, f"w{i}", env=env)
            every.append(procs[i])
        chaos_seconds = time.monotonic() - started
        assert wait_until(lambda: done() == len(ids), 60, every=0.2), done()
    finally:
        stop_all(every)
    total_seconds = time.monotonic() - started

    runs = {r.execution_id: r for r in store.list_runs(limit=1000)}
    assert {eid: runs[eid].status for eid in ids} == {eid: "completed" for eid in ids}
    assert store.list_pending_interrupts() == []
    taken_over = 0
    for eid in ids:
        rows = store.list(eid)
        # Each step committed exactly once, by the one owner recorded in it.
        assert [cp.node_id for cp in rows] == [*NODES, "run_end"], eid
        final = rows[-1].state_snapshot
        owners = {final[f"{n}_owner"] for n in NODES}
        assert "none" not in owners
        taken_over += len(owners) > 1
    ledger = _ledger(pg_schema)
    assert sorted((e, n) for e, n, _ in ledger) == sorted((e, n) for e in ids for n in NODES)
    reexecuted = sum(calls for _, _, calls in ledger) - len(ledger)
    print(
        f"\n{len(ids)} runs, {kills} kills in {chaos_seconds:.1f}s of chaos, all done after "
        f"{total_seconds:.1f}s; {taken_over} runs changed owner mid-run; {reexecuted} effect "
        "bodies re-ran after a crash between the effect and its cache commit (absorbed by the "
        "idempotency key)"
    )
    assert kills >= 3 and taken_over >= 1


def test_a_frozen_worker_cannot_commit_after_its_run_was_taken_over(pg_schema, tmp_path):
    url, store = _open(pg_schema)
    tether.enqueue(store, "slow", {}, execution_id="frozen")
    env = {"TETHER_TEST_SLOW_SECONDS": "1.5"}
    a = spawn_worker(url, tmp_path, "a", concurrency=1, env=env)
    procs = [a]
    try:
        assert wait_until(lambda: len(store.list("frozen")) >= 1, 30)
        a.send_signal(signal.SIGSTOP)  # frozen inside s2, holding the lease
        owner_a = run_of(store, "frozen").owner
        assert owner_a is not None
        b = spawn_worker(url, tmp_path, "b", concurrency=1, env=env)
        procs.append(b)
        assert wait_until(lambda: run_of(store, "frozen").status == "completed", 40)
        a.send_signal(signal.SIGCONT)
        log_a = tmp_path / "a.log"
        assert wait_until(lambda: "lease lost" in log_a.read_text(), 20), log_a.read_text()
        time.sleep(0.5)
    finally:
        stop_all(procs)
    rows = store.list("frozen")
    assert [cp.node_id for cp in rows] == ["s1", "s2", "s3", "run_end"]
    state = rows[-1].state_snapshot
    assert state["0"] == owner_a
    assert state["1"] == state["2"] != owner_a  # s2 and s3 committed by the worker that took over


ENQUEUE_SCRIPT = """
import sys, time, tether
start = float(sys.argv[2])
store = tether.connect(sys.argv[1])
store.setup()
while time.time() < start:
    time.sleep(0.001)
eid = tether.enqueue(store, "five", {}, execution_id="once", priority=int(sys.argv[3]))
print(eid)
"""


@pytest.mark.parametrize("backend_kind", ["postgres", "sqlite"])
def test_ten_processes_enqueueing_one_execution_id_start_one_run(backend_kind, pg_schema, tmp_path):
    store: tether.Checkpointer
    if backend_kind == "postgres":
        url, store = _open(pg_schema)
    else:
        url = f"sqlite:///{tmp_path / 'q.db'}"
        store = tether.connect(url)
    start = time.time() + 2.0
    done = run_together(
        [["-c", ENQUEUE_SCRIPT, url, str(start), str(i)] for i in range(10)], timeout=60
    )
    assert all(code == 0 for code, _, _ in done), [err for _, _, err in done]
    assert {out.strip() for _, out, _ in done} == {"once"}
    runs = store.list_runs(limit=100)
    assert [(r.execution_id, r.status) for r in runs] == [("once", "queued")]


def test_a_run_that_keeps_killing_its_workers_is_dead_lettered_and_listed(pg_schema, tmp_path):
    url, store = _open(pg_schema)
    tether.enqueue(store, "crashy", {}, execution_id="poison")
    tether.enqueue(store, "five", {"eid": "healthy"}, execution_id="healthy")
    procs: list[subprocess.Popen[bytes]] = []

    def respawn() -> bool:
        if not procs or procs[-1].poll() is not None:
            procs.append(
                spawn_worker(url, tmp_path, "w", lease_seconds=0.5, concurrency=1, max_attempts=3)
            )
        return run_of(store, "poison").status == "failed"

    try:
        assert wait_until(respawn, 60, every=0.1)
        assert wait_until(lambda: run_of(store, "healthy").status == "completed", 30)
    finally:
        stop_all(procs)
    run = run_of(store, "poison")
    assert run.error is not None and run.error.startswith("DeadLetter:")
    listed = subprocess.run(
        [sys.executable, "-m", "tether.cli", "runs", "list", "--db", url, "--json"],
        env=child_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert "DeadLetter" in listed.stdout and "poison" in listed.stdout


def test_an_approval_given_from_anywhere_is_continued_by_a_worker_once(pg_schema, tmp_path):
    url, store = _open(pg_schema)
    tether.enqueue(store, "approval", {"amount": 5}, execution_id="appr")
    procs = [spawn_worker(url, tmp_path, f"w{i}") for i in range(2)]
    try:
        assert wait_until(lambda: run_of(store, "appr").status == "paused", 30)
        answered = subprocess.run(
            [sys.executable, "-m", "tether.cli", "approve", "appr", "--db", url],
            env=child_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert answered.returncode == 0, answered.stderr
        assert wait_until(lambda: run_of(store, "appr").status == "completed", 30)
    finally:
        stop_all(procs)
    rows = store.list("appr")
    assert [cp.node_id for cp in rows] == ["ask", "ask", "done", "run_end"]
    assert rows[-1].state_snapshot["approved"] is True
    assert store.get_pending_interrupt("appr") is None


def test_enqueue_from_the_command_line_prints_the_id(pg_schema):
    url, store = _open(pg_schema)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "enqueue",
            "five",
            '{"eid": "x"}',
            "--id",
            "cli-1",
            "--db",
            url,
        ],
        env=child_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "cli-1"
    assert run_of(store, "cli-1").status == "queued"
