"""The queue's producer side: :func:`enqueue` records a run for a worker to start
(docs/design.md §10; ``docs/workers.md``); :func:`lease_store` opens the store a worker or an
enqueue needs (one with run leases and the queue)."""

from __future__ import annotations

from typing import Any, Final

from . import _app_version
from .engine.lease import id_to_create
from .engine.sync import run_sync
from .errors import ConfigurationError
from .store import LeaseStore
from .store.base import Checkpointer

__all__ = ["PRIORITY_MAX", "PRIORITY_MIN", "aenqueue", "enqueue", "lease_store"]

#: The range of ``enqueue(priority=)``: Postgres stores it as a 32-bit INTEGER.
PRIORITY_MIN: Final = -(2**31)
PRIORITY_MAX: Final = 2**31 - 1


def lease_store(url_or_store: str | Checkpointer) -> LeaseStore:
    """``url_or_store`` opened (a URL, through :func:`tether.connect`) and checked to hold
    run leases and the queue.

    Raises:
        ConfigurationError: the store has no leases (neither SQLite nor Postgres).
    """
    if isinstance(url_or_store, str):
        from .connect import connect

        store = connect(url_or_store)
    else:
        store = url_or_store
    if not isinstance(store, LeaseStore):
        raise ConfigurationError(
            f"{store!r} does not support run leases; workers need a SQLiteCheckpointer or "
            "PostgresCheckpointer"
        )
    return store


async def aenqueue(
    store_or_url: str | Checkpointer,
    runner_name: str,
    input: Any,
    *,
    execution_id: str | None = None,
    priority: int = 0,
    app_version: str | None = None,
) -> str:
    """Async twin of :func:`enqueue`."""
    if not isinstance(runner_name, str) or not runner_name:
        raise ConfigurationError(f"runner_name must be a non-empty str, got {runner_name!r}")
    version = (
        _app_version.check_version(app_version, "app_version")
        if app_version is not None
        else _app_version.from_env()
    )
    eid = id_to_create(execution_id, "execution_id")
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):  # the column is a 32-bit INTEGER on Postgres (SQLite would take more: the same rule)
        raise ConfigurationError(
            f"priority must be an int from {PRIORITY_MIN} to {PRIORITY_MAX}, got {priority!r}"
        )
    store = lease_store(store_or_url)
    await store.aenqueue_run(eid, runner_name, input, priority=priority, app_version=version)
    return eid


def enqueue(
    store_or_url: str | Checkpointer,
    runner_name: str,
    input: Any,
    *,
    execution_id: str | None = None,
    priority: int = 0,
    app_version: str | None = None,
) -> str:
    """Record a run for a worker to start (status ``queued``).

    Workers start queued runs in priority order (higher first, then oldest). Enqueueing an
    ``execution_id`` that exists changes nothing and returns that id, so a retried enqueue
    starts one run.

    Args:
        store_or_url: the store, or its URL.
        runner_name: the name of the runner to start (as registered in the workers' registry).
        input: the run's input, exactly as ``runner.arun(input)`` would take it (JSON-able).
        execution_id: the run's id (default: a random one).
        priority: higher starts first; an int from -2**31 to 2**31 - 1.
        app_version: the version of the code the run is meant for, so that only workers
            serving it start the run (default: ``TETHER_APP_VERSION``; without either, the
            first worker to claim it records its own). docs/design.md §13.

    Returns:
        The run's execution_id.

    Raises:
        ConfigurationError: no runner name, an execution_id that is not a non-empty str, a
            priority that is not an int in the 32-bit range, or a store without the queue.
        SerializationError: the input cannot be stored as JSON (nothing written).
    """
    return run_sync(
        aenqueue(
            store_or_url,
            runner_name,
            input,
            execution_id=execution_id,
            priority=priority,
            app_version=app_version,
        )
    )
