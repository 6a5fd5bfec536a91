"""Where a durable run's drive starts (a new run, a resume, a fork) and the drive itself
(docs/design.md §4, §5, §9).

A drive runs the agent from the run's input with :class:`agents.Runner`, every model call and
tool call journaled (:mod:`._journal`), so a resumed or forked run replays what is recorded and
goes on live from the first call that is not. When the SDK stops for tool approvals, each
approval is answered from the journal (``RunState.approve`` / ``reject``) and the run goes on
from its ``RunState``; the first one with no answer pauses the run as a tether interrupt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents import Runner, ToolApprovalItem

from ... import _trace, serde
from ..._context import RunContext, run_scope
from ..._faults import fault
from ...checkpoint import Checkpoint
from ...engine import lease as _lease
from ...engine import rows
from ...engine.claim import claim, claim_heartbeat
from ...engine.fork import ForkPoint, leased_fork
from ...errors import (
    AlreadyResumed,
    ConfigurationError,
    InterruptSignal,
    SerializationError,
    StoreError,
)
from ...interrupt import Resume, answers_with
from ...store.base import RunRecord
from ._calls import _arguments
from ._journal import Journal, Scope, journal_scope, segment
from ._result import TetherRunResult

if TYPE_CHECKING:
    from agents import RunResult

    from .agent import TetherAgent

APPROVAL_REASON = "tool_approval"
"""The ``interrupt_reason`` of a tool call waiting for approval (``needs_approval``)."""


@dataclass(frozen=True, slots=True)
class Start:
    """A new run's input: what ``Runner.run`` takes, and the run context object."""

    input: Any
    context: Any = None


def stored_input(start: Start) -> Any:
    """The run's input as its run row keeps it: the SDK input itself, or ``{"input",
    "context"}`` when there is a context (the SDK's input is a ``str`` or a list, never a
    dict).

    Raises:
        SerializationError: the input or context cannot be stored as JSON.
    """
    if start.context is None:
        return serde.to_jsonable(start.input, "input")
    return {
        "input": serde.to_jsonable(start.input, "input"),
        "context": serde.to_jsonable(start.context, "context"),
    }


def start_of(stored: Any) -> Start:
    """The inverse of :func:`stored_input`."""
    if isinstance(stored, dict) and "input" in stored:
        return Start(serde.from_jsonable(stored["input"]), serde.from_jsonable(stored["context"]))
    return Start(serde.from_jsonable(stored))


@_lease.leased_start
async def start(runner: TetherAgent, first: Start, execution_id: str) -> TetherRunResult:
    store = runner.checkpointer
    record = RunRecord(execution_id, runner.name, runner.kind, "running", stored_input(first))
    await _lease.acreate_run(store, record)
    return await drive(runner, Journal(store, execution_id, runner.segment), first)


@_lease.leased_resume
async def resume(runner: TetherAgent, execution_id: str, resume_value: Any) -> TetherRunResult:
    store = runner.checkpointer
    value, run, cp = await rows.resume_point(store, execution_id, runner.name, resume_value)
    journal = Journal.from_state(
        store, execution_id, runner.segment, None if cp is None else cp.state_snapshot
    )
    if cp is not None and cp.status == "interrupted":
        answers, journal.owner = await claim(
            store, cp, value, lease_seconds=runner.claim_lease_seconds
        )
        fault("agent.after_claim")
        journal.add_answers(cp.node_input["key"], answers)
    elif value is not None:
        where = "has no step yet" if cp is None else f"is at {cp.node_id!r} ({cp.status})"
        raise AlreadyResumed(
            f"run {execution_id!r} is not paused (it {where}); there is no interrupt to answer",
            execution_id=execution_id,
        )
    else:
        await _lease.mark_running(store, execution_id, run.status)
    return await drive(runner, journal, start_of(run.input))


@leased_fork
async def fork(runner: TetherAgent, point: ForkPoint) -> TetherRunResult:
    store, value, src, execution_id = point.store, point.value, point.src, point.execution_id
    source = rows.source_of(src)
    if value is not None and source["status"] != "interrupted":
        raise rows.not_an_interrupt(src)
    eid = await point.create_branch(runner)
    journal = Journal.from_state(store, eid, runner.segment, src.state_snapshot)
    if value is not None:
        node_input = source["node_input"]
        # In the branch's first row, so a branch that dies at once keeps its answer.
        journal.add_answers(node_input["key"], answers_with(node_input, value))
    origin_input = {"forked_from": execution_id, "source": source}
    await journal.put(
        rows.fork_origin(eid, src, journal.state(), origin_input, agent_path=src.agent_path)
    )
    return await drive(runner, journal, start_of(point.run.input))


async def drive(runner: TetherAgent, journal: Journal, first: Start) -> TetherRunResult:
    """Run the agent from ``first`` with ``journal`` until it completes, pauses or fails.

    Raises:
        StoreError: the store failed (nothing more is written; the run resumes from its last
            row).
    """
    store = journal.store = _trace.stamping(journal.store)
    eid = journal.execution_id
    with (
        run_scope(RunContext(eid, store, runner.name)),
        _trace.run(runner.kind, runner.name, eid),
        journal_scope(journal),
    ):
        async with claim_heartbeat(store, eid, journal.owner, runner.claim_lease_seconds):
            try:
                return await _run(runner, journal, first)
            except InterruptSignal as sig:
                return await _pause_in_tool(journal, sig)
            except StoreError:
                raise
            except Exception as exc:
                if journal.store_error is not None:
                    raise journal.store_error from exc
                return await _fail(journal, exc)


