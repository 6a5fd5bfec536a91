"""Deprecated name of :mod:`tether.worker_process` (the worker process: ``run_worker``,
``enqueue``), renamed so it no longer shares a name with :class:`tether.Worker`, a
supervisor's worker agent. Importing it warns once; it will be removed in a later release."""

from __future__ import annotations

import warnings

from .worker_process import WorkerStats, aenqueue, arun_worker, enqueue, run_worker

__all__ = ["WorkerStats", "aenqueue", "arun_worker", "enqueue", "run_worker"]

warnings.warn(
    "tether.worker is renamed tether.worker_process (tether.Worker is a supervisor's worker "
    "agent); import run_worker, enqueue and WorkerStats from tether or tether.worker_process",
    DeprecationWarning,
    stacklevel=2,
)
