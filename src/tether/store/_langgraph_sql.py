"""Tables and statements of the LangGraph checkpoint saver (schema version 5), both backends.

:class:`tether.integrations.langgraph.TetherSaver` keeps LangGraph checkpoints in the store
that holds tether's runs: the same SQLite file or Postgres schema, created and migrated by the
store's own forward-only migrations. The saver's statements are written once, in Postgres's
dialect (``%s`` placeholders, tables named ``{schema}.<table>``); :func:`for_sqlite` turns one
into SQLite's (``?``, bare table names). Storage knows nothing of LangGraph: rows hold bytes.

``langgraph_checkpoints`` holds one row per checkpoint. ``seq`` orders a thread's rows within a
namespace in the order they were written (unique with the thread and namespace, as a run's
``seq`` is); ``state`` is a full snapshot or a delta against the row before it (``state_kind``,
``base_seq``: the full row its chain of deltas starts at), encoded as tether encodes run state
(``store/_codec.py``). ``langgraph_writes`` holds the pending writes of each checkpoint.
"""

from __future__ import annotations

from typing import Final

_CHECKPOINTS: Final = """CREATE TABLE {schema}.langgraph_checkpoints (
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    seq bigint NOT NULL,
    base_seq bigint NOT NULL,
    parent_checkpoint_id text,
    state_kind text NOT NULL,
    state {blob} NOT NULL,
    metadata {blob} NOT NULL,
    run_id text,
    created_at {time} NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
)"""
_WRITES: Final = """CREATE TABLE {schema}.langgraph_writes (
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    task_id text NOT NULL,
    idx integer NOT NULL,
    channel text NOT NULL,
    type text NOT NULL,
    value {blob},
    task_path text NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
)"""
_INDEXES: Final = (
    "CREATE UNIQUE INDEX langgraph_checkpoints_seq_idx "
    "ON {schema}.langgraph_checkpoints (thread_id, checkpoint_ns, seq)",
    # delete_for_runs: most rows carry a run id; the lookup is rare, the index small.
    "CREATE INDEX langgraph_checkpoints_run_idx ON {schema}.langgraph_checkpoints (run_id)",
)


def _migration(blob: str, time: str) -> tuple[str, ...]:
    return (
        _CHECKPOINTS.replace("{blob}", blob).replace("{time}", time),
        _WRITES.replace("{blob}", blob),
        *_INDEXES,
    )


def for_sqlite(statement: str) -> str:
    """A statement of this module in SQLite's dialect."""
    return statement.replace("{schema}.", "").replace("%s", "?")


POSTGRES_MIGRATION_V5: Final = _migration("bytea", "timestamptz")
SQLITE_MIGRATION_V5: Final = tuple(for_sqlite(s) for s in _migration("BLOB", "REAL"))

_CP_COLUMNS: Final = (
    "checkpoint_id, seq, base_seq, parent_checkpoint_id, state_kind, state, metadata"
)
_THREAD: Final = "thread_id = %s AND checkpoint_ns = %s"

