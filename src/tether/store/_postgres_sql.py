"""The Postgres checkpointer's SQL: its schema migrations and every statement, as named
constants (the same shapes as :mod:`tether.store.sqlite`'s, with ``%s`` placeholders).

Every statement names its tables as ``{schema}.<table>``; :class:`PostgresCheckpointer
<tether.store.postgres.PostgresCheckpointer>` fills in the schema, quoted with
``psycopg.sql.Identifier``, once per statement and checkpointer.
"""

from __future__ import annotations

from typing import Final

from . import _codec
from ._langgraph_sql import POSTGRES_MIGRATION_V5
from ._postgres_leases import INSERT_CHECKPOINT_FENCED, MIGRATION_V2

SCHEMA_VERSION: Final = 5

MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        """CREATE TABLE {schema}.runs (
            execution_id text PRIMARY KEY,
            runner_name text NOT NULL,
            runner_kind text NOT NULL,
            status text NOT NULL,
            input bytea,
            parent_execution_id text,
            parent_checkpoint_id text,
            owner text,
            lease_expires_at timestamptz,
            error text,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            finished_at timestamptz
        )""",
        "CREATE INDEX runs_status_idx ON {schema}.runs (status, updated_at)",
        "CREATE INDEX runs_name_idx ON {schema}.runs (runner_name, created_at)",
        """CREATE TABLE {schema}.checkpoints (
            checkpoint_id text PRIMARY KEY,
            execution_id text NOT NULL,
            seq bigint NOT NULL,
            node_id text NOT NULL,
            node_index integer NOT NULL,
            step_type text NOT NULL,
            status text NOT NULL,
            state_kind text NOT NULL,
            state bytea NOT NULL,
            base_seq bigint NOT NULL,
            node_input bytea,
            node_output bytea,
            iteration_counters bytea,
            interrupt_reason text,
            interrupt_context bytea,
            agent_path text,
            parent_checkpoint_id text,
            next_node_id text,
            created_at timestamptz NOT NULL
        )""",
        "CREATE UNIQUE INDEX checkpoints_run_seq_idx ON {schema}.checkpoints (execution_id, seq)",
        """CREATE TABLE {schema}.pending_interrupts (
            execution_id text PRIMARY KEY,
            checkpoint_id text NOT NULL,
            node_id text NOT NULL,
            agent_path text,
            reason text NOT NULL,
            context bytea,
            created_at timestamptz NOT NULL,
            claimed_by text,
            claim_expires_at timestamptz,
            resume_value bytea
        )""",
        """CREATE TABLE {schema}.idempotency_cache (
            execution_id text NOT NULL,
            key text NOT NULL,
            value bytea,
            created_at timestamptz NOT NULL,
            PRIMARY KEY (execution_id, key)
        )""",
    ),
    # v2: run leases for workers, the start queue's priority, claim attempts (dead letters).
    2: MIGRATION_V2,
    # v3: checkpoint_id is no longer the primary key: its index cost every step an insert at
    # a random place of a third B-tree; a checkpoint is found by id within its run.
    3: ("ALTER TABLE {schema}.checkpoints DROP CONSTRAINT checkpoints_pkey",),
    # v4: a state payload may be a Zstandard frame (_codec.compress_state); the version is
    # recorded so that an older tether refuses these rows instead of misreading them. And
    # runs_status_idx goes: runs_queue_idx leads with status too and serves the same lookups,
    # while (status, updated_at) changed on every lease take, heartbeat and status write.
    4: ("DROP INDEX IF EXISTS {schema}.runs_status_idx",),
    # v5: the tables of the LangGraph checkpoint saver (tether.integrations.langgraph).
    5: POSTGRES_MIGRATION_V5,
}

# The unique keys whose violation means another writer came first, as PostgreSQL names them.
RUN_KEY: Final = "runs_pkey"
STEP_KEY: Final = "checkpoints_run_seq_idx"

