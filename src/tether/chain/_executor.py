"""The chain executor: runs nodes, writes one checkpoint per node, pauses and resumes."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _trace, serde
from .._context import RunContext, current_run, run_scope
from .._faults import ARMED, fault
from .._renames import current_name
from .._timeouts import Deadline
from ..checkpoint import Checkpoint, new_id
from ..engine import lease, rows
from ..engine.claim import claim, claim_heartbeat
from ..engine.fork import ForkPoint, leased_fork
from ..engine.nesting import (
    OUTER_KEY,
    ChildPaused,
    check_reentry,
    claim_reentry,
    fork_source,
    outer_frame,
)
from ..errors import (
    ConfigurationError,
    InterruptSignal,
    MissingStepError,
    SerializationError,
    StoreError,
)
from ..interrupt import Answer, InterruptScope, interrupt_scope
from ..result import ChainResult
from ..store.base import RunRecord
from . import _repair

if TYPE_CHECKING:
    from ..engine.nesting import ReEntry
    from ..store.base import Checkpointer
    from .graph import Chain


@dataclass(slots=True)
class _Cursor:
    """Where a drive starts: the node, the state it sees, and what the run carries along."""

    node_id: str | None
    state: dict[str, Any]
    counters: dict[str, int] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)
    claim_owner: str | None = None
    reentry: ReEntry | None = None  # a row inside the first node, a runner node


def _check_input(input: Any) -> dict[str, Any]:
    if input is None:
        return {}
    if not isinstance(input, dict):
        raise ConfigurationError(f"a chain's input is a dict of state, got {type(input).__name__}")
    return dict(input)


@lease.leased_start
async def start(chain: Chain, input: Any, execution_id: str | None) -> ChainResult:
    if chain.entry is None:
        raise ConfigurationError(f"chain {chain.name!r} has no nodes")
    state = _check_input(input)
    serde.dumps(state, "input")  # refuse a bad input before a run exists
    store = chain.checkpointer
    eid = execution_id or new_id()
    await lease.acreate_run(
        store, RunRecord(eid, chain.name, chain.kind, status="running", input=state)
    )
    return await _drive(chain, store, eid, _Cursor(chain.entry, state))


@lease.leased_resume
async def resume(
    chain: Chain,
    execution_id: str,
    resume_value: Any,
    agent_path: str | None = None,
    state_updates: Any = None,
) -> ChainResult:
    store = chain.checkpointer
    updates = None if state_updates is None else _repair.check_updates(execution_id, state_updates)
    value, run, cp = await rows.resume_point(store, execution_id, chain.name, resume_value)
    if updates is not None:
        _repair.refuse_unpatchable(
            execution_id, cp, answered=value is not None, agent_path=agent_path
        )
        if cp is not None:
            _check_graph(chain, cp.next_node_id, cp)
        at = await _repair.apatch(chain, store, run, cp, updates)
        return await _drive(chain, store, execution_id, _Cursor(at.node_id, at.state, at.counters))
    if cp is not None and (agent_path is not None or cp.agent_path is not None):
        reentry = await claim_reentry(
            store, cp, value, agent_path, lease_seconds=chain.claim_lease_seconds, runner=chain
        )
        frame = reentry.frame("chain", chain.name)
        cursor = _Cursor(
            _now(chain, frame["node_id"]), frame["state"], _counters(chain, frame["counters"])
        )
        cursor.reentry = reentry.deeper()
        return await _drive(chain, store, execution_id, cursor)
    if cp is None:  # crashed before its first node committed
        input = await rows.restart_input(store, run, value)
        return await _drive(chain, store, execution_id, _Cursor(chain.entry, dict(input or {})))
    at = _now(chain, cp.node_id if cp.status == "interrupted" else cp.next_node_id)
    _check_graph(chain, at, cp)
    counters = _counters(chain, cp.iteration_counters)
    if cp.status == "interrupted":
        answers, owner = await claim(store, cp, value, lease_seconds=chain.claim_lease_seconds)
        fault("chain.after_claim")
        cursor = _Cursor(at, cp.state_snapshot, counters, answers, owner)
        return await _drive(chain, store, execution_id, cursor)
    if value is not None:
        raise rows.not_paused(cp)
    await lease.mark_running(store, execution_id, run.status)
    cursor = _Cursor(at, cp.state_snapshot, counters)
    return await _drive(chain, store, execution_id, cursor)


def _now(chain: Chain, node_id: Any) -> Any:
    """The node a stored ``node_id`` is now (``Chain(renamed=...)``, docs/design.md §13)."""
    return current_name(chain.renamed, node_id)


def _counters(chain: Chain, counters: dict[str, int]) -> dict[str, int]:
    """Stored loop counters (keyed ``source->target``) under the nodes' current names."""
    if not chain.renamed:
        return dict(counters)
    out: dict[str, int] = {}
    for key, n in counters.items():
        source, sep, target = key.partition("->")
        out[f"{_now(chain, source)}->{_now(chain, target)}" if sep else key] = n
    return out


