"""The chain executor: runs nodes, writes one checkpoint per node, pauses and resumes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _lease, _trace, serde
from .._context import RunContext, current_run, run_scope
from .._faults import fault
from .._runner import (
    afork_checkpoint,
    alatest_resumable,
    claim,
    claim_heartbeat,
    load_run,
    record_fork_answer,
)
from .._timeouts import Deadline
from ..agent._compose import claim_reentry, run_child
from ..agent._nested import OUTER_KEY, ChildPaused, check_reentry, fork_source, outer_frame
from ..checkpoint import Checkpoint, new_id
from ..errors import (
    AlreadyResumed,
    ConfigurationError,
    InterruptSignal,
    MissingStepError,
    SerializationError,
    StoreError,
)
from ..interrupt import (
    Answer,
    InterruptScope,
    Resume,
    answers_with,
    check_resume_value,
    interrupt_scope,
    stored_answers,
)
from ..result import ChainResult
from ..store.base import RunRecord
from . import _repair

if TYPE_CHECKING:
    from ..agent._nested import ReEntry
    from ..store.base import Checkpointer
    from .graph import Chain, RunnerNode


@dataclass(slots=True)
class _Cursor:
    """Where a drive starts: the node, the state it sees, and what the run carries along."""

    node_id: str | None
    state: dict[str, Any]
    counters: dict[str, int] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)
    claim_owner: str | None = None
    reentry: ReEntry | None = None  # a row inside the first node, a runner node


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _check_input(input: Any) -> dict[str, Any]:
    if input is None:
        return {}
    if not isinstance(input, dict):
        raise ConfigurationError(f"a chain's input is a dict of state, got {type(input).__name__}")
    return dict(input)


@_lease.leased_start
async def start(chain: Chain, input: Any, execution_id: str | None) -> ChainResult:
    if chain.entry is None:
        raise ConfigurationError(f"chain {chain.name!r} has no nodes")
    state = _check_input(input)
    serde.dumps(state, "input")  # refuse a bad input before a run exists
    store = chain.checkpointer
    eid = execution_id or new_id()
    await _lease.acreate_run(
        store, RunRecord(eid, chain.name, chain.kind, status="running", input=state)
    )
    return await _drive(chain, store, eid, _Cursor(chain.entry, state))


@_lease.leased_resume
async def resume(
    chain: Chain,
    execution_id: str,
    resume_value: Any,
    agent_path: str | None = None,
    state_updates: Any = None,
) -> ChainResult:
    value = check_resume_value(resume_value)
    store = chain.checkpointer
    updates = None if state_updates is None else _repair.check_updates(execution_id, state_updates)
    run = await load_run(store, execution_id, chain.name)
    cp = await alatest_resumable(store, execution_id)
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
        cursor = _Cursor(frame["node_id"], frame["state"], dict(frame["counters"]))
        cursor.reentry = reentry.deeper()
        return await _drive(chain, store, execution_id, cursor)
    if cp is None:
        if value is not None:
            raise AlreadyResumed(
                f"run {execution_id!r} has no pending interrupt to answer",
                execution_id=execution_id,
            )
        # Crashed before its first node committed: start over from the recorded input.
        await _lease.mark_running(store, execution_id, run.status)
        return await _drive(chain, store, execution_id, _Cursor(chain.entry, dict(run.input or {})))
    _check_graph(chain, cp.node_id if cp.status == "interrupted" else cp.next_node_id, cp)
    if cp.status == "interrupted":
        answers, owner = await claim(store, cp, value, lease_seconds=chain.claim_lease_seconds)
        fault("chain.after_claim")
        cursor = _Cursor(cp.node_id, cp.state_snapshot, dict(cp.iteration_counters), answers, owner)
        return await _drive(chain, store, execution_id, cursor)
    if value is not None:
        raise AlreadyResumed(
            f"run {execution_id!r} is not paused (latest step {cp.node_id!r} is {cp.status}); "
            "there is no interrupt to answer",
            execution_id=execution_id,
            node_id=cp.node_id,
        )
    await _lease.mark_running(store, execution_id, run.status)
    cursor = _Cursor(cp.next_node_id, cp.state_snapshot, dict(cp.iteration_counters))
    return await _drive(chain, store, execution_id, cursor)


def _check_graph(chain: Chain, node_id: str | None, cp: Checkpoint) -> None:
    """Refuse, before anything is claimed or written, a run that continues at a node this
    chain no longer has (the graph changed between run and resume)."""
    if node_id is not None and node_id not in chain.nodes:
        raise MissingStepError(
            f"run {cp.execution_id!r} continues at node {node_id!r}, which chain "
            f"{chain.name!r} does not have (was the graph changed?); nothing was claimed",
            missing=f"node {node_id!r}",
            execution_id=cp.execution_id,
            node_id=node_id,
        )


@_lease.leased_fork
async def fork(
    chain: Chain,
    execution_id: str,
    checkpoint_id: str | None,
    state_updates: dict[str, Any] | None,
    resume_value: Any,
    new_execution_id: str | None,
) -> ChainResult:
    value = check_resume_value(resume_value)
    store = chain.checkpointer
    run = await load_run(store, execution_id, chain.name)
    src = await afork_checkpoint(store, execution_id, checkpoint_id, value)
    if src.agent_path is not None:  # a row inside a runner node
        return await _fork_in_runner(chain, store, run, src, state_updates, value, new_execution_id)
    if state_updates is not None and not isinstance(state_updates, dict):
        raise ConfigurationError(
            f"state_updates must be a dict, got {type(state_updates).__name__}",
            execution_id=execution_id,
        )
    state = {**src.state_snapshot, **(state_updates or {})}
    serde.dumps(state, "state")
    interrupted = src.status == "interrupted"
    next_node = src.node_id if interrupted else src.next_node_id
    _check_graph(chain, next_node, src)
    answers: list[Answer] = []
    if interrupted:
        answers = (
            stored_answers(src.node_input) if value is None else answers_with(src.node_input, value)
        )
    elif value is not None:
        raise AlreadyResumed(
            f"checkpoint {src.checkpoint_id!r} is not an interrupt; a fork from it takes no "
            "resume_value",
            execution_id=execution_id,
        )
    eid = await _lease.acreate_branch_run(store, chain, run, src.checkpoint_id, new_execution_id)
    counters = dict(src.iteration_counters)
    await store.aput(
        Checkpoint(
            execution_id=eid,
            node_id=src.node_id,
            step_type="fork_origin",
            status="completed",
            state_snapshot=state,
            node_index=src.node_index,
            node_input={"forked_from": execution_id, "state_updates": state_updates},
            iteration_counters=counters,
            parent_checkpoint_id=src.checkpoint_id,
            next_node_id=next_node,
        )
    )
    await record_fork_answer(store, eid, value, src)
    return await _drive(chain, store, eid, _Cursor(next_node, state, counters, answers))


async def _fork_in_runner(
    chain: Chain,
    store: Checkpointer,
    run: RunRecord,
    src: Checkpoint,
    state_updates: dict[str, Any] | None,
    value: Resume | None,
    new_execution_id: str | None,
) -> ChainResult:
    """Branch from a row a runner node wrote: the branch re-enters that runner at the row, and
    ``state_updates`` apply to the chain state the node started from."""
    reentry, source = fork_source(src, value)
    check_reentry(chain, reentry, src.execution_id)
    frames = reentry.frames
    frame = reentry.frame("chain", chain.name)
    frame = {**frame, "state": {**frame["state"], **(state_updates or {})}}
    serde.dumps(frame["state"], "state")
    reentry.state = {**reentry.state, OUTER_KEY: [frame, *frames[1:]]}
    eid = await _lease.acreate_branch_run(store, chain, run, src.checkpoint_id, new_execution_id)
    await store.aput(
        Checkpoint(
            execution_id=eid,
            node_id=src.node_id,
            step_type="fork_origin",
            status="completed",
            state_snapshot=reentry.state,
            node_index=src.node_index,
            node_input={"forked_from": src.execution_id, "source": source},
            agent_path=src.agent_path,
            parent_checkpoint_id=src.checkpoint_id,
        )
    )
    cursor = _Cursor(frame["node_id"], frame["state"], dict(frame["counters"]))
    cursor.reentry = reentry.deeper()
    await record_fork_answer(store, eid, value, src)
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
    deadline = await _deadline(chain, store, eid)
    with run_scope(ctx), _trace.run(chain.kind, chain.name, eid):
        async with claim_heartbeat(store, eid, owner, chain.claim_lease_seconds):
            while node_id is not None:
                if node_id not in chain.nodes:
                    raise ConfigurationError(
                        f"run {eid!r} continues at node {node_id!r}, which chain "
                        f"{chain.name!r} does not have (was the graph changed?)",
                        execution_id=eid,
                        node_id=node_id,
                    )
                try:
                    with interrupt_scope(answers) as scope, _trace.step(eid, node_id):
                        runner = chain.runners.get(node_id)
                        if runner is None:
                            updates = await chain.call_node(
                                node_id, state, execution_id=eid, deadline=deadline
                            )
                        else:
                            updates = await _run_runner(
                                chain, runner, node_id, state, counters, cur
                            )
                    cur.reentry = None
                    new_state = {**state, **updates} if updates else state
                    next_id = chain.route(node_id, new_state, counters)
                    output: dict[str, Any] | None = None
                    if updates:
                        # The values are in the state (stored as a delta); repeating them
                        # here would make storage quadratic for growing lists.
                        output = {"updated_keys": sorted(updates)}
                    unused = scope.unused(eid, node_id) if answers else None
                    if unused:
                        output = {**(output or {}), "unused_answers": unused}
                    cp = Checkpoint(
                        execution_id=eid,
                        node_id=node_id,
                        step_type="node",
                        status="completed",
                        state_snapshot=new_state,
                        node_index=chain.node_index(node_id),
                        node_output=output,
                        iteration_counters=counters,
                        next_node_id=next_id,
                    )
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
                fault("chain.after_commit")
                owner = None
                answers = []
                # Only the newest: one entry per node would hold every update of a long
                # linear run (each a grown copy of its lists), quadratic in its length.
                results = {node_id: updates}
                state = new_state
                node_id = next_id
            fault("run.before_end")
            try:
                await store.aput(
                    Checkpoint(
                        execution_id=eid,
                        node_id="run_end",
                        step_type="run_end",
                        status="completed",
                        state_snapshot=state,
                        node_index=len(chain.nodes),
                        iteration_counters=counters,
                    ),
                    run_status="completed",
                    release_claim_of=owner,
                    **_lease.ending(eid),
                )
            except StoreError:
                raise
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
    chain: Chain,
    node: RunnerNode,
    node_id: str,
    state: dict[str, Any],
    counters: dict[str, int],
    cur: _Cursor,
) -> dict[str, Any]:
    """Run a runner node inside this run under the chain's frame (see ``_nested``)."""
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
        result = await run_child(
            node.runner, ctx.checkpointer, ctx.execution_id, value, cur.reentry
        )
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
    try:
        context = serde.from_jsonable(serde.loads(serde.dumps(sig.context, "interrupt context")))
    except SerializationError as exc:
        return await _fail(store, eid, node_id, state, exc, owner, {})
    # The node may have mutated nested values of its state in place before interrupt();
    # the paused row must hold the state the node started from, since it re-runs from its top.
    state = await _committed_state(store, eid)
    cp = Checkpoint(
        execution_id=eid,
        node_id=node_id,
        step_type="hitl_pause",
        status="interrupted",
        state_snapshot=state,
        node_index=chain.node_index(node_id),
        node_input=scope.paused_input(sig),
        iteration_counters=counters,
        interrupt_reason=sig.reason,
        interrupt_context=context,
        next_node_id=node_id,
    )
    pending = await store.arecord_interrupt(cp, release_claim_of=owner, **_lease.ending(eid))
    return ChainResult("paused", eid, state=state, pending_interrupt=pending.as_dict())


async def _committed_state(store: Checkpointer, eid: str) -> dict[str, Any]:
    """The state as of the run's last committed step (its input if none committed yet)."""
    last = await store.aget_last(eid)
    while last is not None and last.is_run_end:
        last = await store.aget_last(eid, before_seq=last.seq)
    if last is not None:
        return last.state_snapshot
    run = await store.aget_run(eid)
    return dict(run.input or {}) if run is not None else {}


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
    if owner is not None:
        await store.arelease_claim(eid, owner=owner)
    if isinstance(exc, SerializationError):
        exc.execution_id = exc.execution_id or eid
        exc.node_id = exc.node_id or node_id
    await store.aput(
        Checkpoint(
            execution_id=eid,
            node_id="run_end",
            step_type="run_end",
            status="failed",
            state_snapshot=state,
            node_output={"error": _error_text(exc), "node_id": node_id},
        ),
        run_status="failed",
        error=_error_text(exc),
        **_lease.ending(eid),
    )
    return ChainResult("failed", eid, state=state, node_results=results, error=exc)