LOCK_MIGRATIONS: Final = "SELECT pg_advisory_xact_lock(%s)"
SELECT_SCHEMA_EXISTS: Final = "SELECT 1 FROM pg_namespace WHERE nspname = %s"
CREATE_SCHEMA: Final = "CREATE SCHEMA {schema}"
CREATE_SCHEMA_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS {schema}.tether_schema "
    "(version integer NOT NULL, applied_at timestamptz NOT NULL)"
)
SELECT_SCHEMA_VERSION: Final = "SELECT MAX(version) FROM {schema}.tether_schema"
INSERT_SCHEMA_VERSION: Final = (
    "INSERT INTO {schema}.tether_schema (version, applied_at) VALUES (%s, now())"
)

# An owned run is created leased: its expiry is the owner's lease period (NULL: unowned) from
# the creating commit (see _leases).
INSERT_RUN: Final = (
    f"INSERT INTO {{schema}}.runs ({_codec.RUN_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now() + %s::float8 * interval '1 second', NULL, "
    "now(), now(), NULL) RETURNING created_at, lease_expires_at"
)
SELECT_RUN: Final = f"SELECT {_codec.RUN_COLUMNS} FROM {{schema}}.runs WHERE execution_id = %s"
_SELECT_RUNS: Final = f"SELECT {_codec.RUN_COLUMNS} FROM {{schema}}.runs"
_RUNS_ORDER: Final = " ORDER BY created_at DESC, execution_id LIMIT %s"
SELECT_RUNS: Final = _SELECT_RUNS + _RUNS_ORDER
SELECT_RUNS_BY_STATUS: Final = f"{_SELECT_RUNS} WHERE status = %s{_RUNS_ORDER}"
SELECT_RUNS_BY_NAME: Final = f"{_SELECT_RUNS} WHERE runner_name = %s{_RUNS_ORDER}"
SELECT_RUNS_BY_STATUS_NAME: Final = (
    f"{_SELECT_RUNS} WHERE status = %s AND runner_name = %s{_RUNS_ORDER}"
)
# Parameters: status, error, status.
_SET_STATUS: Final = (
    "status = %s, error = %s, updated_at = now(), "
    "finished_at = CASE WHEN %s::text IN ('completed', 'failed') THEN now() ELSE NULL END"
)
UPDATE_RUN_STATUS: Final = f"UPDATE {{schema}}.runs SET {_SET_STATUS} WHERE execution_id = %s"
# The run lease given back with the status (the commit that ends a drive) when the owner
# parameter (three times) names the holder; NULL leaves the lease as it is.
_GIVE_BACK: Final = (
    "owner = CASE WHEN owner = %s::text THEN NULL ELSE owner END, "
    "lease_expires_at = CASE WHEN owner = %s::text THEN NULL ELSE lease_expires_at END, "
    "attempts = CASE WHEN owner = %s::text THEN 0 ELSE attempts END"
)
UPDATE_RUN_STATUS_GIVE_BACK: Final = (
    f"UPDATE {{schema}}.runs SET {_SET_STATUS}, {_GIVE_BACK} WHERE execution_id = %s"
)
INSERT_CHECKPOINT: Final = (
    f"INSERT INTO {{schema}}.checkpoints ({_codec.CHECKPOINT_COLUMNS}) "
    f"VALUES ({', '.join(['%s'] * 18)}, now()) RETURNING created_at"
)


def _and_set_status(insert: str) -> str:
    # The step's checkpoint and its run's new status in one statement, so a step commits in
    # one round trip. The run row changes only if the checkpoint went in: a fenced insert that
    # finds the lease gone inserts nothing, and the update's one-time filter on ``cp`` runs
    # the insert (and its share lock on the run row) before the update reads that row.
    return (
        f"WITH cp AS ({insert}), "
        f"run AS (UPDATE {{schema}}.runs SET {_SET_STATUS}, {_GIVE_BACK} "
        "WHERE execution_id = %s AND EXISTS (SELECT 1 FROM cp)) "
        "SELECT created_at FROM cp"
    )


