"""Every store operation, written once as a plan that runs on SQLite and on Postgres.

A plan (:mod:`tether.store._plans`) names its statements by their constant's name in the
backend's SQL module (``self._sql.INSERT_RUN``) and passes named parameters, so the same
generator runs on either backend; the driver (``self._db``) runs it synchronously or on an
event loop. What differs between the backends is said in SQL only: the clock (SQLite's
``:now``, Postgres's ``now()``), how a list is bound, and whether two tables change in one
statement (a Postgres CTE) or in a **script** (a tuple of statements, the later ones run only
when the first touched a row: :meth:`StoreOperations._script`).

The rules every plan keeps (docs/storage.md): a step is one transaction; the writer head
(:class:`~tether.store._heads.HeadCache`) spares the step path a read, and a stale head
shows up as a unique violation on ``(execution_id, seq)`` (:func:`~._refusals.step_taken`);
a leaseholder's insert is fenced (:func:`~._refusals.lease_lost`).
"""

from __future__ import annotations

import builtins
import datetime as _dt
import time
from typing import Any, Protocol, TypeVar

from ..audit import AuditEntry
from ..checkpoint import Checkpoint
from ..errors import CorruptRecordError
from . import _codec, _listing
from ._audit_codec import audit_named_params
from ._heads import HeadCache
from ._leases import Fences, creation_lease_seconds
from ._plans import Plan, Result, StepInsert, Write, last
from ._refusals import claim_taken_over, lease_lost, run_exists, step_taken
from ._rows import CP, STEP_FIELDS
from .base import PendingInterrupt, PruneResult, RunRecord, RunStatus

__all__ = ["Driver", "StoreOperations"]

T = TypeVar("T")

_NO_SEQ = 2**62  # "below any seq" for SELECT_LAST_PATH without before_seq


class Driver(Protocol):
    """How a backend runs a plan: :class:`~._sqlite_io.SQLiteDatabase`,
    :class:`~._postgres_io.Database`."""

    def run(
        self, op: str, plan: Plan[T], *, write: Write = False, execution_id: str | None = None
    ) -> T:
        """Run ``plan`` now (in one transaction when ``write``)."""

    async def arun(
        self, op: str, plan: Plan[T], *, write: Write = False, execution_id: str | None = None
    ) -> T:
        """Async :meth:`run`."""

    def unique_key(self, exc: BaseException) -> str | None:
        """The unique key ``exc`` says was violated, as the database names it; else ``None``."""


