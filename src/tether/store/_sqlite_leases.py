"""Run leases, fencing, worker claims and the start queue on SQLite (``docs/workers.md``).

Every claim runs inside ``BEGIN IMMEDIATE``: the database's write lock serialises claimers, so
two workers never claim one run. That is exact for processes on one machine and wrong across
machines (SQLite's file locking over network filesystems is unreliable): use Postgres there.
Times are this machine's clock (``time.time()``), as everywhere in the SQLite backend.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Final

from . import _codec
from ._leases import (
    UNRECORDED_LEASE_SECONDS,
    ClaimedRun,
    Fencing,
    LeaseTake,
    dead_letter_reason,
    lease_left_seconds,
)

__all__ = ["MIGRATION_V2", "SQLiteLeases"]

MIGRATION_V2: Final[tuple[str, ...]] = (
    "ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX runs_queue_idx ON runs (status, priority DESC, created_at)",
)

# When a run's lease lapses (see _leases): at its recorded expiry; an unowned run with none is
# free; an owned one with none (written by an older tether) 30 s after its last update.
_EXPIRES: Final = (
    "COALESCE({r}lease_expires_at, CASE WHEN {r}owner IS NULL THEN 0 "
    f"ELSE {{r}}updated_at + {UNRECORDED_LEASE_SECONDS!r} END)"
)
SELECT_LEASE: Final = (
    f"SELECT {_codec.RUN_COLUMNS}, {_EXPIRES.format(r='')} FROM runs WHERE execution_id = ?"
)
TAKE_LEASE: Final = (
    "UPDATE runs SET owner = ?, lease_expires_at = ?, updated_at = ? WHERE execution_id = ?"
)
RENEW_LEASES: Final = (
    "UPDATE runs SET lease_expires_at = ? WHERE owner = ? AND execution_id IN ({})"
)
RELEASE_LEASE: Final = (
    "UPDATE runs SET owner = NULL, lease_expires_at = NULL, attempts = 0 "
    "WHERE execution_id = ? AND owner = ?"
)
RELEASE_FOR_RETRY: Final = (
    "UPDATE runs SET owner = NULL, lease_expires_at = ? WHERE execution_id = ? AND owner = ?"
)
# Claimable: running with a lapsed lease; queued, or paused with an answered and unclaimed
# interrupt, and not leased to a worker about to start it (nor waiting out a retry's delay).
_CLAIMABLE: Final = (
    "SELECT r.execution_id, r.runner_name, r.status, r.input, r.owner, r.attempts FROM runs r "
    f"WHERE r.status IN ('running', 'queued', 'paused') AND {_EXPIRES.format(r='r.')} < ? "
    "AND (r.status <> 'paused' OR EXISTS (SELECT 1 FROM pending_interrupts p "
    "WHERE p.execution_id = r.execution_id AND p.resume_value IS NOT NULL "
    "AND (p.claimed_by IS NULL OR p.claim_expires_at < ?)))"
)
_CLAIM_ORDER: Final = " ORDER BY r.priority DESC, r.created_at, r.execution_id LIMIT ?"
CLAIM_RUN: Final = (
    "UPDATE runs SET owner = ?, lease_expires_at = ?, attempts = attempts + 1, updated_at = ? "
    "WHERE execution_id = ?"
)
DEAD_LETTER_RUN: Final = (
    "UPDATE runs SET status = 'failed', error = ?, owner = NULL, lease_expires_at = NULL, "
    "updated_at = ?, finished_at = ? WHERE execution_id = ?"
)
ENQUEUE_RUN: Final = (
    f"INSERT INTO runs ({_codec.RUN_COLUMNS}, priority) "
    "VALUES (?, ?, '', 'queued', ?, NULL, NULL, NULL, NULL, NULL, ?, ?, NULL, ?) "
    "ON CONFLICT (execution_id) DO NOTHING"
)
START_QUEUED: Final = (
    "UPDATE runs SET status = 'running', runner_kind = ?, input = ?, updated_at = ? "
    "WHERE execution_id = ? AND status = 'queued' AND owner = ?"
)


class SQLiteLeases(Fencing):
    """The :class:`~tether.store._leases.LeaseStore` capability of ``SQLiteCheckpointer``."""

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _drop_head(self, execution_id: str) -> None:
        raise NotImplementedError

    # --- leases ---------------------------------------------------------------------------
    def acquire_run_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, steal_from: str | None
    ) -> LeaseTake:
        """See :meth:`tether.store._leases.LeaseStore.aacquire_run_lease`."""
        now = time.time()
        with self._write() as conn:
            row = conn.execute(SELECT_LEASE, (execution_id,)).fetchone()
            if row is None:
                return LeaseTake(False, None, False)
            run, expires = _codec.run_from_row(row), row[-1]
            previous = run.owner
            if previous is not None and previous not in (owner, steal_from) and expires >= now:
                return LeaseTake(False, previous, True)
            conn.execute(TAKE_LEASE, (owner, now + lease_seconds, now, execution_id))
        self._drop_head(execution_id)
        self._fences.set(execution_id, owner)
        run.owner, run.lease_expires_at = owner, _codec.ts_to_dt(now + lease_seconds)
        run.updated_at = _codec.ts_to_dt(now)
        return LeaseTake(True, previous, True, run)

    def renew_run_leases(
        self,
        owner: str,
        execution_ids: Sequence[str],
        *,
        lease_seconds: float,
        since: float | None = None,
    ) -> int:
        """See :meth:`tether.store._leases.LeaseStore.renew_run_leases`."""
        ids = list(execution_ids)
        if not ids:
            return 0
        sql = RENEW_LEASES.format(",".join("?" * len(ids)))
        with self._write() as conn:
            # Read with the write lock held: a wait for it counts.
            left = lease_left_seconds(lease_seconds, since)
            if left <= 0:
                return 0
            return int(conn.execute(sql, (time.time() + left, owner, *ids)).rowcount)

    def release_run_lease(self, execution_id: str, *, owner: str) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.arelease_run_lease`."""
        self._fences.drop(execution_id, owner)
        with self._write() as conn:
            return conn.execute(RELEASE_LEASE, (execution_id, owner)).rowcount == 1

    def release_run_for_retry(
        self, execution_id: str, *, owner: str, retry_after_seconds: float
    ) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.arelease_run_for_retry`."""
        self._fences.drop(execution_id, owner)
        params = (time.time() + retry_after_seconds, execution_id, owner)
        with self._write() as conn:
            return conn.execute(RELEASE_FOR_RETRY, params).rowcount == 1

    # --- workers and the queue ------------------------------------------------------------
    def claim_runs(
        self,
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
        max_attempts: int,
        runner_names: list[str] | None = None,
        runner_slots: dict[str, int] | None = None,
        exclude_execution_ids: Sequence[str] | None = None,
    ) -> list[ClaimedRun]:
        """See :meth:`tether.store._leases.LeaseStore.aclaim_runs`."""
        if limit <= 0:
            return []
        now = time.time()
        sql = _CLAIMABLE
        args: list[Any] = [now, now]
        if runner_names is not None:
            if not runner_names:
                return []
            sql += f" AND r.runner_name IN ({','.join('?' * len(runner_names))})"
            args.extend(runner_names)
        if exclude_execution_ids:  # runs this worker left to workers with other code
            sql += f" AND r.execution_id NOT IN ({','.join('?' * len(exclude_execution_ids))})"
            args.extend(exclude_execution_ids)
        slots = dict(runner_slots or {})
        args.append(limit * 4 if slots else limit)
        out: list[ClaimedRun] = []
        with self._write() as conn:
            for eid, name, status, raw_input, previous, attempts in conn.execute(
                sql + _CLAIM_ORDER, args
            ).fetchall():
                if len(out) >= limit:
                    break
                if name in slots:
                    if slots[name] <= 0:
                        continue
                    slots[name] -= 1
                claimed = ClaimedRun(
                    eid, name, status, _codec.load_json(raw_input), previous, attempts + 1
                )
                if attempts >= max_attempts:
                    claimed.attempts = attempts
                    claimed.dead_lettered = True
                    reason = dead_letter_reason(attempts, previous)
                    conn.execute(DEAD_LETTER_RUN, (reason, now, now, eid))
                else:
                    conn.execute(CLAIM_RUN, (owner, now + lease_seconds, now, eid))
                out.append(claimed)
        for claimed in out:
            if not claimed.dead_lettered:
                self._drop_head(claimed.execution_id)
                self._fences.set(claimed.execution_id, owner)
        return out

    def enqueue_run(
        self, execution_id: str, runner_name: str, input: Any, *, priority: int
    ) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.aenqueue_run`."""
        data = _codec.dump_json(input, "input")
        now = time.time()
        with self._write() as conn:
            cur = conn.execute(
                ENQUEUE_RUN, (execution_id, runner_name, data, now, now, int(priority))
            )
            return cur.rowcount == 1

    def start_queued_run(
        self, execution_id: str, *, owner: str, runner_kind: str, input: Any
    ) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.astart_queued_run`."""
        data = _codec.dump_json(input, "input")
        with self._write() as conn:
            cur = conn.execute(START_QUEUED, (runner_kind, data, time.time(), execution_id, owner))
            return cur.rowcount == 1

    # --- async twins (inline: SQLite calls are short local I/O) ---------------------------
    async def aacquire_run_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, steal_from: str | None
    ) -> LeaseTake:
        return self.acquire_run_lease(
            execution_id, owner=owner, lease_seconds=lease_seconds, steal_from=steal_from
        )

    async def arenew_run_leases(
        self,
        owner: str,
        execution_ids: Sequence[str],
        *,
        lease_seconds: float,
        since: float | None = None,
    ) -> int:
        return self.renew_run_leases(owner, execution_ids, lease_seconds=lease_seconds, since=since)

    async def arelease_run_lease(self, execution_id: str, *, owner: str) -> bool:
        return self.release_run_lease(execution_id, owner=owner)

    async def arelease_run_for_retry(
        self, execution_id: str, *, owner: str, retry_after_seconds: float
    ) -> bool:
        return self.release_run_for_retry(
            execution_id, owner=owner, retry_after_seconds=retry_after_seconds
        )

    async def aclaim_runs(
        self,
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
        max_attempts: int,
        runner_names: list[str] | None = None,
        runner_slots: dict[str, int] | None = None,
        exclude_execution_ids: Sequence[str] | None = None,
    ) -> list[ClaimedRun]:
        return self.claim_runs(
            owner=owner,
            limit=limit,
            lease_seconds=lease_seconds,
            max_attempts=max_attempts,
            runner_names=runner_names,
            runner_slots=runner_slots,
            exclude_execution_ids=exclude_execution_ids,
        )

    async def aenqueue_run(
        self, execution_id: str, runner_name: str, input: Any, *, priority: int
    ) -> bool:
        return self.enqueue_run(execution_id, runner_name, input, priority=priority)

    async def astart_queued_run(
        self, execution_id: str, *, owner: str, runner_kind: str, input: Any
    ) -> bool:
        return self.start_queued_run(
            execution_id, owner=owner, runner_kind=runner_kind, input=input
        )
