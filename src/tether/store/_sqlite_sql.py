"""The SQLite checkpointer's SQL: its schema migrations and every statement, as named
constants with named parameters (``:execution_id``), under the same names as
:mod:`tether.store._postgres_sql`'s, so that one plan (:mod:`tether.store._operations`) runs
on either.

Times are ``time.time()`` seconds (``:now``, filled in by :mod:`tether.store._sqlite_io`). A
list parameter arrives as JSON text and is read with ``json_each``. Where Postgres changes two
tables in one statement (a writable CTE), SQLite has a **script**: a tuple of statements run
in the plan's transaction, the later ones only when the first touched a row, as the CTE's
``WHERE EXISTS (SELECT 1 FROM <first>)`` does.
"""

from __future__ import annotations

from typing import Final

from . import _codec
from ._audit_codec import AUDIT_COLUMNS, AUDIT_INSERT_COLUMNS, AUDIT_PARAM_NAMES
from ._langgraph_sql import POSTGRES_PRUNE_THREADS, SQLITE_MIGRATION_V5, for_sqlite
from ._leases import UNRECORDED_LEASE_SECONDS
from ._listing import RUNS_ORDER_INDEX
from ._records import PENDING
from ._removal_sql import removal_statements
from ._rows import CHAIN_COLUMNS, named
from ._versions import SQLITE_MIGRATION_V8

SCHEMA_VERSION: Final = 9

# v2: run leases for workers, the start queue's priority, claim attempts (dead letters).
MIGRATION_V2: Final[tuple[str, ...]] = (
    "ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX runs_queue_idx ON runs (status, priority DESC, created_at)",
)

MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        """CREATE TABLE runs (
            execution_id TEXT PRIMARY KEY,
            runner_name TEXT NOT NULL,
            runner_kind TEXT NOT NULL,
            status TEXT NOT NULL,
            input BLOB,
            parent_execution_id TEXT,
            parent_checkpoint_id TEXT,
            owner TEXT,
            lease_expires_at REAL,
            error TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            finished_at REAL
        )""",
        "CREATE INDEX runs_status_idx ON runs (status, updated_at)",
        "CREATE INDEX runs_name_idx ON runs (runner_name, created_at)",
        """CREATE TABLE checkpoints (
            checkpoint_id TEXT PRIMARY KEY,
            execution_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            node_id TEXT NOT NULL,
            node_index INTEGER NOT NULL,
            step_type TEXT NOT NULL,
            status TEXT NOT NULL,
            state_kind TEXT NOT NULL,
            state BLOB NOT NULL,
            base_seq INTEGER NOT NULL,
            node_input BLOB,
            node_output BLOB,
            iteration_counters BLOB,
            interrupt_reason TEXT,
            interrupt_context BLOB,
            agent_path TEXT,
            parent_checkpoint_id TEXT,
            next_node_id TEXT,
            created_at REAL NOT NULL
        )""",
        "CREATE UNIQUE INDEX checkpoints_run_seq_idx ON checkpoints (execution_id, seq)",
        """CREATE TABLE pending_interrupts (
            execution_id TEXT PRIMARY KEY,
            checkpoint_id TEXT NOT NULL,
            node_id TEXT NOT NULL,
            agent_path TEXT,
            reason TEXT NOT NULL,
            context BLOB,
            created_at REAL NOT NULL,
            claimed_by TEXT,
            claim_expires_at REAL,
            resume_value BLOB
        )""",
        """CREATE TABLE idempotency_cache (
            execution_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value BLOB,
            created_at REAL NOT NULL,
            PRIMARY KEY (execution_id, key)
        )""",
    ),
    # v2: run leases for workers, the start queue's priority, claim attempts (dead letters).
    2: MIGRATION_V2,
}
# v3: checkpoint_id is no longer the table's primary key. Its index cost every step an insert
# at a random place of a third B-tree (~10 µs of a ~30 µs INSERT); rows are found by run and
# seq, and a checkpoint by id within its run (get_checkpoint), a walk of that run's rows.
# SQLite cannot drop a primary key: the table is copied into one without it.
_CHECKPOINTS_V1: Final = MIGRATIONS[1][3]  # CREATE TABLE checkpoints (...)
MIGRATIONS[3] = (
    _CHECKPOINTS_V1.replace("CREATE TABLE checkpoints (", "CREATE TABLE checkpoints_v3 (").replace(
        "checkpoint_id TEXT PRIMARY KEY", "checkpoint_id TEXT NOT NULL"
    ),
    f"INSERT INTO checkpoints_v3 ({_codec.CHECKPOINT_COLUMNS}) "
    f"SELECT {_codec.CHECKPOINT_COLUMNS} FROM checkpoints ORDER BY execution_id, seq",
    "DROP TABLE checkpoints",
    "ALTER TABLE checkpoints_v3 RENAME TO checkpoints",
    "CREATE UNIQUE INDEX checkpoints_run_seq_idx ON checkpoints (execution_id, seq)",
)
# v4: a state payload may be a Zstandard frame (_codec.compress_state); the version is recorded so
# that an older tether refuses these rows instead of misreading them. And runs_status_idx goes:
# runs_queue_idx leads with status too and serves the same lookups, while (status, updated_at)
# changed on every lease take, heartbeat and status write.
MIGRATIONS[4] = ("DROP INDEX IF EXISTS runs_status_idx",)
# v5: the tables of the LangGraph checkpoint saver (tether.integrations.langgraph).
MIGRATIONS[5] = SQLITE_MIGRATION_V5
# v6: the audit trail (tether.audit, _audit_operations). AUTOINCREMENT: an entry_id is never
# reused, even after prune deletes the newest entries, so an exported trail's ids stay unique.
MIGRATIONS[6] = (
    """CREATE TABLE audit_log (
        entry_id INTEGER PRIMARY KEY AUTOINCREMENT,
        execution_id TEXT NOT NULL,
        action TEXT NOT NULL,
        via TEXT NOT NULL,
        actor TEXT,
        note TEXT,
        data BLOB,
        checkpoint_id TEXT,
        interrupt BLOB,
        at REAL NOT NULL
    )""",
    "CREATE INDEX audit_log_run_idx ON audit_log (execution_id, entry_id)",
    "CREATE INDEX audit_log_at_idx ON audit_log (at)",
)
# v7: the runs listing's keyset order (see _listing).
MIGRATIONS[7] = (RUNS_ORDER_INDEX.replace("{schema}.", ""),)
# v8: the version of the code that started each run (see _versions).
MIGRATIONS[8] = SQLITE_MIGRATION_V8
# v9: approval deadlines: when a pending question falls due (interrupt(timeout_seconds=)).
MIGRATIONS[9] = (
    "ALTER TABLE pending_interrupts ADD COLUMN due_at REAL",
    "CREATE INDEX pending_due_idx ON pending_interrupts (due_at) WHERE due_at IS NOT NULL",
)

# The unique keys whose violation means another writer came first, as SQLite names them.
RUN_KEY: Final = "runs.execution_id"
STEP_KEY: Final = "checkpoints.execution_id, checkpoints.seq"

CREATE_SCHEMA_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS tether_schema (version INTEGER NOT NULL, applied_at REAL NOT NULL)"
)
SELECT_SCHEMA_VERSION: Final = "SELECT MAX(version) FROM tether_schema"
INSERT_SCHEMA_VERSION: Final = "INSERT INTO tether_schema (version, applied_at) VALUES (?, ?)"

