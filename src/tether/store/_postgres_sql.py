"""The Postgres checkpointer's SQL: its schema migrations and every statement, as named
constants with named parameters (``%(execution_id)s``), under the same names as
:mod:`tether.store._sqlite_sql`'s, so that one plan (:mod:`tether.store._operations`) runs on
either. Times are the server's (``now()``); a plan's ``now`` parameter is not read here.

Every statement names its tables as ``{schema}.<table>``; :class:`PostgresCheckpointer
<tether.store.postgres.PostgresCheckpointer>` fills in the schema, quoted with
``psycopg.sql.Identifier``, once per statement and checkpointer.
"""

from __future__ import annotations

from typing import Final

from . import _codec
from ._audit_codec import AUDIT_COLUMNS, AUDIT_INSERT_COLUMNS, AUDIT_PARAM_NAMES
from ._langgraph_sql import POSTGRES_MIGRATION_V5, POSTGRES_PRUNE_THREADS
from ._leases import UNRECORDED_LEASE_SECONDS
from ._listing import RUNS_ORDER_INDEX
from ._records import PENDING
from ._removal_sql import removal_statements
from ._rows import CHAIN_COLUMNS, STEP_FIELDS, named
from ._versions import POSTGRES_MIGRATION_V8

SCHEMA_VERSION: Final = 9

# v2: run leases for workers, the start queue's priority, claim attempts (dead letters).
MIGRATION_V2: Final[tuple[str, ...]] = (
    "ALTER TABLE {schema}.runs ADD COLUMN priority integer NOT NULL DEFAULT 0",
    "ALTER TABLE {schema}.runs ADD COLUMN attempts integer NOT NULL DEFAULT 0",
    "CREATE INDEX runs_queue_idx ON {schema}.runs (status, priority DESC, created_at)",
    "CREATE INDEX runs_owner_idx ON {schema}.runs (owner) WHERE owner IS NOT NULL",
)

# v6: the audit trail.
_MIGRATION_V6: Final[tuple[str, ...]] = (
    """CREATE TABLE {schema}.audit_log (
        entry_id bigserial PRIMARY KEY,
        execution_id text NOT NULL,
        action text NOT NULL,
        via text NOT NULL,
        actor text,
        note text,
        data bytea,
        checkpoint_id text,
        interrupt bytea,
        at timestamptz NOT NULL
    )""",
    "CREATE INDEX audit_log_run_idx ON {schema}.audit_log (execution_id, entry_id)",
    "CREATE INDEX audit_log_at_idx ON {schema}.audit_log (at)",
)

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
    # v6: the audit trail (tether.audit, _audit_operations).
    6: _MIGRATION_V6,
    # v7: the runs listing's keyset order (see _listing).
    7: (RUNS_ORDER_INDEX,),
    # v8: the version of the code that started each run (see _versions).
    8: POSTGRES_MIGRATION_V8,
    # v9: approval deadlines: when a pending question falls due (interrupt(timeout_seconds=)).
    9: (
        "ALTER TABLE {schema}.pending_interrupts ADD COLUMN due_at timestamptz",
        "CREATE INDEX pending_due_idx ON {schema}.pending_interrupts (due_at) "
        "WHERE due_at IS NOT NULL",
    ),
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
SELECT_SCHEMA_TABLE_EXISTS: Final = (
    "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relname = 'tether_schema'"
)
SELECT_SCHEMA_VERSION: Final = "SELECT MAX(version) FROM {schema}.tether_schema"
INSERT_SCHEMA_VERSION: Final = (
    "INSERT INTO {schema}.tether_schema (version, applied_at) VALUES (%s, now())"
)

