"""The errors a store raises when another writer came first, written once for every backend.

Each says what happened and what the caller should do; the backends raise them from the same
places (a duplicate run id, a step another writer appended, a claim or a lease taken over, a
schema written by a newer tether), so a message changes in one place.
"""

from __future__ import annotations

from ..checkpoint import Checkpoint
from ..errors import ConcurrentWriteError, ConfigurationError, LeaseLost, SchemaVersionError

__all__ = ["claim_taken_over", "lease_lost", "run_exists", "schema_too_new", "step_taken"]


def run_exists(execution_id: str) -> ConfigurationError:
    """A run was created with an id another run has."""
    return ConfigurationError(
        f"a run with execution_id {execution_id!r} already exists; resume or fork it instead",
        execution_id=execution_id,
    )


def step_taken(cp: Checkpoint) -> ConcurrentWriteError:
    """Another writer appended the row with this seq first (a stale writer head)."""
    return ConcurrentWriteError(
        f"another writer appended step {cp.seq} of run {cp.execution_id!r} first",
        execution_id=cp.execution_id,
        node_id=cp.node_id,
    )


def claim_taken_over(execution_id: str) -> ConcurrentWriteError:
    """The claim a commit releases is no longer the committer's."""
    return ConcurrentWriteError(
        f"the claim on run {execution_id!r}'s interrupt was taken over by another "
        "resumer; this process must stop",
        execution_id=execution_id,
    )


def lease_lost(owner: str | None, cp: Checkpoint) -> LeaseLost:
    """A fenced commit found the run's lease held by another owner: nothing was written."""
    return LeaseLost(
        f"this process ({owner}) lost the lease on run {cp.execution_id!r}: another "
        f"worker took it over, so step {cp.node_id!r} was not committed",
        owner=owner,
        execution_id=cp.execution_id,
        node_id=cp.node_id,
    )


def schema_too_new(where: str, found: int, supported: int) -> SchemaVersionError:
    """The database records a schema version newer than this tether's.

    Args:
        where: what holds it, as the message names it (``'tether.db'``, ``schema 'tether' on
            postgresql://...``).
    """
    return SchemaVersionError(
        f"{where} holds tether schema version {found}, newer than the {supported} this tether "
        "supports; upgrade tether to open it",
        found=found,
        supported=supported,
    )