INSERT_FULL: Final = (
    "INSERT INTO {schema}.langgraph_checkpoints (thread_id, checkpoint_ns, checkpoint_id, seq, "
    "base_seq, parent_checkpoint_id, state_kind, state, metadata, run_id, created_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
# A delta is stored only while the row it was computed against is still the thread's row at
# seq - 1 with the same chain start: another process's prune or delete in between makes the
# insert store nothing, and the writer reads the thread again.
INSERT_DELTA: Final = (
    "INSERT INTO {schema}.langgraph_checkpoints (thread_id, checkpoint_ns, checkpoint_id, seq, "
    "base_seq, parent_checkpoint_id, state_kind, state, metadata, run_id, created_at) "
    "SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM "
    f"{{schema}}.langgraph_checkpoints WHERE {_THREAD} AND seq = %s AND base_seq = %s)"
)
SELECT_NEWEST: Final = (
    f"SELECT {_CP_COLUMNS} FROM {{schema}}.langgraph_checkpoints WHERE {_THREAD} "
    "ORDER BY checkpoint_id DESC LIMIT 1"
)
SELECT_BY_ID: Final = (
    f"SELECT {_CP_COLUMNS} FROM {{schema}}.langgraph_checkpoints WHERE {_THREAD} "
    "AND checkpoint_id = %s"
)
SELECT_LAST_SEQ: Final = (
    f"SELECT {_CP_COLUMNS} FROM {{schema}}.langgraph_checkpoints WHERE {_THREAD} "
    "ORDER BY seq DESC LIMIT 1"
)
SELECT_CHAIN: Final = (
    "SELECT seq, state_kind, state FROM {schema}.langgraph_checkpoints "
    f"WHERE {_THREAD} AND seq >= %s AND seq <= %s ORDER BY seq"
)
SELECT_ALL_OF_NS: Final = (
    f"SELECT {_CP_COLUMNS}, run_id FROM {{schema}}.langgraph_checkpoints WHERE {_THREAD} "
    "ORDER BY seq"
)
# list(): candidates without their state, newest first; states are read per namespace after.
LIST_HEAD: Final = (
    "SELECT thread_id, checkpoint_ns, checkpoint_id, seq, base_seq, parent_checkpoint_id, "
    "metadata FROM {schema}.langgraph_checkpoints WHERE 1 = 1"
)
LIST_BY_THREAD: Final = " AND thread_id = %s"
LIST_BY_NS: Final = " AND checkpoint_ns = %s"
LIST_BY_ID: Final = " AND checkpoint_id = %s"
LIST_BEFORE: Final = " AND checkpoint_id < %s"
LIST_ORDER: Final = " ORDER BY checkpoint_id DESC, thread_id, checkpoint_ns"
SELECT_NAMESPACES: Final = (
    "SELECT DISTINCT checkpoint_ns FROM {schema}.langgraph_checkpoints WHERE thread_id = %s"
)
SELECT_THREADS_OF_RUNS: Final = (
    "SELECT DISTINCT thread_id, checkpoint_ns FROM {schema}.langgraph_checkpoints WHERE run_id = %s"
)
UPDATE_STATE: Final = (
    "UPDATE {schema}.langgraph_checkpoints SET state_kind = %s, state = %s, base_seq = %s "
    f"WHERE {_THREAD} AND seq = %s"
)

# Writes, many rows in one statement. Special channels (error, interrupt, resume, scheduled)
# replace; others keep the first write of a (task, idx).
WRITES_PER_STATEMENT: Final = 500  # 9 parameters a row, under SQLite's 32,766
_WRITE_ROW: Final = "(%s, %s, %s, %s, %s, %s, %s, %s, %s)"


def insert_writes(rows: int, replace: bool) -> str:
    """The statement storing ``rows`` writes (at most :data:`WRITES_PER_STATEMENT`)."""
    return (
        "INSERT INTO {schema}.langgraph_writes (thread_id, checkpoint_ns, checkpoint_id, "
        "task_id, idx, channel, type, value, task_path) VALUES "
        + ", ".join([_WRITE_ROW] * rows)
        + " ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO "
        + (
            "UPDATE SET channel = excluded.channel, type = excluded.type, "
            "value = excluded.value, task_path = excluded.task_path"
            if replace
            else "NOTHING"
        )
    )


SELECT_WRITES: Final = (
    "SELECT checkpoint_id, task_id, channel, type, value, task_path, idx "
    f"FROM {{schema}}.langgraph_writes WHERE {_THREAD} AND checkpoint_id >= %s "
    "AND checkpoint_id <= %s"
)

# Deletions and copies.
DELETE_THREAD_CHECKPOINTS: Final = "DELETE FROM {schema}.langgraph_checkpoints WHERE thread_id = %s"
DELETE_THREAD_WRITES: Final = "DELETE FROM {schema}.langgraph_writes WHERE thread_id = %s"
DELETE_CHECKPOINT: Final = (
    f"DELETE FROM {{schema}}.langgraph_checkpoints WHERE {_THREAD} AND checkpoint_id = %s"
)
SELECT_THREAD_EXISTS: Final = (
    "SELECT 1 FROM {schema}.langgraph_checkpoints WHERE thread_id = %s LIMIT 1"
)
DELETE_CHECKPOINT_WRITES: Final = (
    f"DELETE FROM {{schema}}.langgraph_writes WHERE {_THREAD} AND checkpoint_id = %s"
)
DELETE_NS_EXCEPT: Final = (
    f"DELETE FROM {{schema}}.langgraph_checkpoints WHERE {_THREAD} AND checkpoint_id <> %s"
)
DELETE_NS_WRITES_EXCEPT: Final = (
    f"DELETE FROM {{schema}}.langgraph_writes WHERE {_THREAD} AND checkpoint_id <> %s"
)
COPY_CHECKPOINTS: Final = (
    "INSERT INTO {schema}.langgraph_checkpoints (thread_id, checkpoint_ns, checkpoint_id, seq, "
    "base_seq, parent_checkpoint_id, state_kind, state, metadata, run_id, created_at) "
    "SELECT %s, checkpoint_ns, checkpoint_id, seq, base_seq, parent_checkpoint_id, state_kind, "
    "state, metadata, run_id, created_at FROM {schema}.langgraph_checkpoints "
    "WHERE thread_id = %s"
)
COPY_WRITES: Final = (
    "INSERT INTO {schema}.langgraph_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "idx, channel, type, value, task_path) SELECT %s, checkpoint_ns, checkpoint_id, task_id, "
    "idx, channel, type, value, task_path FROM {schema}.langgraph_writes WHERE thread_id = %s"
)

# tether prune: a finished LangGraph run (runner kind ``langgraph``, execution_id = thread_id)
# takes its thread with it. Run before the run rows go (the kind is read from them).
_PRUNED_LANGGRAPH: Final = (
    "SELECT execution_id FROM {schema}.runs WHERE execution_id = ANY(%s) "
    "AND runner_kind = 'langgraph'"
)
POSTGRES_PRUNE_THREADS: Final = (
    f"DELETE FROM {{schema}}.langgraph_writes WHERE thread_id IN ({_PRUNED_LANGGRAPH})",
    f"DELETE FROM {{schema}}.langgraph_checkpoints WHERE thread_id IN ({_PRUNED_LANGGRAPH})",
)
SQLITE_PRUNE_THREAD: Final = tuple(
    for_sqlite(s.replace("= ANY(%s)", "= %s")) for s in POSTGRES_PRUNE_THREADS
)