# An owned run is created leased: its expiry is the owner's lease period (NULL: unowned) from
# the creating commit (see _leases).
INSERT_RUN: Final = (
    f"INSERT INTO {{schema}}.runs ({_codec.RUN_COLUMNS}) VALUES (%(execution_id)s, "
    "%(runner_name)s, %(runner_kind)s, %(status)s, %(input)s, %(parent_execution_id)s, "
    "%(parent_checkpoint_id)s, %(owner)s, "
    "now() + %(lease_seconds)s::float8 * interval '1 second', NULL, now(), now(), NULL, "
    "%(app_version)s) RETURNING created_at, lease_expires_at"
)
SELECT_RUN: Final = (
    f"SELECT {_codec.RUN_COLUMNS} FROM {{schema}}.runs WHERE execution_id = %(execution_id)s"
)
_SET_STATUS: Final = (
    "status = %(run_status)s::text, error = %(error)s::text, updated_at = now(), "
    "finished_at = CASE WHEN %(run_status)s::text IN ('completed', 'failed', 'cancelled') "
    "THEN now() ELSE NULL END"
)
# A cancelled run stays cancelled: no status write of a drive fenced out by the cancel
# (docs/design.md, "Cancel and delete") brings it back.
_NOT_CANCELLED: Final = " AND status <> 'cancelled'"
UPDATE_RUN_STATUS: Final = (
    f"UPDATE {{schema}}.runs SET {_SET_STATUS} WHERE execution_id = %(execution_id)s"
    f"{_NOT_CANCELLED}"
)
# The run lease given back with the status (the commit that ends a drive) when
# release_lease_of names the holder; NULL leaves the lease as it is.
_GIVE_BACK: Final = (
    "owner = CASE WHEN owner = %(release_lease_of)s::text THEN NULL ELSE owner END, "
    "lease_expires_at = CASE WHEN owner = %(release_lease_of)s::text THEN NULL "
    "ELSE lease_expires_at END, "
    "attempts = CASE WHEN owner = %(release_lease_of)s::text THEN 0 ELSE attempts END"
)
UPDATE_RUN_STATUS_GIVE_BACK: Final = (
    f"UPDATE {{schema}}.runs SET {_SET_STATUS}, {_GIVE_BACK} WHERE execution_id = %(execution_id)s"
    f"{_NOT_CANCELLED}"
)
INSERT_CHECKPOINT: Final = (
    f"INSERT INTO {{schema}}.checkpoints ({_codec.CHECKPOINT_COLUMNS}) "
    f"VALUES ({named('%({})s')}, now()) RETURNING created_at"
)
# Fenced (see _leases): the share lock on the run row makes a takeover wait for a
# commit in flight, and a commit wait for a takeover in flight and then re-check the owner.
# Parameters of an INSERT ... SELECT carry no column type: each is cast.
_CP_CASTS: Final = (
    "text", "text", "bigint", "text", "integer", "text", "text", "text", "bytea", "bigint",
    "bytea", "bytea", "bytea", "text", "bytea", "text", "text", "text",
)  # fmt: skip
INSERT_CHECKPOINT_FENCED: Final = (
    f"INSERT INTO {{schema}}.checkpoints ({_codec.CHECKPOINT_COLUMNS}) "
    f"SELECT {', '.join(f'%({n})s::{t}' for n, t in zip(STEP_FIELDS, _CP_CASTS, strict=True))}, "
    "now() WHERE EXISTS (SELECT 1 FROM {schema}.runs WHERE execution_id = %(execution_id)s "
    "AND owner = %(owner)s FOR SHARE) RETURNING created_at"
)


def _and_set_status(insert: str) -> tuple[str]:
    # The step's checkpoint and its run's new status in one statement, so a step commits in
    # one round trip. The run row changes only if the checkpoint went in: a fenced insert that
    # finds the lease gone inserts nothing, and the update's one-time filter on ``cp`` runs
    # the insert (and its share lock on the run row) before the update reads that row.
    return (
        f"WITH cp AS ({insert}), "
        f"run AS (UPDATE {{schema}}.runs SET {_SET_STATUS}, {_GIVE_BACK} "
        f"WHERE execution_id = %(execution_id)s AND EXISTS (SELECT 1 FROM cp){_NOT_CANCELLED}) "
        "SELECT created_at FROM cp",
    )


