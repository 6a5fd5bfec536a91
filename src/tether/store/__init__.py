"""Checkpoint stores: the protocol and the backends (Postgres imports lazily)."""

from .base import Checkpointer, PendingInterrupt, PruneResult, RunRecord
from .sqlite import SQLiteCheckpointer

__all__ = ["Checkpointer", "PendingInterrupt", "PruneResult", "RunRecord", "SQLiteCheckpointer"]
