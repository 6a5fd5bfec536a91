"""The statements of the LangGraph saver's tables, for :mod:`tether.integrations.langgraph`.

The store owns these tables (its migrations create them and ``prune``/``delete`` remove a
finished run's thread); the saver runs these statements on them. They are written once in
Postgres's dialect; :func:`for_sqlite` turns one into SQLite's. Defined in the store's
``_langgraph_sql`` module; this module is their public name.
"""

from __future__ import annotations

from ._langgraph_sql import (
    COPY_CHECKPOINTS,
    COPY_WRITES,
    DELETE_CHECKPOINT,
    DELETE_CHECKPOINT_WRITES,
    DELETE_NS_EXCEPT,
    DELETE_NS_WRITES_EXCEPT,
    DELETE_THREAD_CHECKPOINTS,
    DELETE_THREAD_WRITES,
    INSERT_DELTA,
    INSERT_FULL,
    LIST_BEFORE,
    LIST_BY_ID,
    LIST_BY_NS,
    LIST_BY_THREAD,
    LIST_HEAD,
    LIST_ORDER,
    SELECT_ALL_OF_NS,
    SELECT_BY_ID,
    SELECT_CHAIN,
    SELECT_LAST_SEQ,
    SELECT_NAMESPACES,
    SELECT_NEWEST,
    SELECT_THREAD_EXISTS,
    SELECT_THREADS_OF_RUNS,
    SELECT_WRITES,
    UPDATE_STATE,
    WRITES_PER_STATEMENT,
    for_sqlite,
    insert_writes,
)

__all__ = [
    "COPY_CHECKPOINTS",
    "COPY_WRITES",
    "DELETE_CHECKPOINT",
    "DELETE_CHECKPOINT_WRITES",
    "DELETE_NS_EXCEPT",
    "DELETE_NS_WRITES_EXCEPT",
    "DELETE_THREAD_CHECKPOINTS",
    "DELETE_THREAD_WRITES",
    "INSERT_DELTA",
    "INSERT_FULL",
    "LIST_BEFORE",
    "LIST_BY_ID",
    "LIST_BY_NS",
    "LIST_BY_THREAD",
    "LIST_HEAD",
    "LIST_ORDER",
    "SELECT_ALL_OF_NS",
    "SELECT_BY_ID",
    "SELECT_CHAIN",
    "SELECT_LAST_SEQ",
    "SELECT_NAMESPACES",
    "SELECT_NEWEST",
    "SELECT_THREADS_OF_RUNS",
    "SELECT_THREAD_EXISTS",
    "SELECT_WRITES",
    "UPDATE_STATE",
    "WRITES_PER_STATEMENT",
    "for_sqlite",
    "insert_writes",
]