INSERT_CHECKPOINT_SET_STATUS: Final = _and_set_status(INSERT_CHECKPOINT)
INSERT_CHECKPOINT_FENCED_SET_STATUS: Final = _and_set_status(INSERT_CHECKPOINT_FENCED)
_SELECT_CP: Final = f"SELECT {_codec.CHECKPOINT_COLUMNS} FROM {{schema}}.checkpoints"
_PATH_FILTER: Final = " AND (agent_path = %(path)s OR starts_with(agent_path, %(prefix)s))"
_OF_RUN: Final = " WHERE execution_id = %(execution_id)s"
SELECT_LAST: Final = f"{_SELECT_CP}{_OF_RUN} ORDER BY seq DESC LIMIT 1"
SELECT_LAST_BEFORE: Final = (
    f"{_SELECT_CP}{_OF_RUN} AND seq < %(before_seq)s ORDER BY seq DESC LIMIT 1"
)
SELECT_LAST_PATH: Final = (
    f"{_SELECT_CP}{_OF_RUN} AND seq < %(before_seq)s{_PATH_FILTER} ORDER BY seq DESC LIMIT 1"
)
# What resume reads: the two newest rows; when both are run-end markers, the newest row before
# them that is not one; then the state chain from the snapshot under them (SELECT_STATE_CHAIN).
SELECT_NEWEST_TWO: Final = f"{_SELECT_CP}{_OF_RUN} ORDER BY seq DESC LIMIT 2"
SELECT_RESUMABLE_BEFORE: Final = (
    f"{_SELECT_CP}{_OF_RUN} AND seq < %(before_seq)s AND step_type <> 'run_end' "
    "ORDER BY seq DESC LIMIT 1"
)
SELECT_BY_ID: Final = f"{_SELECT_CP}{_OF_RUN} AND checkpoint_id = %(checkpoint_id)s"
SELECT_ALL: Final = f"{_SELECT_CP}{_OF_RUN} ORDER BY seq"
SELECT_STATE_CHAIN: Final = (
    f"SELECT {CHAIN_COLUMNS} FROM {{schema}}.checkpoints{_OF_RUN} "
    "AND seq >= %(low)s AND seq <= %(high)s ORDER BY seq"
)
INSERT_PENDING: Final = (
    f"INSERT INTO {{schema}}.pending_interrupts ({_codec.PENDING_COLUMNS}) "
    "VALUES (%(execution_id)s, %(checkpoint_id)s, %(node_id)s, %(agent_path)s, %(reason)s, "
    "%(context)s, now(), NULL, NULL, NULL, "
    "now() + %(due_seconds)s::float8 * interval '1 second') RETURNING created_at"
)
DELETE_PENDING_OF: Final = (
    f"DELETE FROM {{schema}}.pending_interrupts{_OF_RUN} AND claimed_by = %(owner)s"
)
DELETE_PENDING: Final = f"DELETE FROM {{schema}}.pending_interrupts{_OF_RUN}"
SELECT_PENDING: Final = (
    f"SELECT {_codec.PENDING_COLUMNS} FROM {{schema}}.pending_interrupts{_OF_RUN}"
)
# A CTE appending the entry given in the audit_* parameters once per row of {source} (another
# CTE's name), and nothing when audit_execution_id is NULL: the answer and its entry are one
# statement, so both commit or neither does, at no extra round trip.
_AUDIT_CASTS: Final = ("text", "text", "text", "text", "text", "bytea", "text", "bytea")
AUDITED: Final = (
    f"audited AS (INSERT INTO {{schema}}.audit_log ({AUDIT_INSERT_COLUMNS}, at) SELECT "
    + ", ".join(f"%({n})s::{t}" for n, t in zip(AUDIT_PARAM_NAMES, _AUDIT_CASTS, strict=True))
    + ", now() FROM {source} WHERE %(audit_execution_id)s::text IS NOT NULL)"
)
# The claim: one statement (SQLite's CLAIM_PENDING, same WHERE). A concurrent claimer blocked
# on the row lock re-evaluates the WHERE on the winner's version of the row and matches
# nothing, so exactly one caller gets the row back. The run turns "running" in the same
# statement.
_CLAIMED: Final = (
    "WITH claimed AS ("
    "UPDATE {schema}.pending_interrupts SET claimed_by = %(owner)s, "
    "claim_expires_at = now() + %(lease_seconds)s * interval '1 second', "
    "resume_value = COALESCE(resume_value, %(value)s::bytea) "
    "WHERE execution_id = %(execution_id)s "
    "AND (claimed_by IS NULL OR claim_expires_at < now() OR claimed_by = %(steal_from)s::text) "
    "AND ((%(value)s::bytea IS NOT NULL AND resume_value IS NULL AND claimed_by IS NULL) "
    "     OR (%(value)s::bytea IS NULL AND resume_value IS NOT NULL)) "
    "AND (%(checkpoint_id)s::text IS NULL OR checkpoint_id = %(checkpoint_id)s::text) "
    f"RETURNING {_codec.PENDING_COLUMNS}), "
    "running AS (UPDATE {schema}.runs SET status = 'running', error = NULL, "
    "updated_at = now(), finished_at = NULL "
    "WHERE execution_id IN (SELECT execution_id FROM claimed))"
)
_FROM_CLAIMED: Final = f" SELECT {_codec.PENDING_COLUMNS} FROM claimed"
CLAIM_PENDING: Final = (_CLAIMED + _FROM_CLAIMED,)
# The claim that stores an answer records it in the audit trail in the same statement.
CLAIM_PENDING_AUDITED: Final = (
    _CLAIMED + ", " + AUDITED.replace("{source}", "claimed") + _FROM_CLAIMED,
)
RENEW_CLAIM: Final = (
    "UPDATE {schema}.pending_interrupts "
    "SET claim_expires_at = now() + %(lease_seconds)s * interval '1 second' "
    "WHERE execution_id = %(execution_id)s AND claimed_by = %(owner)s"
)
RELEASE_CLAIM: Final = (
    "WITH released AS ("
    "UPDATE {schema}.pending_interrupts SET claimed_by = NULL, claim_expires_at = NULL "
    "WHERE execution_id = %(execution_id)s AND claimed_by = %(owner)s RETURNING execution_id), "
    "paused AS (UPDATE {schema}.runs SET status = 'paused', error = NULL, "
    "updated_at = now(), finished_at = NULL "
    "WHERE execution_id IN (SELECT execution_id FROM released)) "
    "SELECT execution_id FROM released",
)
# Stores an answer and records it in the audit trail (when audit_* are given), one statement.
ANSWER_PENDING: Final = (
    "WITH answered AS (UPDATE {schema}.pending_interrupts SET resume_value = %(value)s "
    "WHERE execution_id = %(execution_id)s AND resume_value IS NULL AND claimed_by IS NULL "
    "AND (%(checkpoint_id)s::text IS NULL OR checkpoint_id = %(checkpoint_id)s::text) "
    "RETURNING execution_id), "
    + AUDITED.replace("{source}", "answered")
    + " SELECT execution_id FROM answered",
)
SELECT_IDEMPOTENT: Final = (
    f"SELECT value FROM {{schema}}.idempotency_cache{_OF_RUN} AND key = %(key)s"
)
INSERT_IDEMPOTENT: Final = (
    "INSERT INTO {schema}.idempotency_cache (execution_id, key, value, created_at) "
    "VALUES (%(execution_id)s, %(key)s, %(value)s, now()) "
    "ON CONFLICT (execution_id, key) DO NOTHING"
)
SELECT_IDEMPOTENT_ALL: Final = (
    f"SELECT key, value FROM {{schema}}.idempotency_cache{_OF_RUN} ORDER BY created_at, key"
)
REMOVE: Final = removal_statements(
    "{{schema}}.{}", " WHERE execution_id = ANY(%(ids)s)", "to_timestamp(%(cutoff)s)"
)
# Locking the runs re-checks their status: a failed run resumed meanwhile is no longer pruned.
LOCK_PRUNABLE: Final = REMOVE.select_prunable + " FOR UPDATE"
# A finished LangGraph run takes its thread with it (see _langgraph_sql); before the run rows.
DELETE_LANGGRAPH_OF_RUNS: Final = tuple(
    s.replace("ANY(%s)", "ANY(%(ids)s)") for s in POSTGRES_PRUNE_THREADS
)