def _check_graph(chain: Chain, node_id: str | None, cp: Checkpoint) -> None:
    """Refuse, before anything is claimed or written, a run that continues at a node this
    chain no longer has (the graph changed between run and resume); ``node_id`` is already
    mapped through the chain's rename map."""
    if node_id is not None and node_id not in chain.nodes:
        stored = cp.node_id if cp.status == "interrupted" else cp.next_node_id
        via = f" (stored as {stored!r}, renamed)" if stored != node_id else ""
        raise MissingStepError(
            f"run {cp.execution_id!r} continues at node {node_id!r}{via}, which chain "
            f"{chain.name!r} does not have (was the graph changed? a node renamed by a deploy "
            "is mapped with Chain(..., renamed={old: new})); nothing was claimed",
            missing=f"node {node_id!r}",
            execution_id=cp.execution_id,
            node_id=node_id,
        )


@leased_fork
async def fork(chain: Chain, point: ForkPoint, state_updates: dict[str, Any] | None) -> ChainResult:
    store, value, src = point.store, point.value, point.src
    if state_updates is not None and not isinstance(state_updates, dict):
        raise ConfigurationError(
            f"state_updates must be a dict, got {type(state_updates).__name__}",
            execution_id=point.execution_id,
        )
    if src.agent_path is not None:  # a row inside a runner node
        return await _fork_in_runner(chain, point, state_updates)
    state = {**src.state_snapshot, **(state_updates or {})}
    serde.dumps(state, "state")
    next_node = _now(chain, src.node_id if src.status == "interrupted" else src.next_node_id)
    _check_graph(chain, next_node, src)
    answers = rows.branch_answers(src, rows.source_of(src), value)
    eid = await point.create_branch(chain)
    counters = _counters(chain, src.iteration_counters)
    origin_input = {"forked_from": point.execution_id, "state_updates": state_updates}
    await store.aput(
        rows.fork_origin(
            eid,
            src,
            state,
            origin_input,
            agent_path=None,
            counters=counters,
            next_node_id=next_node,
        )
    )
    await rows.record_fork_answer(store, eid, value, src)
    return await _drive(chain, store, eid, _Cursor(next_node, state, counters, answers))


async def _fork_in_runner(
    chain: Chain, point: ForkPoint, state_updates: dict[str, Any] | None
) -> ChainResult:
    """Branch from a row a runner node wrote: the branch re-enters that runner at the row, and
    ``state_updates`` apply to the chain state the node started from."""
    store, value, src = point.store, point.value, point.src
    reentry, source = fork_source(src, value)
    check_reentry(chain, reentry, src.execution_id)
    frames = reentry.frames
    frame = reentry.frame("chain", chain.name)
    frame = {**frame, "state": {**frame["state"], **(state_updates or {})}}
    serde.dumps(frame["state"], "state")
    reentry.state = {**reentry.state, OUTER_KEY: [frame, *frames[1:]]}
    eid = await point.create_branch(chain)
    origin_input = {"forked_from": src.execution_id, "source": source}
    await store.aput(
        rows.fork_origin(eid, src, reentry.state, origin_input, agent_path=src.agent_path)
    )
    cursor = _Cursor(
        _now(chain, frame["node_id"]), frame["state"], _counters(chain, frame["counters"])
    )
    cursor.reentry = reentry.deeper()
    await rows.record_fork_answer(store, eid, value, src)
    return await _drive(chain, store, eid, cursor)