# --- runs ------------------------------------------------------------------------------------
# An owned run is created leased: its expiry is the owner's lease period (NULL: unowned) from
# the creating commit (see _leases).
INSERT_RUN: Final = (
    f"INSERT INTO runs ({_codec.RUN_COLUMNS}) VALUES (:execution_id, :runner_name, "
    ":runner_kind, :status, :input, :parent_execution_id, :parent_checkpoint_id, :owner, "
    ":now + :lease_seconds, NULL, :now, :now, NULL, :app_version) "
    "RETURNING created_at, lease_expires_at"
)
SELECT_RUN: Final = f"SELECT {_codec.RUN_COLUMNS} FROM runs WHERE execution_id = :execution_id"
# The run's new status is :run_status (a step's insert shares its parameters, and :status is
# the checkpoint's own).
_SET_STATUS: Final = (
    "status = :run_status, error = :error, updated_at = :now, "
    "finished_at = CASE WHEN :run_status IN ('completed', 'failed', 'cancelled') THEN :now "
    "ELSE NULL END"
)
# A cancelled run stays cancelled: no status write of a drive fenced out by the cancel
# (docs/design.md, "Cancel and delete") brings it back.
_NOT_CANCELLED: Final = " AND status <> 'cancelled'"
UPDATE_RUN_STATUS: Final = (
    f"UPDATE runs SET {_SET_STATUS} WHERE execution_id = :execution_id{_NOT_CANCELLED}"
)
# The run lease given back with the status (the commit that ends a drive) when
# :release_lease_of names the holder; NULL leaves the lease as it is.
_GIVE_BACK: Final = (
    "owner = CASE WHEN owner = :release_lease_of THEN NULL ELSE owner END, "
    "lease_expires_at = CASE WHEN owner = :release_lease_of THEN NULL ELSE lease_expires_at END, "
    "attempts = CASE WHEN owner = :release_lease_of THEN 0 ELSE attempts END"
)
UPDATE_RUN_STATUS_GIVE_BACK: Final = (
    f"UPDATE runs SET {_SET_STATUS}, {_GIVE_BACK} WHERE execution_id = :execution_id"
    f"{_NOT_CANCELLED}"
)

# --- checkpoints -----------------------------------------------------------------------------
INSERT_CHECKPOINT: Final = (
    f"INSERT INTO checkpoints ({_codec.CHECKPOINT_COLUMNS}) VALUES ({named(':{}')}, :now)"
)
# Fenced: only while :owner holds the run's lease (see _leases); no row inserted otherwise.
INSERT_CHECKPOINT_FENCED: Final = (
    f"INSERT INTO checkpoints ({_codec.CHECKPOINT_COLUMNS}) SELECT {named(':{}')}, :now "
    "WHERE EXISTS (SELECT 1 FROM runs WHERE execution_id = :execution_id AND owner = :owner)"
)
INSERT_CHECKPOINT_SET_STATUS: Final = (INSERT_CHECKPOINT, UPDATE_RUN_STATUS_GIVE_BACK)
INSERT_CHECKPOINT_FENCED_SET_STATUS: Final = (INSERT_CHECKPOINT_FENCED, UPDATE_RUN_STATUS_GIVE_BACK)
_SELECT_CP: Final = f"SELECT {_codec.CHECKPOINT_COLUMNS} FROM checkpoints"
_PATH_FILTER: Final = (
    " AND (agent_path = :path OR substr(agent_path, 1, length(:prefix)) = :prefix)"
)
SELECT_LAST: Final = f"{_SELECT_CP} WHERE execution_id = :execution_id ORDER BY seq DESC LIMIT 1"
SELECT_LAST_BEFORE: Final = (
    f"{_SELECT_CP} WHERE execution_id = :execution_id AND seq < :before_seq "
    "ORDER BY seq DESC LIMIT 1"
)
SELECT_LAST_PATH: Final = (
    f"{_SELECT_CP} WHERE execution_id = :execution_id AND seq < :before_seq{_PATH_FILTER} "
    "ORDER BY seq DESC LIMIT 1"
)
# What resume reads: the two newest rows; when both are run-end markers, the newest row before
# them that is not one; then the state chain from the snapshot under them (SELECT_STATE_CHAIN).
SELECT_NEWEST_TWO: Final = (
    f"{_SELECT_CP} WHERE execution_id = :execution_id ORDER BY seq DESC LIMIT 2"
)
SELECT_RESUMABLE_BEFORE: Final = (
    f"{_SELECT_CP} WHERE execution_id = :execution_id AND seq < :before_seq "
    "AND step_type <> 'run_end' ORDER BY seq DESC LIMIT 1"
)
SELECT_BY_ID: Final = (
    f"{_SELECT_CP} WHERE execution_id = :execution_id AND checkpoint_id = :checkpoint_id"
)
SELECT_ALL: Final = f"{_SELECT_CP} WHERE execution_id = :execution_id ORDER BY seq"
SELECT_STATE_CHAIN: Final = (
    f"SELECT {CHAIN_COLUMNS} FROM checkpoints "
    "WHERE execution_id = :execution_id AND seq >= :low AND seq <= :high ORDER BY seq"
)