class StoreOperations:
    """The plans of a SQL checkpointer. A backend sets ``_db``, ``_sql`` (its statements by
    name, ready for its driver), ``_heads``, ``_fences`` and ``compress_state_min_bytes``."""

    _db: Driver
    _sql: Any
    _heads: HeadCache
    _fences: Fences
    compress_state_min_bytes: int | None

    # --- small plans ----------------------------------------------------------------------
    def _one(self, query: Any, params: Any) -> Plan[tuple[Any, ...] | None]:
        return (yield query, params).one()

    def _all(self, query: Any, params: Any) -> Plan[builtins.list[tuple[Any, ...]]]:
        return (yield query, params).rows

    def _count(self, query: Any, params: Any, *, final: bool = False) -> Plan[int]:
        return (yield last(query, params) if final else (query, params)).rowcount

    def _script(self, script: tuple[Any, ...], params: Any, *, final: bool = False) -> Plan[Result]:
        """Run a script's first statement; the others only when it touched a row. ``final``:
        the script ends its plan (a one-statement script then runs alone)."""
        first = yield (
            last(script[0], params) if final and len(script) == 1 else (script[0], params)
        )
        if first.rows or first.rowcount > 0:
            for query in script[1:]:
                yield query, params
        return first

    # --- runs -----------------------------------------------------------------------------
    def _create_run_plan(self, run: RunRecord, lease_seconds: float | None) -> Plan[RunRecord]:
        params = {
            "execution_id": run.execution_id,
            "runner_name": run.runner_name,
            "runner_kind": run.runner_kind,
            "status": run.status,
            "input": _codec.dump_json(run.input, "input"),
            "parent_execution_id": run.parent_execution_id,
            "parent_checkpoint_id": run.parent_checkpoint_id,
            "owner": run.owner,
            "lease_seconds": creation_lease_seconds(run, lease_seconds),  # refused before I/O
            "app_version": run.app_version,
        }
        try:
            res = yield last(self._sql.INSERT_RUN, params)
        except Exception as exc:
            if self._db.unique_key(exc) != self._sql.RUN_KEY:
                raise  # a constraint of the operator's: rejected, by the rule
            raise run_exists(run.execution_id) from exc
        created, expires = res.rows[0]
        run.created_at = run.updated_at = _codec.ts_to_dt(created)
        run.lease_expires_at = _codec.ts_to_dt(expires)
        return run

    def _get_run_plan(self, execution_id: str) -> Plan[RunRecord | None]:
        row = yield from self._one(self._sql.SELECT_RUN, {"execution_id": execution_id})
        return None if row is None else _listing.read_run(row)

    def _status_plan(self, execution_id: str, status: RunStatus, error: str | None) -> Plan[int]:
        params = {"run_status": status, "error": error, "execution_id": execution_id}
        return (yield from self._count(self._sql.UPDATE_RUN_STATUS, params, final=True))

    # --- checkpoints ----------------------------------------------------------------------
    def _raw_state_plan(self, row: tuple[Any, ...]) -> Plan[dict[str, Any]]:
        eid, seq = row[CP.execution_id], row[CP.seq]
        if row[CP.state_kind] == "full":
            return _codec.apply_row_of(eid, seq, {}, "full", row[CP.state])
        bounds = {"execution_id": eid, "low": row[CP.base_seq], "high": seq}
        chain = (yield self._sql.SELECT_STATE_CHAIN, bounds).rows
        _codec.check_state_chain(eid, chain, bounds["low"], seq)
        return _codec.replay_state(chain, eid)

    def _with_state_plan(self, row: tuple[Any, ...]) -> Plan[Checkpoint]:
        raw = yield from self._raw_state_plan(row)
        return _codec.checkpoint_from_row(row, _codec.decode_state(raw))

    def _head_plan(self, execution_id: str) -> Plan[_codec.Head | None]:
        head = self._heads.get(execution_id)
        if head is not None:
            return head
        row = yield from self._one(self._sql.SELECT_LAST, {"execution_id": execution_id})
        if row is None:
            return None
        raw = yield from self._raw_state_plan(row)
        return _head_of(row, raw)

    def _insert_plan(
        self,
        cp: Checkpoint,
        *,
        force_full: bool = False,
        run_status: RunStatus | None = None,
        error: str | None = None,
        final: bool = False,
        release_lease_of: str | None = None,
    ) -> Plan[_codec.Head]:
        """Insert ``cp``: fenced when this instance holds the run's lease, setting the run's
        status with it when ``run_status`` is given (and giving ``release_lease_of``'s lease
        back); ``final`` when it ends the plan (see :func:`~._plans.last`)."""
        head = self._heads.get(cp.execution_id)  # the usual step: known, no generator to run
        if head is None:
            head = yield from self._head_plan(cp.execution_id)
        values, new_head = _codec.checkpoint_params(
            cp, head, force_full=force_full, compress_min_bytes=self.compress_state_min_bytes
        )
        # created_at: the database's clock where the insert returns it (Postgres' now()),
        # else this one, sent as :now (SQLite: a RETURNING clause makes its insert cost about
        # a third more instructions, for a value this process already has).
        now = time.time()
        sql = self._sql
        owner = self._fences.get(cp.execution_id)
        try:
            if final and run_status is None:
                # The usual step, sent without a params dict or a sub-plan: a driver binds its
                # row as it likes, or shares a statement with other runs' steps.
                fenced = (cp.execution_id, owner) if owner is not None else (None, None)
                query = sql.INSERT_CHECKPOINT if owner is None else sql.INSERT_CHECKPOINT_FENCED
                res = yield StepInsert(query, (*values, *fenced), now)  # type: ignore[misc]
            else:
                params: dict[str, Any] = dict(zip(STEP_FIELDS, values, strict=True))
                params.update(now=now, owner=owner)
                if run_status is None:
                    script = (
                        sql.INSERT_CHECKPOINT if owner is None else sql.INSERT_CHECKPOINT_FENCED,
                    )
                else:
                    # run_status, not status: that name is the checkpoint's own column
                    params.update(
                        run_status=run_status, error=error, release_lease_of=release_lease_of
                    )
                    script = (
                        sql.INSERT_CHECKPOINT_SET_STATUS
                        if owner is None
                        else sql.INSERT_CHECKPOINT_FENCED_SET_STATUS
                    )
                res = yield from self._script(script, params, final=final)
        except Exception as exc:
            if self._db.unique_key(exc) != sql.STEP_KEY:
                raise  # a constraint of the operator's: rejected, by the rule
            self._heads.drop(cp.execution_id)
            raise step_taken(cp) from exc
        if res.rows:
            cp.created_at = _codec.ts_to_dt(res.rows[0][0])
        elif res.rowcount == 1:  # an insert that returns nothing (SQLite's)
            cp.created_at = _dt.datetime.fromtimestamp(now, _dt.UTC)
        else:  # the fenced insert found the lease gone
            self._heads.drop(cp.execution_id)
            raise lease_lost(owner, cp)
        return new_head

    def _release_plan(self, execution_id: str, owner: str) -> Plan[None]:
        params = {"execution_id": execution_id, "owner": owner}
        if (yield self._sql.DELETE_PENDING_OF, params).rowcount != 1:
            self._heads.drop(execution_id)
            raise claim_taken_over(execution_id)

    def _put_plan(
        self,
        cp: Checkpoint,
        run_status: RunStatus | None,
        error: str | None,
        release_claim_of: str | None,
        force_full: bool,
        release_lease_of: str | None,
    ) -> Plan[_codec.Head]:
        # Usually the insert is the whole plan, so the step commits in one round trip.
        if release_claim_of is not None:
            yield from self._release_plan(cp.execution_id, release_claim_of)
        if run_status is None:
            release_lease_of = None  # only the status update carries the release
        head = yield from self._insert_plan(
            cp,
            force_full=force_full,
            run_status=run_status,
            error=error,
            final=True,
            release_lease_of=release_lease_of,
        )
        if release_lease_of is not None:
            self._fences.drop(cp.execution_id, release_lease_of)
        return head

    def _interrupt_plan(
        self, cp: Checkpoint, release_claim_of: str | None, release_lease_of: str | None
    ) -> Plan[tuple[PendingInterrupt, _codec.Head]]:
        context = _codec.dump_json(cp.interrupt_context, "interrupt_context")
        due_seconds = _codec.pending_due_seconds(cp)
        eid, sql = cp.execution_id, self._sql
        if release_claim_of is not None:
            yield from self._release_plan(eid, release_claim_of)
        else:
            yield sql.DELETE_PENDING, {"execution_id": eid}
        head = yield from self._insert_plan(cp)
        pending = PendingInterrupt(
            execution_id=eid,
            checkpoint_id=cp.checkpoint_id,
            node_id=cp.node_id,
            reason=cp.interrupt_reason or "",
            context=cp.interrupt_context,
            agent_path=cp.agent_path,
        )
        params = {
            "execution_id": eid,
            "checkpoint_id": pending.checkpoint_id,
            "node_id": pending.node_id,
            "agent_path": pending.agent_path,
            "reason": pending.reason,
            "context": context,
            "due_seconds": due_seconds,
        }
        created = (yield sql.INSERT_PENDING, params).rows[0][0]
        pending.created_at = _codec.ts_to_dt(created)
        pending.due_at = _codec.due_at(created, due_seconds)
        paused = {"run_status": "paused", "error": None, "release_lease_of": release_lease_of}
        yield sql.UPDATE_RUN_STATUS_GIVE_BACK, {**paused, "execution_id": eid}
        if release_lease_of is not None:
            self._fences.drop(eid, release_lease_of)
        return pending, head

    def _last_plan(
        self, execution_id: str, before_seq: int | None, agent_path_prefix: str | None
    ) -> Plan[tuple[Checkpoint | None, _codec.Head | None]]:
        sql = self._sql
        params: dict[str, Any] = {"execution_id": execution_id, "before_seq": before_seq}
        if agent_path_prefix is not None:
            path = agent_path_prefix.rstrip("/")
            params.update(path=path, prefix=path + "/")
            params["before_seq"] = _NO_SEQ if before_seq is None else before_seq
            row = yield from self._one(sql.SELECT_LAST_PATH, params)
        elif before_seq is not None:
            row = yield from self._one(sql.SELECT_LAST_BEFORE, params)
        else:
            row = yield from self._one(sql.SELECT_LAST, params)
        if row is None:
            return None, None
        raw = yield from self._raw_state_plan(row)
        cp = _codec.checkpoint_from_row(row, _codec.decode_state(raw))
        if agent_path_prefix is not None or before_seq is not None:
            return cp, None
        # Whoever reads a run's newest row is about to continue it: refresh the writer's
        # head, which another process may have moved on.
        return cp, _head_of(row, raw)

    def _resumable_plan(
        self, execution_id: str
    ) -> Plan[tuple[Checkpoint | None, str | None, _codec.Head | None]]:
        sql, of_run = self._sql, {"execution_id": execution_id}
        rows = (yield sql.SELECT_NEWEST_TWO, dict(of_run)).rows
        if not rows:
            return None, None, None
        if _codec.resumable_lies_further_back(rows):  # run-end markers one after another
            before = {**of_run, "before_seq": min(r[CP.seq] for r in rows)}
            rows += (yield sql.SELECT_RESUMABLE_BEFORE, before).rows
        low, high = _codec.state_chain_bounds(rows)
        chain = (yield sql.SELECT_STATE_CHAIN, {**of_run, "low": low, "high": high}).rows
        return _codec.resume_point(rows, chain)

    def _checkpoint_plan(self, execution_id: str, checkpoint_id: str) -> Plan[Checkpoint | None]:
        params = {"execution_id": execution_id, "checkpoint_id": checkpoint_id}
        row = yield from self._one(self._sql.SELECT_BY_ID, params)
        return None if row is None else (yield from self._with_state_plan(row))

    def _list_plan(
        self, execution_id: str, agent_path_prefix: str | None
    ) -> Plan[builtins.list[Checkpoint]]:
        rows = yield from self._all(self._sql.SELECT_ALL, {"execution_id": execution_id})
        return _codec.checkpoints_from_rows(rows, agent_path_prefix)

    def _readable_plan(
        self, execution_id: str
    ) -> Plan[tuple[builtins.list[Checkpoint], CorruptRecordError | None]]:
        rows = yield from self._all(self._sql.SELECT_ALL, {"execution_id": execution_id})
        return _codec.readable_checkpoints(rows)

    # --- pending interrupts ---------------------------------------------------------------
    def _pending_plan(self, execution_id: str) -> Plan[PendingInterrupt | None]:
        row = yield from self._one(self._sql.SELECT_PENDING, {"execution_id": execution_id})
        return None if row is None else _codec.pending_from_row(row)

    def _claim_plan(
        self,
        execution_id: str,
        owner: str,
        resume_value: dict[str, Any] | None,
        lease_seconds: float,
        steal_from: str | None,
        checkpoint_id: str | None,
        audit: AuditEntry | None,
    ) -> Plan[PendingInterrupt | None]:
        params = {
            "owner": owner,
            "lease_seconds": float(lease_seconds),
            "value": _codec.dump_json(resume_value, "resume_value"),
            "execution_id": execution_id,
            "steal_from": steal_from,
            "checkpoint_id": checkpoint_id,
        }
        script = self._sql.CLAIM_PENDING
        if audit is not None and resume_value is not None:  # the claim stores the answer
            script = self._sql.CLAIM_PENDING_AUDITED
            params.update(audit_named_params(audit))
        row = (yield from self._script(script, params, final=True)).one()
        return None if row is None else _codec.pending_from_row(row)

    def _renew_claim_plan(self, execution_id: str, owner: str, lease_seconds: float) -> Plan[bool]:
        params = {"lease_seconds": float(lease_seconds), "execution_id": execution_id}
        query = self._sql.RENEW_CLAIM
        return (yield from self._count(query, {**params, "owner": owner}, final=True)) == 1

    def _release_claim_plan(self, execution_id: str, owner: str) -> Plan[bool]:
        params = {"execution_id": execution_id, "owner": owner}
        return bool((yield from self._script(self._sql.RELEASE_CLAIM, params, final=True)).rows)

    def _answer_plan(
        self,
        execution_id: str,
        resume_value: dict[str, Any],
        checkpoint_id: str | None,
        audit: AuditEntry | None,
    ) -> Plan[bool]:
        params = {
            "value": _codec.dump_json(resume_value, "resume_value"),
            "execution_id": execution_id,
            "checkpoint_id": checkpoint_id,
            **audit_named_params(audit),  # appended with the answer, only if it is stored
        }
        return bool((yield from self._script(self._sql.ANSWER_PENDING, params, final=True)).rows)

    # --- idempotency ----------------------------------------------------------------------
    def _get_idempotent_plan(self, execution_id: str, key: str) -> Plan[tuple[bool, Any]]:
        params = {"execution_id": execution_id, "key": key}
        row = yield from self._one(self._sql.SELECT_IDEMPOTENT, params)
        return (
            (False, None) if row is None else (True, _codec.load_cached(execution_id, key, row[0]))
        )

    def _put_idempotent_plan(self, execution_id: str, key: str, value: Any) -> Plan[Any]:
        params = {"execution_id": execution_id, "key": key}
        yield self._sql.INSERT_IDEMPOTENT, {**params, "value": _codec.dump_json(value, "result")}
        # A second statement sees a row another writer committed first (READ COMMITTED).
        row = yield from self._one(self._sql.SELECT_IDEMPOTENT, params)
        return None if row is None else _codec.load_cached(execution_id, key, row[0])

    def _list_idempotent_plan(self, execution_id: str) -> Plan[dict[str, Any]]:
        rows = yield from self._all(self._sql.SELECT_IDEMPOTENT_ALL, {"execution_id": execution_id})
        return {k: _codec.load_cached(execution_id, k, v) for k, v in rows}

    # --- maintenance ----------------------------------------------------------------------
    def _prune_plan(self, cutoff: float, dry_run: bool) -> Plan[PruneResult]:
        sql, prune = self._sql, self._sql.REMOVE
        query = prune.select_prunable if dry_run else sql.LOCK_PRUNABLE
        ids = [eid for (eid,) in (yield from self._all(query, {"cutoff": cutoff}))]
        result = PruneResult(runs=len(ids), execution_ids=ids)
        if not ids:
            return result
        of = {"ids": ids}
        if dry_run:
            result.checkpoints = (yield prune.count_checkpoints, of).rows[0][0]
            result.idempotency = (yield prune.count_idempotent, of).rows[0][0]
            return result
        result.checkpoints = yield from self._count(prune.delete_checkpoints, of)
        result.idempotency = yield from self._count(prune.delete_idempotent, of)
        yield prune.delete_pending, of
        for query in sql.DELETE_LANGGRAPH_OF_RUNS:  # read the runs' kind: before they go
            yield query, of
        yield prune.delete_audit, of
        yield prune.delete_runs, of
        return result


def _head_of(row: tuple[Any, ...], raw: dict[str, Any]) -> _codec.Head:
    """The writer head after ``row`` (a run's newest), whose replayed state is ``raw``."""
    seq, base_seq = row[CP.seq], row[CP.base_seq]
    return _codec.head_from_raw(seq, base_seq, raw, seq - base_seq)