# --- leases, workers and the queue (see _leases) ---------------------------------------------
_LEASE: Final = "now() + %(lease_seconds)s::float8 * interval '1 second'"
# When a run's lease lapses (see _leases): at its recorded expiry; an unowned run with none is
# free; an owned one with none (written by an older tether) 30 s after its last update.
_EXPIRES: Final = (
    "COALESCE({r}lease_expires_at, CASE WHEN {r}owner IS NULL THEN '-infinity'::timestamptz "
    f"ELSE {{r}}updated_at + interval '{UNRECORDED_LEASE_SECONDS:g} seconds' END)"
)
_LAPSED: Final = _EXPIRES.format(r="") + " < now()"
SELECT_LEASE: Final = f"SELECT owner, {_LAPSED} FROM {{schema}}.runs{_OF_RUN}"
# A compare-and-set: the lease is taken only from the owner the caller saw (%(previous)s,
# NULL: none) and only while it is free for the caller. A taker that waited for another's row
# lock re-checks the WHERE on the row as the other left it, so of two takers at once one wins.
TAKE_LEASE: Final = (
    f"UPDATE {{schema}}.runs SET owner = %(owner)s, lease_expires_at = {_LEASE}, "
    f"updated_at = now(){_OF_RUN} AND owner IS NOT DISTINCT FROM %(previous)s::text "
    f"AND (owner IS NULL OR owner = %(owner)s OR owner = %(steal_from)s::text OR {_LAPSED}) "
    f"RETURNING {_codec.RUN_COLUMNS}"
)
RENEW_LEASES: Final = (
    "UPDATE {schema}.runs SET lease_expires_at = now() + %(left)s * interval '1 second' "
    "WHERE owner = %(owner)s AND execution_id = ANY(%(ids)s)"
)
RELEASE_LEASE: Final = (
    "UPDATE {schema}.runs SET owner = NULL, lease_expires_at = NULL, attempts = 0"
    f"{_OF_RUN} AND owner = %(owner)s"
)
RELEASE_FOR_RETRY: Final = (
    "UPDATE {schema}.runs SET owner = NULL, "
    f"lease_expires_at = now() + %(retry_after_seconds)s * interval '1 second'{_OF_RUN} "
    "AND owner = %(owner)s"
)
# Claimable: running with a lapsed lease; queued, or paused with an answered and unclaimed
# interrupt, and not leased to a worker about to start it (nor waiting out a retry's delay);
# not one the worker left to workers with other code (%(exclude)s, an empty list: none).
_CLAIMABLE: Final = (
    "SELECT r.execution_id, r.runner_name, r.status, r.input, r.owner, r.attempts "
    "FROM {schema}.runs r WHERE r.status IN ('running', 'queued', 'paused') "
    f"AND {_EXPIRES.format(r='r.')} < now() "
    "AND (r.status <> 'paused' OR EXISTS (SELECT 1 FROM {schema}.pending_interrupts p "
    "WHERE p.execution_id = r.execution_id AND p.resume_value IS NOT NULL "
    "AND (p.claimed_by IS NULL OR p.claim_expires_at < now()))) "
    "AND r.execution_id <> ALL(%(exclude)s)"
)
_CLAIM_TAIL: Final = (
    " ORDER BY r.priority DESC, r.created_at, r.execution_id LIMIT %(limit)s "
    "FOR UPDATE OF r SKIP LOCKED"
)
# Of the versions the worker serves (docs/design.md §13): every run when %(serve_all)s, else
# the runs of %(app_versions)s and those with no version recorded (see _versions).
_SERVED: Final = (
    " AND (%(serve_all)s OR r.app_version IS NULL OR r.app_version = ANY(%(app_versions)s))"
)
SELECT_CLAIMABLE: Final = _CLAIMABLE + _SERVED + _CLAIM_TAIL
SELECT_CLAIMABLE_OF: Final = (
    _CLAIMABLE + " AND r.runner_name = ANY(%(runner_names)s)" + _SERVED + _CLAIM_TAIL
)
CLAIM_RUNS: Final = (
    f"UPDATE {{schema}}.runs SET owner = %(owner)s, lease_expires_at = {_LEASE}, "
    "attempts = attempts + 1, updated_at = now() WHERE execution_id = ANY(%(ids)s)"
)
DEAD_LETTER_RUN: Final = (
    "UPDATE {schema}.runs SET status = 'failed', error = %(error)s, owner = NULL, "
    f"lease_expires_at = NULL, updated_at = now(), finished_at = now(){_OF_RUN}"
)
ENQUEUE_RUN: Final = (
    f"INSERT INTO {{schema}}.runs ({_codec.RUN_COLUMNS}, priority) VALUES (%(execution_id)s, "
    "%(runner_name)s, '', 'queued', %(input)s, NULL, NULL, NULL, NULL, NULL, now(), now(), NULL, "
    "%(app_version)s, %(priority)s) ON CONFLICT (execution_id) DO NOTHING"
)
START_QUEUED: Final = (
    "UPDATE {schema}.runs SET status = 'running', runner_kind = %(runner_kind)s, "
    "input = %(input)s, updated_at = now(), app_version = COALESCE(app_version, %(app_version)s)"
    f"{_OF_RUN} AND status = 'queued' AND owner = %(owner)s"
)