async def _drive(chain: Chain, store: Checkpointer, eid: str, cur: _Cursor) -> ChainResult:
    """Run from ``cur`` until the chain ends, pauses or fails."""
    store = _trace.stamping(store)
    ctx = RunContext(eid, store, chain.name)
    state = cur.state
    counters = cur.counters
    answers = cur.answers
    owner = cur.claim_owner
    node_id = cur.node_id
    results: dict[str, Any] = {}
    routes = chain.routes  # Chain.route and node_index, one call less a step
    deadline = await _deadline(chain, store, eid)
    task = asyncio.current_task()  # as engine.sync.raise_if_cancel_requested, inline
    with run_scope(ctx), _trace.run(chain.kind, chain.name, eid):
        async with claim_heartbeat(store, eid, owner, chain.claim_lease_seconds):
            while node_id is not None:
                if task is not None and task.cancelling():  # a cancel an await swallowed
                    raise asyncio.CancelledError
                if node_id not in chain.nodes:
                    raise ConfigurationError(
                        f"run {eid!r} continues at node {node_id!r}, which chain "
                        f"{chain.name!r} does not have (was the graph changed?)",
                        execution_id=eid,
                        node_id=node_id,
                    )
                try:
                    with interrupt_scope(answers) as scope, _trace.step(eid, node_id):
                        if node_id not in chain.runners:
                            updates = await chain.call_node(
                                node_id, state, execution_id=eid, deadline=deadline
                            )
                        else:
                            updates = await _run_runner(chain, node_id, state, counters, cur)
                    cur.reentry = None
                    new_state = {**state, **updates} if updates else state
                    next_id = routes.route(node_id, new_state, counters)
                    output: dict[str, Any] | None = None
                    if updates:
                        # The values are in the state (stored as a delta); repeating them
                        # here would make storage quadratic for growing lists.
                        output = {"updated_keys": sorted(updates)}
                    unused = scope.unused(eid, node_id) if answers else None
                    if unused:
                        output = {**(output or {}), "unused_answers": unused}
                    cp = rows.step(
                        eid,
                        node_id,
                        "node",
                        new_state,
                        node_index=routes.node_index(node_id),
                        node_output=output,
                        counters=counters,
                        next_node_id=next_id,
                    )
                    if ARMED:  # the check inline: one call less a step
                        fault("chain.before_commit")
                    await store.aput(cp, release_claim_of=owner)
                except InterruptSignal as sig:
                    return await _pause(
                        chain, store, eid, node_id, state, counters, scope, sig, owner
                    )
                except ChildPaused as child:  # recorded by the runner node itself
                    pending = child.result.pending_interrupt
                    return ChainResult("paused", eid, state=state, pending_interrupt=pending)
                except StoreError:
                    raise  # the store refused or went away: write nothing more
                except Exception as exc:
                    return await _fail(store, eid, node_id, state, exc, owner, results)
                if ARMED:
                    fault("chain.after_commit")
                owner = None
                answers = []
                # Only the newest: one entry per node would hold every update of a long
                # linear run (each a grown copy of its lists), quadratic in its length.
                results = {node_id: updates}
                state = new_state
                node_id = next_id
            fault("run.before_end")
            end = rows.run_end(
                eid,
                "completed",
                state=state,
                node_index=len(chain.nodes),
                counters=counters,
            )
            await store.aput(end, release_claim_of=owner, **rows.ends(end))
    return ChainResult("completed", eid, output=state, state=state, node_results=results)


async def _deadline(chain: Chain, store: Checkpointer, eid: str) -> Deadline | None:
    """The run's deadline (``chain.deadline_seconds`` after its creation), if it has one."""
    if chain.deadline_seconds is None:
        return None
    run = await store.aget_run(eid)
    created = run.created_at if run is not None else None
    return Deadline(
        created.timestamp() if created is not None else time.time(), chain.deadline_seconds
    )


async def _run_runner(
    chain: Chain, node_id: str, state: dict[str, Any], counters: dict[str, int], cur: _Cursor
) -> dict[str, Any]:
    """Run a runner node inside this run under the chain's frame (see ``tether.engine.nesting``)."""
    node = chain.runners[node_id]
    ctx = current_run()
    assert ctx is not None
    frame = {
        "runner": "chain",
        "name": chain.name,
        "node_id": node_id,
        "state": state,
        "counters": dict(counters),
    }
    key = node.input_key
    value = (
        None
        if cur.reentry is not None
        else (state.get(key) if isinstance(key, str) else key(state))
    )
    with outer_frame(frame):
        result = await node.runner.nested(ctx.checkpointer, ctx.execution_id, value, cur.reentry)
    return {node.output_key: result.parsed if result.parsed is not None else result.output}


async def _pause(
    chain: Chain,
    store: Checkpointer,
    eid: str,
    node_id: str,
    state: dict[str, Any],
    counters: dict[str, int],
    scope: InterruptScope,
    sig: InterruptSignal,
    owner: str | None,
) -> ChainResult:
    # The node may have mutated nested values of its state in place before interrupt();
    # the paused row must hold the state the node started from, since it re-runs from its top.
    committed = await rows.committed_state(store, eid)
    try:
        cp = rows.pause(
            eid,
            node_id,
            committed,
            sig,
            scope.paused_input(sig),
            node_index=chain.node_index(node_id),
            counters=counters,
        )
    except SerializationError as exc:
        return await _fail(store, eid, node_id, state, exc, owner, {})
    pending = await rows.record_pause(store, cp, claim_owner=owner)
    return ChainResult("paused", eid, state=committed, pending_interrupt=pending.as_dict())


async def _fail(
    store: Checkpointer,
    eid: str,
    node_id: str,
    state: dict[str, Any],
    exc: Exception,
    owner: str | None,
    results: dict[str, Any],
) -> ChainResult:
    """Write the ``failed`` run-end marker; the run stays resumable from its last commit."""
    if isinstance(exc, SerializationError):
        exc.execution_id = exc.execution_id or eid
        exc.node_id = exc.node_id or node_id
    end = rows.run_end(eid, "failed", state=state, node_output=rows.failure(exc, node_id))
    await rows.fail_run(store, end, claim_owner=owner)
    return ChainResult("failed", eid, state=state, node_results=results, error=exc)