# --- pending interrupts ----------------------------------------------------------------------
INSERT_PENDING: Final = (
    f"INSERT INTO pending_interrupts ({_codec.PENDING_COLUMNS}) "
    "VALUES (:execution_id, :checkpoint_id, :node_id, :agent_path, :reason, :context, :now, "
    "NULL, NULL, NULL, :now + :due_seconds) RETURNING created_at"
)
DELETE_PENDING_OF: Final = (
    "DELETE FROM pending_interrupts WHERE execution_id = :execution_id AND claimed_by = :owner"
)
DELETE_PENDING: Final = "DELETE FROM pending_interrupts WHERE execution_id = :execution_id"
SELECT_PENDING: Final = (
    f"SELECT {_codec.PENDING_COLUMNS} FROM pending_interrupts WHERE execution_id = :execution_id"
)
# Appends the entry given in the audit_* parameters (nothing when audit_execution_id is NULL).
_AUDITED: Final = (
    f"INSERT INTO audit_log ({AUDIT_INSERT_COLUMNS}, at) "
    f"SELECT {named(':{}', AUDIT_PARAM_NAMES)}, :now WHERE :audit_execution_id IS NOT NULL"
)
# The claim: one statement, so exactly one concurrent caller gets the row back (the write lock
# serialises them); the run turns "running" after it, in the same transaction.
_CLAIMED: Final = (
    "UPDATE pending_interrupts SET claimed_by = :owner, "
    "claim_expires_at = :now + :lease_seconds, resume_value = COALESCE(resume_value, :value) "
    "WHERE execution_id = :execution_id "
    "AND (claimed_by IS NULL OR claim_expires_at < :now OR claimed_by = :steal_from) "
    "AND ((:value IS NOT NULL AND resume_value IS NULL AND claimed_by IS NULL) "
    "     OR (:value IS NULL AND resume_value IS NOT NULL)) "
    "AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id) "
    f"RETURNING {_codec.PENDING_COLUMNS}"
)
_RUNNING: Final = (
    "UPDATE runs SET status = 'running', error = NULL, updated_at = :now, finished_at = NULL "
    "WHERE execution_id = :execution_id"
)
CLAIM_PENDING: Final = (_CLAIMED, _RUNNING)
CLAIM_PENDING_AUDITED: Final = (_CLAIMED, _RUNNING, _AUDITED)
RENEW_CLAIM: Final = (
    "UPDATE pending_interrupts SET claim_expires_at = :now + :lease_seconds "
    "WHERE execution_id = :execution_id AND claimed_by = :owner"
)
RELEASE_CLAIM: Final = (
    "UPDATE pending_interrupts SET claimed_by = NULL, claim_expires_at = NULL "
    "WHERE execution_id = :execution_id AND claimed_by = :owner RETURNING execution_id",
    "UPDATE runs SET status = 'paused', error = NULL, updated_at = :now, finished_at = NULL "
    "WHERE execution_id = :execution_id",
)
ANSWER_PENDING: Final = (
    "UPDATE pending_interrupts SET resume_value = :value "
    "WHERE execution_id = :execution_id AND resume_value IS NULL AND claimed_by IS NULL "
    "AND (:checkpoint_id IS NULL OR checkpoint_id = :checkpoint_id) RETURNING execution_id",
    _AUDITED,
)

# --- idempotency -----------------------------------------------------------------------------
SELECT_IDEMPOTENT: Final = (
    "SELECT value FROM idempotency_cache WHERE execution_id = :execution_id AND key = :key"
)
INSERT_IDEMPOTENT: Final = (
    "INSERT INTO idempotency_cache (execution_id, key, value, created_at) "
    "VALUES (:execution_id, :key, :value, :now) ON CONFLICT (execution_id, key) DO NOTHING"
)
SELECT_IDEMPOTENT_ALL: Final = (
    "SELECT key, value FROM idempotency_cache WHERE execution_id = :execution_id "
    "ORDER BY created_at, key"
)