# --- cancel and delete (the rules: _control) ---------------------------------------------------
# The run row locked first: a leaseholder's fenced commit takes a share lock on it, so a step
# in flight lands before the cancel reads the run's newest row, or waits and finds its lease
# gone.
LOCK_RUN: Final = f"SELECT status, owner, now() FROM {{schema}}.runs{_OF_RUN} FOR UPDATE"
# An approval deadline's end is conditional on its question still unanswered: the pending row
# locked and read under the run's lock (see _control).
LOCK_PENDING: Final = (
    "SELECT checkpoint_id, resume_value, claimed_by FROM {schema}.pending_interrupts"
    f"{_OF_RUN} FOR UPDATE"
)
# The run ends as %(end_as)s: 'cancelled', or 'failed' for a deadline's on_timeout='fail'.
CANCEL_RUN: Final = (
    "UPDATE {schema}.runs SET status = %(end_as)s, error = %(error)s, owner = NULL, "
    f"lease_expires_at = NULL, updated_at = now(), finished_at = now(){_OF_RUN}"
)
DELETE_PENDING_RETURNING: Final = (
    f"DELETE FROM {{schema}}.pending_interrupts{_OF_RUN} RETURNING checkpoint_id"
)

# --- the audit trail (tether.audit) ----------------------------------------------------------
INSERT_AUDIT_ENTRY: Final = (
    f"INSERT INTO {{schema}}.audit_log ({AUDIT_INSERT_COLUMNS}, at) "
    f"VALUES ({named('%({})s', AUDIT_PARAM_NAMES)}, now())"
)
SELECT_AUDIT_OF_RUN: Final = (
    f"SELECT {AUDIT_COLUMNS} FROM {{schema}}.audit_log{_OF_RUN} ORDER BY entry_id"
)
# %(since)s in seconds since the epoch; no %(limit)s (NULL) is every entry.
SELECT_AUDIT_SINCE: Final = (
    f"SELECT {AUDIT_COLUMNS} FROM {{schema}}.audit_log WHERE at >= to_timestamp(%(since)s) "
    "ORDER BY at, entry_id LIMIT %(limit)s"
)

# --- approval deadlines (docs/design.md §12) ---------------------------------------------------
# The questions due now, unanswered and unclaimed, of paused runs (of %(runner_names)s, NULL:
# any runner), soonest first.
SELECT_DUE: Final = (
    f"SELECT {PENDING.qualified('p')} "
    "FROM {schema}.pending_interrupts p JOIN {schema}.runs r ON r.execution_id = p.execution_id "
    "WHERE p.due_at IS NOT NULL AND p.due_at <= now() AND p.resume_value IS NULL "
    "AND p.claimed_by IS NULL AND r.status = 'paused' "
    "AND (%(runner_names)s::text[] IS NULL OR r.runner_name = ANY(%(runner_names)s::text[])) "
    "ORDER BY p.due_at LIMIT %(limit)s"
)
