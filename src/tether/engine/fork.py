"""What every runner's fork does before it branches (docs/design.md §9).

Each executor's ``fork`` is wrapped in :func:`leased_fork`: it holds the lease of the branch
to be (the source run is only read), then reads the answer for the branch, the source run
(checked to be this runner's) and the row to branch from, and hands them to the executor as
one :class:`ForkPoint`. The executor checks what its kind of runner needs (a state update,
the code's steps), then creates the branch with :meth:`ForkPoint.create_branch` and writes
its first row.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from . import lease, rows

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint
    from ..interrupt import Resume
    from ..store.base import Checkpointer, RunRecord

__all__ = ["ForkPoint", "leased_fork"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """Where a fork branches from, read once for every kind of runner.

    Attributes:
        store: the runner's store (source and branch share it).
        execution_id: the source run.
        value: the answer the branch gives the source row's question, or ``None``.
        run: the source run's record.
        src: the row the branch starts from (:func:`tether.engine.rows.fork_source_row`).
        new_execution_id: the branch's id, whose lease the fork holds.
    """

    store: Checkpointer
    execution_id: str
    value: Resume | None
    run: RunRecord
    src: Checkpoint
    new_execution_id: str

    async def create_branch(self, runner: Any) -> str:
        """Create the branch's run, linked to the source row; returns its id."""
        return await lease.acreate_branch_run(
            self.store, runner, self.run, self.src.checkpoint_id, self.new_execution_id
        )


def leased_fork(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Wrap an executor's ``fork(runner, point, *args)`` as ``fork(runner, execution_id,
    checkpoint_id, resume_value, *args, new_execution_id=None)``.

    The wrapper holds the lease of the new run (``new_execution_id``; ``None``: a fresh id)
    and records the runner's version on it, reads the :class:`ForkPoint` inside that hold, and
    calls ``fn(runner, point, *args)``.

    Raises:
        ConfigurationError: ``new_execution_id`` is neither ``None`` nor a non-empty str.
        ChainResumeError: ``resume_value`` is not a ``Resume``, or it names another row.
        RunNotFoundError, RunnerMismatchError, CheckpointNotFoundError: from reading the
            source (nothing written).
    """

    @functools.wraps(fn)
    async def fork(
        runner: Any,
        execution_id: str,
        checkpoint_id: str | None,
        resume_value: Any,
        *args: Any,
        new_execution_id: str | None = None,
    ) -> T:
        eid = lease.id_to_create(new_execution_id, "new_execution_id")
        store = runner.checkpointer
        with lease.recording_version(runner):
            async with lease.hold(
                store, eid, new_run=True, lease_seconds=lease.lease_seconds_of(runner)
            ):
                value, run, src = await rows.fork_point(
                    store, execution_id, runner.name, checkpoint_id, resume_value
                )
                point = ForkPoint(store, execution_id, value, run, src, eid)
                return await fn(runner, point, *args)

    return fork