# --- maintenance -----------------------------------------------------------------------------
REMOVE: Final = removal_statements(
    "{}", " WHERE execution_id IN (SELECT value FROM json_each(:ids))", ":cutoff"
)
# The plan's write lock keeps the set fixed until it commits: no row lock to take.
LOCK_PRUNABLE: Final = REMOVE.select_prunable
# A finished LangGraph run takes its thread with it (see _langgraph_sql); before the run rows.
DELETE_LANGGRAPH_OF_RUNS: Final = tuple(
    for_sqlite(s.replace("= ANY(%s)", " IN (SELECT value FROM json_each(:ids))"))
    for s in POSTGRES_PRUNE_THREADS
)

# --- leases, workers and the queue (see _leases) ---------------------------------------------
# When a run's lease lapses (see _leases): at its recorded expiry; an unowned run with none is
# free; an owned one with none (written by an older tether) 30 s after its last update.
_EXPIRES: Final = (
    "COALESCE({r}lease_expires_at, CASE WHEN {r}owner IS NULL THEN 0 "
    f"ELSE {{r}}updated_at + {UNRECORDED_LEASE_SECONDS!r} END)"
)
_LAPSED: Final = _EXPIRES.format(r="") + " < :now"
_OF_RUN: Final = " WHERE execution_id = :execution_id"
SELECT_LEASE: Final = f"SELECT owner, {_LAPSED} FROM runs{_OF_RUN}"
# A compare-and-set: the lease is taken only from the owner the caller saw (:previous, NULL:
# none) and only while it is free for the caller; one statement, so of two takers one wins.
TAKE_LEASE: Final = (
    "UPDATE runs SET owner = :owner, lease_expires_at = :now + :lease_seconds, "
    f"updated_at = :now{_OF_RUN} AND owner IS :previous "
    f"AND (owner IS NULL OR owner = :owner OR owner = :steal_from OR {_LAPSED}) "
    f"RETURNING {_codec.RUN_COLUMNS}"
)
# The expiry is the deadline the renewer decided on (:deadline); a renewal that waited for the
# write lock past it writes nothing, on this machine's clock as SQLite reads it.
RENEW_LEASES: Final = (
    "UPDATE runs SET lease_expires_at = :deadline WHERE owner = :owner "
    "AND execution_id IN (SELECT value FROM json_each(:ids)) "
    "AND :deadline > (julianday('now') - 2440587.5) * 86400.0"
)
RELEASE_LEASE: Final = (
    f"UPDATE runs SET owner = NULL, lease_expires_at = NULL, attempts = 0{_OF_RUN} "
    "AND owner = :owner"
)
RELEASE_FOR_RETRY: Final = (
    f"UPDATE runs SET owner = NULL, lease_expires_at = :now + :retry_after_seconds{_OF_RUN} "
    "AND owner = :owner"
)
# Claimable: running with a lapsed lease; queued, or paused with an answered and unclaimed
# interrupt, and not leased to a worker about to start it (nor waiting out a retry's delay);
# not one the worker left to workers with other code (:exclude, a JSON list).
_CLAIMABLE: Final = (
    "SELECT r.execution_id, r.runner_name, r.status, r.input, r.owner, r.attempts FROM runs r "
    f"WHERE r.status IN ('running', 'queued', 'paused') AND {_EXPIRES.format(r='r.')} < :now "
    "AND (r.status <> 'paused' OR EXISTS (SELECT 1 FROM pending_interrupts p "
    "WHERE p.execution_id = r.execution_id AND p.resume_value IS NOT NULL "
    "AND (p.claimed_by IS NULL OR p.claim_expires_at < :now))) "
    "AND r.execution_id NOT IN (SELECT value FROM json_each(:exclude))"
)
# The plan's write lock keeps other claimers out until it commits: no row lock to take.
_CLAIM_TAIL: Final = " ORDER BY r.priority DESC, r.created_at, r.execution_id LIMIT :limit"
# Of the versions the worker serves (docs/design.md §13): every run when :serve_all, else the
# runs of :app_versions (a JSON list) and those with no version recorded (see _versions).
_SERVED: Final = (
    " AND (:serve_all OR r.app_version IS NULL "
    "OR r.app_version IN (SELECT value FROM json_each(:app_versions)))"
)
SELECT_CLAIMABLE: Final = _CLAIMABLE + _SERVED + _CLAIM_TAIL
SELECT_CLAIMABLE_OF: Final = (
    _CLAIMABLE
    + " AND r.runner_name IN (SELECT value FROM json_each(:runner_names))"
    + _SERVED
    + _CLAIM_TAIL
)
CLAIM_RUNS: Final = (
    "UPDATE runs SET owner = :owner, lease_expires_at = :now + :lease_seconds, "
    "attempts = attempts + 1, updated_at = :now "
    "WHERE execution_id IN (SELECT value FROM json_each(:ids))"
)
DEAD_LETTER_RUN: Final = (
    "UPDATE runs SET status = 'failed', error = :error, owner = NULL, lease_expires_at = NULL, "
    f"updated_at = :now, finished_at = :now{_OF_RUN}"
)
ENQUEUE_RUN: Final = (
    f"INSERT INTO runs ({_codec.RUN_COLUMNS}, priority) VALUES (:execution_id, :runner_name, "
    "'', 'queued', :input, NULL, NULL, NULL, NULL, NULL, :now, :now, NULL, :app_version, "
    ":priority) "
    "ON CONFLICT (execution_id) DO NOTHING"
)
START_QUEUED: Final = (
    "UPDATE runs SET status = 'running', runner_kind = :runner_kind, input = :input, "
    "updated_at = :now, app_version = COALESCE(app_version, :app_version)"
    f"{_OF_RUN} AND status = 'queued' AND owner = :owner"
)