async def _run(runner: TetherAgent, journal: Journal, first: Start) -> TetherRunResult:
    options: dict[str, Any] = {
        "max_turns": runner.max_turns,
        "hooks": runner.hooks,
        "run_config": runner.run_config,
    }
    result = await Runner.run(runner.agent, first.input, context=first.context, **options)
    while result.interruptions:
        state = result.to_state()
        n = journal.model_calls(_run_scope(journal))
        for item in result.interruptions:
            key = f"a{n}:{_call_id(item)}"
            answers = journal.answers(key)
            if not answers:
                return await _pause_for_approval(journal, item, key, n, result)
            answer = answers[-1].value
            if answer.approved:
                state.approve(item)
            else:
                state.reject(item, rejection_message=_rejection_message(answer))
        result = await Runner.run(runner.agent, state, **options)
    return await _complete(journal, result)


def _run_scope(journal: Journal) -> Scope:
    return Scope("", "", journal.path)


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return str(call_id or getattr(raw, "id", "") or "")


def _rejection_message(answer: Resume) -> str | None:
    """What the model is told of a rejected call: ``Resume.data`` when it is a text or
    ``{"message": text}``, else the SDK's default."""
    data = answer.data
    if isinstance(data, str) and data:
        return data
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return None


def _storable(value: Any, path: str) -> Any:
    """``value`` when the store can keep it (typed values come back typed), else its text."""
    try:
        serde.to_jsonable(value, path)
    except SerializationError:
        return str(value)
    return value


async def _complete(journal: Journal, result: RunResult) -> TetherRunResult:
    eid = journal.execution_id
    fault("agent.after_loop")
    end = rows.run_end(
        eid,
        "completed",
        state=journal.state(),
        node_index=journal.model_calls(_run_scope(journal)),
        node_output={
            "output": _storable(result.final_output, "final_output"),
            "last_agent": result.last_agent.name,
        },
        agent_path=f"{journal.path}/{segment('agent', result.last_agent.name)}",
    )
    await journal.put(end, **rows.ends(end))
    return TetherRunResult("completed", eid, output=result.final_output, run_result=result)


async def _pause_for_approval(
    journal: Journal, item: ToolApprovalItem, key: str, n: int, result: RunResult
) -> TetherRunResult:
    raw = item.raw_item
    tool = str(item.tool_name or getattr(raw, "name", "") or "")
    agent = item.agent.name
    raw_args = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    arguments = _arguments(raw_args) if isinstance(raw_args, str) else raw_args
    node_id = f"turn:{max(n - 1, 0)}/tool:{tool}"
    context = {
        "tool": tool,
        "arguments": _storable(arguments, "arguments"),
        "agent": agent,
        "call_id": _call_id(item),
    }
    pending = await journal.pause(
        Checkpoint(
            execution_id=journal.execution_id,
            node_id=node_id,
            step_type="hitl_pause",
            status="interrupted",
            node_index=n,
            node_input={"key": key, "call_id": context["call_id"], "kind": "approval"},
            interrupt_reason=APPROVAL_REASON,
            interrupt_context=context,
            agent_path=f"{journal.path}/{segment('agent', agent)}/{segment('tool', tool)}",
            next_node_id=node_id,
        ),
        **_lease.ending(journal.execution_id),
    )
    return TetherRunResult(
        "paused", journal.execution_id, pending_interrupt=pending.as_dict(), run_result=result
    )


async def _pause_in_tool(journal: Journal, sig: InterruptSignal) -> TetherRunResult:
    at = journal.paused_at
    if at is None:
        return await _fail(
            journal,
            ConfigurationError(
                f"interrupt({sig.reason!r}) was called outside a function tool; in a durable "
                "OpenAI Agents run a human can be asked from a function tool (or with "
                "needs_approval)"
            ),
        )
    context = serde.from_jsonable(serde.loads(serde.dumps(at.context, "interrupt context")))
    pending = await journal.pause(
        Checkpoint(
            execution_id=journal.execution_id,
            node_id=at.node_id,
            step_type="hitl_pause",
            status="interrupted",
            node_index=journal.model_calls(_run_scope(journal)),
            node_input={
                "key": at.key,
                "call_id": at.call_id,
                "kind": "interrupt",
                "arguments": _arguments(at.arguments),
                **at.recorded,
            },
            interrupt_reason=at.reason,
            interrupt_context=context,
            agent_path=at.path,
            next_node_id=at.node_id,
        ),
        **_lease.ending(journal.execution_id),
    )
    return TetherRunResult("paused", journal.execution_id, pending_interrupt=pending.as_dict())


async def _fail(journal: Journal, exc: Exception) -> TetherRunResult:
    """Write the ``failed`` run-end row; the run stays resumable from its last row."""
    store, eid = journal.store, journal.execution_id
    if journal.owner is not None:  # the answer stays for the next resume
        await store.arelease_claim(eid, owner=journal.owner)
        journal.owner = None
    end = rows.run_end(
        eid,
        "failed",
        state=journal.state(),
        node_index=journal.model_calls(_run_scope(journal)),
        node_output=rows.failure(exc),
        agent_path=journal.path,
    )
    await journal.put(end, **rows.ends(end))
    return TetherRunResult("failed", eid, error=exc)
