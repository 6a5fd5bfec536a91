"""Run leases, fencing, worker claims and the start queue on Postgres (``docs/workers.md``).

- **Fencing** costs no round trip: a leaseholder's checkpoint insert is ``INSERT … SELECT …
  WHERE EXISTS (SELECT 1 FROM runs WHERE execution_id = … AND owner = … FOR SHARE)``. The
  share lock on the run row makes a takeover (which updates ``owner``) wait for a commit in
  flight, and a commit wait for a takeover in flight and then re-check the owner, so a step is
  either committed before the new owner reads the run or refused.
- **Claims** are ``SELECT … FOR UPDATE SKIP LOCKED``: workers claiming at once each get
  different runs and never wait for each other.
- **Time** is the server's (``now()``), like claim leases.

The statements live here, next to the methods that run them, rather than in
:mod:`tether.store._postgres_sql`: they are one concern, added by schema version 2.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from ._postgres_io import Database, Plan

__all__ = ["MIGRATION_V2", "PostgresLeases"]

MIGRATION_V2: Final[tuple[str, ...]] = (
    "ALTER TABLE {schema}.runs ADD COLUMN priority integer NOT NULL DEFAULT 0",
    "ALTER TABLE {schema}.runs ADD COLUMN attempts integer NOT NULL DEFAULT 0",
    "CREATE INDEX runs_queue_idx ON {schema}.runs (status, priority DESC, created_at)",
    "CREATE INDEX runs_owner_idx ON {schema}.runs (owner) WHERE owner IS NOT NULL",
)

_LEASE: Final = "now() + %s * interval '1 second'"
# When a run's lease lapses (see _leases): at its recorded expiry; an unowned run with none is
# free; an owned one with none (written by an older tether) 30 s after its last update.
_EXPIRES: Final = (
    "COALESCE({r}lease_expires_at, CASE WHEN {r}owner IS NULL THEN '-infinity'::timestamptz "
    f"ELSE {{r}}updated_at + interval '{UNRECORDED_LEASE_SECONDS:g} seconds' END)"
)
_LAPSED: Final = _EXPIRES.format(r="") + " < now()"
SELECT_LEASE: Final = f"SELECT owner, {_LAPSED} FROM {{schema}}.runs WHERE execution_id = %s"
# One statement, so a free lease is taken in one round trip. The subquery's FOR UPDATE locks
# the run row and, when another taker holds that lock, waits for it and re-reads the row as
# it committed, so of two takers at once the second sees the first as the owner. RETURNING
# gives the owner before the take (the subquery's), which a plain UPDATE cannot.
TAKE_FREE_LEASE: Final = (
    f"UPDATE {{schema}}.runs r SET owner = %s, lease_expires_at = {_LEASE}, updated_at = now() "
    f"FROM (SELECT execution_id, owner AS previous, {_LAPSED} AS lapsed FROM {{schema}}.runs "
    "WHERE execution_id = %s FOR UPDATE) old WHERE r.execution_id = old.execution_id "
    "AND (old.previous IS NULL OR old.previous = %s OR old.previous = %s OR old.lapsed) "
    "RETURNING old.previous, " + ", ".join(f"r.{c}" for c in _codec.RUN_COLUMNS.split(", "))
)
RENEW_LEASES: Final = (
    f"UPDATE {{schema}}.runs SET lease_expires_at = {_LEASE} "
    "WHERE owner = %s AND execution_id = ANY(%s)"
)
RELEASE_LEASE: Final = (
    "UPDATE {schema}.runs SET owner = NULL, lease_expires_at = NULL, attempts = 0 "
    "WHERE execution_id = %s AND owner = %s"
)
RELEASE_FOR_RETRY: Final = (
    f"UPDATE {{schema}}.runs SET owner = NULL, lease_expires_at = {_LEASE} "
    "WHERE execution_id = %s AND owner = %s"
)
# Claimable: running with a lapsed lease; queued, or paused with an answered and unclaimed
# interrupt, and not leased to a worker about to start it (nor waiting out a retry's delay).
_CLAIMABLE: Final = (
    "SELECT r.execution_id, r.runner_name, r.status, r.input, r.owner, r.attempts "
    "FROM {schema}.runs r WHERE r.status IN ('running', 'queued', 'paused') "
    f"AND {_EXPIRES.format(r='r.')} < now() "
    "AND (r.status <> 'paused' OR EXISTS (SELECT 1 FROM {schema}.pending_interrupts p "
    "WHERE p.execution_id = r.execution_id AND p.resume_value IS NOT NULL "
    "AND (p.claimed_by IS NULL OR p.claim_expires_at < now())))"
)
_CLAIM_TAIL: Final = (
    " ORDER BY r.priority DESC, r.created_at, r.execution_id LIMIT %s FOR UPDATE OF r SKIP LOCKED"
)
# A worker passes the runs it left to workers with other code (an empty list: none).
_NOT_LEFT: Final = " AND r.execution_id <> ALL(%s)"
SELECT_CLAIMABLE: Final = _CLAIMABLE + _NOT_LEFT + _CLAIM_TAIL
SELECT_CLAIMABLE_OF: Final = _CLAIMABLE + " AND r.runner_name = ANY(%s)" + _NOT_LEFT + _CLAIM_TAIL
CLAIM_RUNS: Final = (
    f"UPDATE {{schema}}.runs SET owner = %s, lease_expires_at = {_LEASE}, "
    "attempts = attempts + 1, updated_at = now() WHERE execution_id = ANY(%s)"
)
DEAD_LETTER_RUN: Final = (
    "UPDATE {schema}.runs SET status = 'failed', error = %s, owner = NULL, "
    "lease_expires_at = NULL, updated_at = now(), finished_at = now() WHERE execution_id = %s"
)
ENQUEUE_RUN: Final = (
    f"INSERT INTO {{schema}}.runs ({_codec.RUN_COLUMNS}, priority) "
    "VALUES (%s, %s, '', 'queued', %s, NULL, NULL, NULL, NULL, NULL, now(), now(), NULL, %s) "
    "ON CONFLICT (execution_id) DO NOTHING"
)
START_QUEUED: Final = (
    "UPDATE {schema}.runs SET status = 'running', runner_kind = %s, input = %s, "
    "updated_at = now() WHERE execution_id = %s AND status = 'queued' AND owner = %s"
)


class PostgresLeases(Fencing):
    """The :class:`~tether.store._leases.LeaseStore` capability of ``PostgresCheckpointer``."""

    _db: Database
    _heads: _codec.HeadCache

    def _q(self, template: str) -> bytes:
        raise NotImplementedError

    # --- leases ---------------------------------------------------------------------------
    def _acquire_plan(
        self, eid: str, owner: str, lease_seconds: float, steal_from: str | None
    ) -> Plan[LeaseTake]:
        # Run outside a transaction: the take is atomic by itself, and the read after a
        # refused take only says who holds the lease (retried if it was freed in between).
        previous: str | None = None
        for _ in range(3):
            took = yield (
                self._q(TAKE_FREE_LEASE),
                (owner, lease_seconds, eid, owner, steal_from),
            )
            if took.rows:
                previous, *run = took.rows[0]
                return LeaseTake(True, previous, True, _codec.run_from_row(run))
            held = (yield self._q(SELECT_LEASE), (eid,)).one()
            if held is None:
                return LeaseTake(False, None, False)
            previous, lapsed = held
            if previous is not None and previous not in (owner, steal_from) and not lapsed:
                return LeaseTake(False, previous, True)
        return LeaseTake(False, previous, True)

    def _took(self, eid: str, owner: str, out: LeaseTake) -> None:
        if out.won:
            self._heads.drop(eid)
            self._fences.set(eid, owner)

    def acquire_run_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, steal_from: str | None
    ) -> LeaseTake:
        """See :meth:`tether.store._leases.LeaseStore.aacquire_run_lease`."""
        plan = self._acquire_plan(execution_id, owner, lease_seconds, steal_from)
        out = self._db.run("acquire_run_lease", plan, execution_id=execution_id)
        self._took(execution_id, owner, out)
        return out

    async def aacquire_run_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, steal_from: str | None
    ) -> LeaseTake:
        plan = self._acquire_plan(execution_id, owner, lease_seconds, steal_from)
        out = await self._db.arun("acquire_run_lease", plan, execution_id=execution_id)
        self._took(execution_id, owner, out)
        return out

    def _count_plan(self, template: str, params: Any) -> Plan[int]:
        return (yield self._q(template), params).rowcount

    def _renew_plan(
        self, owner: str, execution_ids: Sequence[str], lease_seconds: float, since: float | None
    ) -> Plan[int]:
        # Read on a connection, right before the statement: a wait for one counts.
        left = lease_left_seconds(lease_seconds, since)
        if left <= 0 or not execution_ids:
            return 0
        return (yield self._q(RENEW_LEASES), (left, owner, list(execution_ids))).rowcount

    def renew_run_leases(
        self,
        owner: str,
        execution_ids: Sequence[str],
        *,
        lease_seconds: float,
        since: float | None = None,
    ) -> int:
        """See :meth:`tether.store._leases.LeaseStore.renew_run_leases`."""
        plan = self._renew_plan(owner, execution_ids, lease_seconds, since)
        return self._db.run("renew_run_leases", plan)

    async def arenew_run_leases(
        self,
        owner: str,
        execution_ids: Sequence[str],
        *,
        lease_seconds: float,
        since: float | None = None,
    ) -> int:
        plan = self._renew_plan(owner, execution_ids, lease_seconds, since)
        return await self._db.arun("renew_run_leases", plan)

    def release_run_lease(self, execution_id: str, *, owner: str) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.arelease_run_lease`."""
        self._fences.drop(execution_id, owner)
        plan = self._count_plan(RELEASE_LEASE, (execution_id, owner))
        return self._db.run("release_run_lease", plan, execution_id=execution_id) == 1

    async def arelease_run_lease(self, execution_id: str, *, owner: str) -> bool:
        self._fences.drop(execution_id, owner)
        plan = self._count_plan(RELEASE_LEASE, (execution_id, owner))
        return await self._db.arun("release_run_lease", plan, execution_id=execution_id) == 1

    def release_run_for_retry(
        self, execution_id: str, *, owner: str, retry_after_seconds: float
    ) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.arelease_run_for_retry`."""
        self._fences.drop(execution_id, owner)
        params = (retry_after_seconds, execution_id, owner)
        plan = self._count_plan(RELEASE_FOR_RETRY, params)
        return self._db.run("release_run_for_retry", plan, execution_id=execution_id) == 1

    async def arelease_run_for_retry(
        self, execution_id: str, *, owner: str, retry_after_seconds: float
    ) -> bool:
        self._fences.drop(execution_id, owner)
        params = (retry_after_seconds, execution_id, owner)
        plan = self._count_plan(RELEASE_FOR_RETRY, params)
        return await self._db.arun("release_run_for_retry", plan, execution_id=execution_id) == 1

    # --- workers and the queue ------------------------------------------------------------
    def _claim_runs_plan(
        self,
        owner: str,
        limit: int,
        lease_seconds: float,
        max_attempts: int,
        runner_names: list[str] | None,
        runner_slots: dict[str, int] | None,
        exclude: Sequence[str] | None,
    ) -> Plan[list[ClaimedRun]]:
        slots = dict(runner_slots or {})
        fetch = limit * 4 if slots else limit
        left = list(exclude or ())
        if runner_names is None:
            res = yield self._q(SELECT_CLAIMABLE), (left, fetch)
        else:
            res = yield self._q(SELECT_CLAIMABLE_OF), (runner_names, left, fetch)
        out: list[ClaimedRun] = []
        for eid, name, status, raw_input, previous, attempts in res.rows:
            if len(out) >= limit:
                break
            if name in slots:
                if slots[name] <= 0:
                    continue
                slots[name] -= 1
            claimed = ClaimedRun(eid, name, status, _codec.load_json(raw_input), previous)
            claimed.attempts = attempts + 1
            if attempts >= max_attempts:
                claimed.attempts = attempts
                claimed.dead_lettered = True
                yield self._q(DEAD_LETTER_RUN), (dead_letter_reason(attempts, previous), eid)
            out.append(claimed)
        ids = [c.execution_id for c in out if not c.dead_lettered]
        if ids:
            yield self._q(CLAIM_RUNS), (owner, lease_seconds, ids)
        return out

    def _runs_claimed(self, owner: str, out: list[ClaimedRun]) -> list[ClaimedRun]:
        for claimed in out:
            if not claimed.dead_lettered:
                self._heads.drop(claimed.execution_id)
                self._fences.set(claimed.execution_id, owner)
        return out

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
        if limit <= 0 or runner_names == []:
            return []
        plan = self._claim_runs_plan(
            owner,
            limit,
            lease_seconds,
            max_attempts,
            runner_names,
            runner_slots,
            exclude_execution_ids,
        )
        return self._runs_claimed(owner, self._db.run("claim_runs", plan, write=True))

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
        if limit <= 0 or runner_names == []:
            return []
        plan = self._claim_runs_plan(
            owner,
            limit,
            lease_seconds,
            max_attempts,
            runner_names,
            runner_slots,
            exclude_execution_ids,
        )
        return self._runs_claimed(owner, await self._db.arun("claim_runs", plan, write=True))

    def enqueue_run(
        self, execution_id: str, runner_name: str, input: Any, *, priority: int
    ) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.aenqueue_run`."""
        params = (execution_id, runner_name, _codec.dump_json(input, "input"), int(priority))
        plan = self._count_plan(ENQUEUE_RUN, params)
        return self._db.run("enqueue_run", plan, execution_id=execution_id) == 1

    async def aenqueue_run(
        self, execution_id: str, runner_name: str, input: Any, *, priority: int
    ) -> bool:
        params = (execution_id, runner_name, _codec.dump_json(input, "input"), int(priority))
        plan = self._count_plan(ENQUEUE_RUN, params)
        return await self._db.arun("enqueue_run", plan, execution_id=execution_id) == 1

    def start_queued_run(
        self, execution_id: str, *, owner: str, runner_kind: str, input: Any
    ) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.astart_queued_run`."""
        params = (runner_kind, _codec.dump_json(input, "input"), execution_id, owner)
        plan = self._count_plan(START_QUEUED, params)
        return self._db.run("start_queued_run", plan, execution_id=execution_id) == 1

    async def astart_queued_run(
        self, execution_id: str, *, owner: str, runner_kind: str, input: Any
    ) -> bool:
        params = (runner_kind, _codec.dump_json(input, "input"), execution_id, owner)
        plan = self._count_plan(START_QUEUED, params)
        return await self._db.arun("start_queued_run", plan, execution_id=execution_id) == 1