# --- cancel and delete (the rules: _control) ---------------------------------------------------
# The plan's write lock orders them against every step commit: a commit in flight lands before
# the cancel or is fenced out after it.
LOCK_RUN: Final = f"SELECT status, owner, :now FROM runs{_OF_RUN}"
# An approval deadline's end is conditional on its question still unanswered: the pending row
# read under the plan's write lock (see _control).
LOCK_PENDING: Final = (
    f"SELECT checkpoint_id, resume_value, claimed_by FROM pending_interrupts{_OF_RUN}"
)
# The run ends as :end_as: 'cancelled', or 'failed' for a deadline's on_timeout='fail'.
CANCEL_RUN: Final = (
    "UPDATE runs SET status = :end_as, error = :error, owner = NULL, "
    f"lease_expires_at = NULL, updated_at = :now, finished_at = :now{_OF_RUN}"
)
DELETE_PENDING_RETURNING: Final = f"DELETE FROM pending_interrupts{_OF_RUN} RETURNING checkpoint_id"

# --- the audit trail (tether.audit) ----------------------------------------------------------
INSERT_AUDIT_ENTRY: Final = (
    f"INSERT INTO audit_log ({AUDIT_INSERT_COLUMNS}, at) "
    f"VALUES ({named(':{}', AUDIT_PARAM_NAMES)}, :now)"
)
SELECT_AUDIT_OF_RUN: Final = f"SELECT {AUDIT_COLUMNS} FROM audit_log{_OF_RUN} ORDER BY entry_id"
# :since in seconds since the epoch; no :limit (NULL) is every entry.
SELECT_AUDIT_SINCE: Final = (
    f"SELECT {AUDIT_COLUMNS} FROM audit_log WHERE at >= :since "
    "ORDER BY at, entry_id LIMIT coalesce(:limit, -1)"
)

# --- approval deadlines (docs/design.md §12) ---------------------------------------------------
# The questions due now, unanswered and unclaimed, of paused runs (of :runner_names, a JSON
# list; NULL: any runner), soonest first.
SELECT_DUE: Final = (
    f"SELECT {PENDING.qualified('p')} "
    "FROM pending_interrupts p JOIN runs r ON r.execution_id = p.execution_id "
    "WHERE p.due_at IS NOT NULL AND p.due_at <= :now AND p.resume_value IS NULL "
    "AND p.claimed_by IS NULL AND r.status = 'paused' "
    "AND (:runner_names IS NULL "
    "OR r.runner_name IN (SELECT value FROM json_each(:runner_names))) "
    "ORDER BY p.due_at LIMIT :limit"
)
