"""Run leases, worker claims and the start queue, written once for both SQL backends.

The :class:`~tether.store._leases.LeaseStore` capability as plans (:mod:`._plans`) over the
statements each backend's SQL module names alike (``TAKE_LEASE``, ``SELECT_CLAIMABLE``...), and
the public methods that run them, sync and async. The rules (when a lease lapses, fencing, dead
letters) are :mod:`tether.store._leases`'s; ``docs/workers.md`` tells them to users.

On Postgres a worker's claim is ``SELECT … FOR UPDATE SKIP LOCKED`` (workers claiming at once
each get different runs); on SQLite the plan's write lock (``BEGIN IMMEDIATE``) serialises
claimers: exact for processes on one machine, wrong across machines (use Postgres there).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Sequence
from typing import Any, Required, TypedDict, Unpack

from . import _codec
from ._leases import ClaimedRun, Fencing, LeaseTake, dead_letter_reason, lease_left_seconds
from ._operations import StoreOperations
from ._plans import Plan, last

__all__ = ["LeaseOperations"]


class _ClaimRunsOptions(TypedDict, total=False):
    owner: Required[str]
    limit: Required[int]
    lease_seconds: Required[float]
    max_attempts: Required[int]
    runner_names: builtins.list[str] | None
    runner_slots: dict[str, int] | None
    exclude_execution_ids: Sequence[str] | None
    app_versions: Sequence[str] | None


class LeaseOperations(Fencing, StoreOperations):
    """The lease capability of a SQL checkpointer (its ``_db``, ``_sql``, ``_heads`` and
    ``_fences`` as :class:`~._operations.StoreOperations` has them)."""

    # --- plans ----------------------------------------------------------------------------
    def _acquire_plan(
        self, execution_id: str, owner: str, lease_seconds: float, steal_from: str | None
    ) -> Plan[LeaseTake]:
        # Each statement on its own (no transaction): the take is a compare-and-set on the
        # owner seen, so a take between the read and the write makes the write match nothing
        # and the loop read again. The first try assumes the run is free (the usual resume):
        # one statement.
        sql, of_run = self._sql, {"execution_id": execution_id}
        take = {**of_run, "owner": owner, "lease_seconds": float(lease_seconds)}
        previous: str | None = None
        for _ in range(3):
            params = {**take, "steal_from": steal_from, "previous": previous}
            took = (yield sql.TAKE_LEASE, params).one()
            if took is not None:
                return LeaseTake(True, previous, True, _codec.run_from_row(took))
            held = (yield sql.SELECT_LEASE, dict(of_run)).one()
            if held is None:
                return LeaseTake(False, None, False)
            previous, lapsed = held
            if previous is not None and previous not in (owner, steal_from) and not lapsed:
                return LeaseTake(False, previous, True)
        return LeaseTake(False, previous, True)

    def _renew_plan(
        self, owner: str, execution_ids: Sequence[str], lease_seconds: float, since: float | None
    ) -> Plan[int]:
        # Read once a connection is in hand (Postgres) and written as an absolute deadline
        # (SQLite, where the wait is for the write lock): a wait for either counts.
        left = lease_left_seconds(lease_seconds, since)
        if left <= 0 or not execution_ids:
            return 0
        params = {"owner": owner, "ids": list(execution_ids), "left": left}
        params["deadline"] = time.time() + left
        return (yield last(self._sql.RENEW_LEASES, params)).rowcount

    def _release_plan_of(self, query: Any, params: dict[str, Any]) -> Plan[bool]:
        return (yield last(query, params)).rowcount == 1

    def _claim_runs_plan(self, options: _ClaimRunsOptions) -> Plan[builtins.list[ClaimedRun]]:
        sql, names = self._sql, options.get("runner_names")
        owner, limit, max_attempts = options["owner"], options["limit"], options["max_attempts"]
        slots = dict(options.get("runner_slots") or {})
        versions = options.get("app_versions")
        params = {
            "exclude": list(options.get("exclude_execution_ids") or ()),
            "runner_names": names,
            "serve_all": versions is None,  # else its versions and unversioned runs
            "app_versions": list(versions or ()),
            "limit": limit * 4 if slots else limit,
        }
        query = sql.SELECT_CLAIMABLE if names is None else sql.SELECT_CLAIMABLE_OF
        out: builtins.list[ClaimedRun] = []
        for eid, name, status, raw_input, previous, attempts in (yield query, params).rows:
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
                error = dead_letter_reason(attempts, previous)
                yield sql.DEAD_LETTER_RUN, {"error": error, "execution_id": eid}
            out.append(claimed)
        ids = [c.execution_id for c in out if not c.dead_lettered]
        if ids:
            lease = {"owner": owner, "lease_seconds": float(options["lease_seconds"]), "ids": ids}
            yield sql.CLAIM_RUNS, lease
        return out

    def _enqueue_plan(
        self, execution_id: str, runner_name: str, input: Any, queued: _Queued
    ) -> Plan[bool]:
        params: dict[str, Any] = {"execution_id": execution_id, "runner_name": runner_name}
        params.update(input=_codec.dump_json(input, "input"), priority=int(queued["priority"]))
        params["app_version"] = queued.get("app_version")
        return (yield last(self._sql.ENQUEUE_RUN, params)).rowcount == 1

    def _start_queued_plan(self, execution_id: str, start: _Start) -> Plan[bool]:
        params: dict[str, Any] = {"execution_id": execution_id, "owner": start["owner"]}
        params.update(
            runner_kind=start["runner_kind"], input=_codec.dump_json(start["input"], "input")
        )
        params["app_version"] = start.get("app_version")
        return (yield last(self._sql.START_QUEUED, params)).rowcount == 1

    # --- what a won take or claim changes in memory -----------------------------------------
    def _took(self, execution_id: str, owner: str, out: LeaseTake) -> LeaseTake:
        if out.won:
            self._heads.drop(execution_id)
            self._fences.set(execution_id, owner)
        return out

    def _runs_claimed(
        self, owner: str, out: builtins.list[ClaimedRun]
    ) -> builtins.list[ClaimedRun]:
        for claimed in out:
            if not claimed.dead_lettered:
                self._heads.drop(claimed.execution_id)
                self._fences.set(claimed.execution_id, owner)
        return out

    # --- public methods ---------------------------------------------------------------------
    def acquire_run_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, steal_from: str | None
    ) -> LeaseTake:
        """See :meth:`tether.store._leases.LeaseStore.aacquire_run_lease`."""
        plan = self._acquire_plan(execution_id, owner, lease_seconds, steal_from)
        out = self._db.run("acquire_run_lease", plan, write="each", execution_id=execution_id)
        return self._took(execution_id, owner, out)

    async def aacquire_run_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, steal_from: str | None
    ) -> LeaseTake:
        plan = self._acquire_plan(execution_id, owner, lease_seconds, steal_from)
        out = await self._db.arun(
            "acquire_run_lease", plan, write="each", execution_id=execution_id
        )
        return self._took(execution_id, owner, out)

    def renew_run_leases(
        self, owner: str, execution_ids: Sequence[str], **period: Unpack[_Period]
    ) -> int:
        """See :meth:`tether.store._leases.LeaseStore.renew_run_leases`."""
        plan = self._renew_plan(owner, execution_ids, period["lease_seconds"], period.get("since"))
        return self._db.run("renew_run_leases", plan, write=True)

    async def arenew_run_leases(
        self, owner: str, execution_ids: Sequence[str], **period: Unpack[_Period]
    ) -> int:
        plan = self._renew_plan(owner, execution_ids, period["lease_seconds"], period.get("since"))
        return await self._db.arun("renew_run_leases", plan, write=True)

    def release_run_lease(self, execution_id: str, *, owner: str) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.arelease_run_lease`."""
        plan = self._release_lease(execution_id, owner)
        return self._db.run("release_run_lease", plan, write=True, execution_id=execution_id)

    async def arelease_run_lease(self, execution_id: str, *, owner: str) -> bool:
        plan = self._release_lease(execution_id, owner)
        return await self._db.arun("release_run_lease", plan, write=True)

    def _release_lease(self, execution_id: str, owner: str) -> Plan[bool]:
        self._fences.drop(execution_id, owner)
        params = {"execution_id": execution_id, "owner": owner}
        return self._release_plan_of(self._sql.RELEASE_LEASE, params)

    def release_run_for_retry(
        self, execution_id: str, *, owner: str, retry_after_seconds: float
    ) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.arelease_run_for_retry`."""
        plan = self._release_for_retry(execution_id, owner, retry_after_seconds)
        return self._db.run("release_run_for_retry", plan, write=True, execution_id=execution_id)

    async def arelease_run_for_retry(
        self, execution_id: str, *, owner: str, retry_after_seconds: float
    ) -> bool:
        plan = self._release_for_retry(execution_id, owner, retry_after_seconds)
        return await self._db.arun("release_run_for_retry", plan, write=True)

    def _release_for_retry(self, execution_id: str, owner: str, after: float) -> Plan[bool]:
        self._fences.drop(execution_id, owner)
        params = {"execution_id": execution_id, "owner": owner, "retry_after_seconds": after}
        return self._release_plan_of(self._sql.RELEASE_FOR_RETRY, params)

    def claim_runs(self, **claim: Unpack[_ClaimRunsOptions]) -> builtins.list[ClaimedRun]:
        """See :meth:`tether.store._leases.LeaseStore.aclaim_runs`."""
        if claim["limit"] <= 0 or claim.get("runner_names") == []:
            return []
        out = self._db.run("claim_runs", self._claim_runs_plan(claim), write=True)
        return self._runs_claimed(claim["owner"], out)

    async def aclaim_runs(self, **claim: Unpack[_ClaimRunsOptions]) -> builtins.list[ClaimedRun]:
        if claim["limit"] <= 0 or claim.get("runner_names") == []:
            return []
        out = await self._db.arun("claim_runs", self._claim_runs_plan(claim), write=True)
        return self._runs_claimed(claim["owner"], out)

    def enqueue_run(
        self, execution_id: str, runner_name: str, input: Any, **queued: Unpack[_Queued]
    ) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.aenqueue_run`."""
        plan = self._enqueue_plan(execution_id, runner_name, input, queued)
        return self._db.run("enqueue_run", plan, write=True, execution_id=execution_id)

    async def aenqueue_run(
        self, execution_id: str, runner_name: str, input: Any, **queued: Unpack[_Queued]
    ) -> bool:
        plan = self._enqueue_plan(execution_id, runner_name, input, queued)
        return await self._db.arun("enqueue_run", plan, write=True, execution_id=execution_id)

    def start_queued_run(self, execution_id: str, **start: Unpack[_Start]) -> bool:
        """See :meth:`tether.store._leases.LeaseStore.astart_queued_run`."""
        plan = self._start_queued_plan(execution_id, start)
        return self._db.run("start_queued_run", plan, write=True, execution_id=execution_id)

    async def astart_queued_run(self, execution_id: str, **start: Unpack[_Start]) -> bool:
        plan = self._start_queued_plan(execution_id, start)
        return await self._db.arun("start_queued_run", plan, write=True)


class _Period(TypedDict, total=False):
    lease_seconds: Required[float]
    since: float | None


class _Queued(TypedDict, total=False):
    priority: Required[int]
    app_version: str | None


class _Start(TypedDict, total=False):
    owner: Required[str]
    runner_kind: Required[str]
    input: Required[Any]
    app_version: str | None