INSERT_CHECKPOINT_SET_STATUS: Final = _and_set_status(INSERT_CHECKPOINT)
INSERT_CHECKPOINT_FENCED_SET_STATUS: Final = _and_set_status(INSERT_CHECKPOINT_FENCED)
_SELECT_CP: Final = f"SELECT {_codec.CHECKPOINT_COLUMNS} FROM {{schema}}.checkpoints"
_PATH_FILTER: Final = " AND (agent_path = %s OR starts_with(agent_path, %s))"
SELECT_LAST: Final = f"{_SELECT_CP} WHERE execution_id = %s ORDER BY seq DESC LIMIT 1"
SELECT_LAST_BEFORE: Final = (
    f"{_SELECT_CP} WHERE execution_id = %s AND seq < %s ORDER BY seq DESC LIMIT 1"
)
SELECT_LAST_PATH: Final = (
    f"{_SELECT_CP} WHERE execution_id = %s AND seq < %s{_PATH_FILTER} ORDER BY seq DESC LIMIT 1"
)
# What resume reads, in one statement: the rows from the full snapshot under the run's two
# newest rows up to the newest (the newest two, and the state chain they are replayed from).
# When both are run-end markers: the newest row before them that is not one, then the state
# chain from under it.
SELECT_RESUME_WINDOW: Final = (
    "WITH top AS (SELECT seq, base_seq FROM {schema}.checkpoints WHERE execution_id = %s "
    "ORDER BY seq DESC LIMIT 2) "
    f"{_SELECT_CP} WHERE execution_id = %s AND seq >= (SELECT min(base_seq) FROM top) "
    "AND seq <= (SELECT max(seq) FROM top) ORDER BY seq"
)
SELECT_RESUMABLE_BEFORE: Final = (
    f"{_SELECT_CP} WHERE execution_id = %s AND seq < %s AND step_type <> 'run_end' "
    "ORDER BY seq DESC LIMIT 1"
)
SELECT_BY_ID: Final = f"{_SELECT_CP} WHERE execution_id = %s AND checkpoint_id = %s"
SELECT_ALL: Final = f"{_SELECT_CP} WHERE execution_id = %s ORDER BY seq"
SELECT_STATE_CHAIN: Final = (
    "SELECT seq, state_kind, state FROM {schema}.checkpoints "
    "WHERE execution_id = %s AND seq >= %s AND seq <= %s ORDER BY seq"
)
INSERT_PENDING: Final = (
    f"INSERT INTO {{schema}}.pending_interrupts ({_codec.PENDING_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, now(), NULL, NULL, NULL) RETURNING created_at"
)
DELETE_PENDING_OF: Final = (
    "DELETE FROM {schema}.pending_interrupts WHERE execution_id = %s AND claimed_by = %s"
)
DELETE_PENDING: Final = "DELETE FROM {schema}.pending_interrupts WHERE execution_id = %s"
SELECT_PENDING: Final = (
    f"SELECT {_codec.PENDING_COLUMNS} FROM {{schema}}.pending_interrupts WHERE execution_id = %s"
)
SELECT_PENDING_ALL: Final = (
    f"SELECT {_codec.PENDING_COLUMNS} FROM {{schema}}.pending_interrupts "
    "ORDER BY created_at, execution_id LIMIT %s"
)
# The claim: one statement (SQLite's CLAIM_PENDING, same WHERE). A concurrent claimer blocked
# on the row lock re-evaluates the WHERE on the winner's version of the row and matches
# nothing, so exactly one caller gets the row back. The run turns "running" in the same
# statement.
CLAIM_PENDING: Final = (
    "WITH claimed AS ("
    "UPDATE {schema}.pending_interrupts SET claimed_by = %(owner)s, "
    "claim_expires_at = now() + %(lease)s * interval '1 second', "
    "resume_value = COALESCE(resume_value, %(value)s::bytea) "
    "WHERE execution_id = %(eid)s "
    "AND (claimed_by IS NULL OR claim_expires_at < now() OR claimed_by = %(steal)s::text) "
    "AND ((%(value)s::bytea IS NOT NULL AND resume_value IS NULL AND claimed_by IS NULL) "
    "     OR (%(value)s::bytea IS NULL AND resume_value IS NOT NULL)) "
    "AND (%(cid)s::text IS NULL OR checkpoint_id = %(cid)s::text) "
    f"RETURNING {_codec.PENDING_COLUMNS}), "
    "running AS (UPDATE {schema}.runs SET status = 'running', error = NULL, "
    "updated_at = now(), finished_at = NULL "
    "WHERE execution_id IN (SELECT execution_id FROM claimed)) "
    f"SELECT {_codec.PENDING_COLUMNS} FROM claimed"
)
RENEW_CLAIM: Final = (
    "UPDATE {schema}.pending_interrupts "
    "SET claim_expires_at = now() + %s * interval '1 second' "
    "WHERE execution_id = %s AND claimed_by = %s"
)
RELEASE_CLAIM: Final = (
    "WITH released AS ("
    "UPDATE {schema}.pending_interrupts SET claimed_by = NULL, claim_expires_at = NULL "
    "WHERE execution_id = %s AND claimed_by = %s RETURNING execution_id), "
    "paused AS (UPDATE {schema}.runs SET status = 'paused', error = NULL, "
    "updated_at = now(), finished_at = NULL "
    "WHERE execution_id IN (SELECT execution_id FROM released)) "
    "SELECT count(*) FROM released"
)
ANSWER_PENDING: Final = (
    "UPDATE {schema}.pending_interrupts SET resume_value = %s "
    "WHERE execution_id = %s AND resume_value IS NULL AND claimed_by IS NULL "
    "AND (%s::text IS NULL OR checkpoint_id = %s::text)"
)
SELECT_IDEMPOTENT: Final = (
    "SELECT value FROM {schema}.idempotency_cache WHERE execution_id = %s AND key = %s"
)
INSERT_IDEMPOTENT: Final = (
    "INSERT INTO {schema}.idempotency_cache (execution_id, key, value, created_at) "
    "VALUES (%s, %s, %s, now()) ON CONFLICT (execution_id, key) DO NOTHING"
)
SELECT_IDEMPOTENT_ALL: Final = (
    "SELECT key, value FROM {schema}.idempotency_cache WHERE execution_id = %s "
    "ORDER BY created_at, key"
)
SELECT_PRUNABLE: Final = (
    "SELECT execution_id FROM {schema}.runs "
    "WHERE status IN ('completed', 'failed') AND finished_at < %s ORDER BY finished_at"
)
# Locking the runs re-checks their status: a failed run resumed meanwhile is no longer pruned.
LOCK_PRUNABLE: Final = SELECT_PRUNABLE + " FOR UPDATE"
COUNT_CHECKPOINTS_OF: Final = (
    "SELECT count(*) FROM {schema}.checkpoints WHERE execution_id = ANY(%s)"
)
COUNT_IDEMPOTENT_OF: Final = (
    "SELECT count(*) FROM {schema}.idempotency_cache WHERE execution_id = ANY(%s)"
)
DELETE_CHECKPOINTS_OF: Final = "DELETE FROM {schema}.checkpoints WHERE execution_id = ANY(%s)"
DELETE_IDEMPOTENT_OF: Final = "DELETE FROM {schema}.idempotency_cache WHERE execution_id = ANY(%s)"
DELETE_PENDING_OF_RUNS: Final = (
    "DELETE FROM {schema}.pending_interrupts WHERE execution_id = ANY(%s)"
)
DELETE_RUNS: Final = "DELETE FROM {schema}.runs WHERE execution_id = ANY(%s)"
