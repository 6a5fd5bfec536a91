"""Checkpoint stores: the protocol and the backends (Postgres imports lazily).

Besides :class:`Checkpointer`, the capabilities a backend may add, each a small protocol:
:class:`LeaseStore` (workers' leases), :class:`ControlStore` (cancel, delete, repair and
approval deadlines), :class:`Listings` (keyset pages of runs and pending approvals) and
:class:`ReadableStore` (a damaged run read as far as its rows decode). The keywords of the
lease capability's methods are typed dicts (:class:`LeasePutOptions`,
:class:`InterruptOptions`, :class:`Renewal`), as the protocol's are in :mod:`.base`.
"""

from ._control import ControlStore
from ._leases import (
    UNRECORDED_LEASE_SECONDS,
    ClaimedRun,
    InterruptOptions,
    LeasePutOptions,
    LeaseStore,
    Renewal,
)
from ._listing import PENDING_SORTS, Listings, PendingQuery, ReadableStore, RunsQuery
from .base import Checkpointer, PendingInterrupt, PruneResult, RunRecord
from .sqlite import SQLiteCheckpointer

__all__ = [
    "PENDING_SORTS",
    "UNRECORDED_LEASE_SECONDS",
    "Checkpointer",
    "ClaimedRun",
    "ControlStore",
    "InterruptOptions",
    "LeasePutOptions",
    "LeaseStore",
    "Listings",
    "PendingInterrupt",
    "PendingQuery",
    "PruneResult",
    "ReadableStore",
    "Renewal",
    "RunRecord",
    "RunsQuery",
    "SQLiteCheckpointer",
]
