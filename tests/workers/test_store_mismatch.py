"""A worker whose runner writes to another database than the worker's stops with
``StoreMismatchError`` and gives the run back as it was, instead of losing every claim to
itself until the run is dead-lettered (``docs/workers.md``, "Running workers")."""

from __future__ import annotations

import time
from typing import Any

import pytest

import tether
from tether import Chain, Registry, SQLiteCheckpointer, StoreMismatchError


def _step(state: dict[str, Any]) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


def _registry(store: Any) -> Registry:
    return Registry(Chain("counter", store).add_node("a", _step).add_node("b", _step))


def _worker(registry: Registry, store: Any, seconds: float) -> tether.WorkerStats:
    deadline = time.monotonic() + seconds
    return tether.run_worker(
        registry,
        store,
        lease_seconds=5,
        poll_interval_seconds=0.05,
        max_attempts=2,
        stop=lambda: time.monotonic() > deadline,
    )


def test_a_runner_on_another_database_stops_the_worker_and_leaves_the_run_as_it_was(
    store_and_url: tuple[Any, str], tmp_path: Any
) -> None:
    store, url = store_and_url
    getattr(store, "setup", lambda: None)()
    tether.enqueue(store, "counter", {"n": 0}, execution_id="q-1")
    other = SQLiteCheckpointer(tmp_path / "other.db")
    try:
        with pytest.raises(StoreMismatchError) as raised:
            _worker(_registry(other), store, 20)
        message = str(raised.value)
        assert "'counter'" in message and "other.db" in message, message
        assert other.list_runs() == []  # nothing written to the runner's database
    finally:
        other.close()
    run = store.get_run("q-1")
    assert (run.status, run.owner) == ("queued", None), run
    # Not counted as attempts: the worker with the right database starts it as any run, and
    # a second worker's mistake does not dead-letter it either.
    other = SQLiteCheckpointer(tmp_path / "other.db")
    try:
        with pytest.raises(StoreMismatchError):
            _worker(_registry(other), store, 20)
    finally:
        other.close()
    # A second checkpointer object on the worker's own database is the same database.
    same = tether.connect(url)
    try:
        stats = _worker(_registry(same), store, 3)
    finally:
        same.close()
    assert stats.finished == 1 and stats.dead_lettered == 0, stats
    done = store.get_run("q-1")
    assert done.status == "completed", done
    assert store.get_last("q-1").state_snapshot == {"n": 2}
