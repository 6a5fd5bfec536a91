"""Driving runners inside runners, and the verbs of the composite runners (swarm, supervisor).

A composite runner implements :class:`Composite`: ``nested(store, eid, input, reentry)`` runs it
inside whatever run the caller is in (no run row, no ``run_end``; a pause travels up as
:class:`~tether.agent._nested.ChildPaused`). The functions here wrap that in the outermost
verbs: :func:`start` creates the run row, :func:`resume` re-enters the newest row through the
frames it carries, :func:`fork` copies a row into a new run; all three write the one ``run_end``
row through :func:`drive_outermost`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .. import _lease, _trace
from .._context import RunContext, current_agent_path, run_scope
from .._faults import fault
from .._runner import afork_checkpoint, alatest_resumable, claim, load_run, record_fork_answer
from ..checkpoint import Checkpoint, new_id
from ..errors import (
    AlreadyResumed,
    ConfigurationError,
    StoreError,
)
from ..interrupt import Resume, check_resume_value, stored_answers
from ..llm.messages import Message, Usage
from ..result import AgentResult
from ..store.base import RunRecord
from ._entry import cursor_at, initial_messages
from ._executor import Cursor, drive
from ._nested import (
    ChildPaused,
    ReEntry,
    check_in_subtree,
    check_reentry,
    fork_source,
    is_under,
    join_path,
    reentry_of,
)

if TYPE_CHECKING:
    from ..store.base import Checkpointer
    from .agent import Agent


class Composite(Protocol):
    """A runner made of agents (``Swarm``, ``Supervisor``)."""

    name: str
    kind: str
    claim_lease_seconds: float

    @property
    def checkpointer(self) -> Checkpointer: ...

    @property
    def segment(self) -> str:
        """Its ``agent_path`` segment, e.g. ``swarm:<name>``."""

    async def nested(
        self, store: Checkpointer, eid: str, input: Any, reentry: ReEntry | None
    ) -> AgentResult:
        """Run inside the caller's run; a ``completed`` result, or raise ``ChildPaused``."""


def as_input(value: Any) -> str | list[Message]:
    """A runner's input: a ``str``, or a history given as :class:`Message` objects or their
    ``to_dict()`` form (what a chain's JSON state holds).

    Raises:
        ConfigurationError: anything else.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and value:
        if all(isinstance(m, Message) for m in value):
            return list(value)
        if all(isinstance(m, dict) for m in value):
            return [Message.from_dict(m) for m in value]
    raise ConfigurationError(
        f"an agent's input is a str or a non-empty list of messages, got {type(value).__name__}"
    )


async def run_agent(
    agent: Agent,
    store: Checkpointer,
    eid: str,
    input: Any,
    reentry: ReEntry | None,
    *,
    segment: str | None = None,
    messages: list[Message] | None = None,
    usage: Usage | None = None,
) -> AgentResult:
    """Drive ``agent`` inside the caller's run (no ``run_end``; errors propagate).

    Args:
        input: used for a fresh start when ``messages`` is not given.
        reentry: re-enter the agent's own row instead of starting fresh.
        segment: its ``agent_path`` segment (default ``agent:<name>``).
        messages / usage: a fresh start's history and running usage (a swarm's handoff).

    Returns:
        The ``completed`` result.

    Raises:
        ChildPaused: the agent paused (its pause is recorded).
        ConfigurationError: ``reentry`` is not this agent's row.
    """
    if reentry is None:
        history = messages if messages is not None else initial_messages(agent, as_input(input))
        cursor = Cursor(history, 0, usage or Usage())
    else:
        expected = join_path(current_agent_path(), segment or f"agent:{agent.name}")
        if not reentry.is_own_row or not is_under(reentry.agent_path, expected):
            raise ConfigurationError(
                f"cannot re-enter row {reentry.node_id!r} at {reentry.agent_path!r} as agent "
                f"{expected!r} (was the topology changed?)"
            )
        cursor = cursor_at(
            reentry.node_id, reentry.status, reentry.node_input, reentry.state, reentry.answers
        )
        cursor.claim_owner = reentry.claim_owner
    result = await drive(agent, store, eid, cursor, outermost=False, segment=segment)
    if result.status == "paused":
        raise ChildPaused(result)
    return result


async def run_child(
    runner: Any, store: Checkpointer, eid: str, input: Any, reentry: ReEntry | None
) -> AgentResult:
    """Run an ``Agent``, ``Swarm`` or ``Supervisor`` inside the caller's run."""
    from .agent import Agent

    if isinstance(runner, Agent):
        return await run_agent(runner, store, eid, input, reentry)
    result: AgentResult = await runner.nested(store, eid, input, reentry)
    return result


def _jsonable_input(input: Any) -> Any:
    value = as_input(input)
    return value if isinstance(value, str) else [m.to_dict() for m in value]


@_lease.leased_start
async def start(runner: Composite, input: Any, execution_id: str | None) -> AgentResult:
    """Create the run (named and kinded after ``runner``; inner agents never touch it) and
    drive it."""
    stored = _jsonable_input(input)
    store = runner.checkpointer
    eid = execution_id or new_id()
    await _lease.acreate_run(store, RunRecord(eid, runner.name, runner.kind, "running", stored))
    return await drive_outermost(runner, store, eid, stored, None)


async def drive_outermost(
    runner: Composite, store: Checkpointer, eid: str, input: Any, reentry: ReEntry | None
) -> AgentResult:
    """Run ``runner`` as the outermost runner: it alone writes the ``run_end`` row."""
    path = runner.segment
    store = _trace.stamping(store)
    with run_scope(RunContext(eid, store, runner.name)), _trace.run(runner.kind, runner.name, eid):
        try:
            result = await runner.nested(store, eid, input, reentry)
        except ChildPaused as paused:
            return paused.result
        except StoreError:
            raise
        except Exception as exc:
            if reentry is not None and reentry.claim_owner is not None:
                # Failed before the re-entered step committed: the answer stays for a retry.
                await store.arelease_claim(eid, owner=reentry.claim_owner)
            error = f"{type(exc).__name__}: {exc}"
            await store.aput(
                Checkpoint(
                    execution_id=eid,
                    node_id="run_end",
                    step_type="run_end",
                    status="failed",
                    node_output={"error": error},
                    agent_path=path,
                ),
                run_status="failed",
                error=error,
                **_lease.ending(eid),
            )
            return AgentResult("failed", eid, error=exc)
        await store.aput(
            Checkpoint(
                execution_id=eid,
                node_id="run_end",
                step_type="run_end",
                status="completed",
                state_snapshot={
                    "messages": [m.to_dict() for m in result.messages],
                    "usage": result.usage.to_dict(),
                },
                node_output={"output": result.output},
                agent_path=path,
            ),
            run_status="completed",
            **_lease.ending(eid),
        )
    return AgentResult(
        "completed",
        eid,
        output=result.output,
        parsed=result.parsed,
        messages=result.messages,
        usage=result.usage,
    )


@_lease.leased_resume
async def resume(
    runner: Composite, execution_id: str, resume_value: Any, agent_path: str | None
) -> AgentResult:
    """Continue a run at its newest resumable row, wherever in the topology it lies.

    Raises:
        RunNotFoundError, RunnerMismatchError: see ``aresume``.
        ChainResumeError: paused without an answer; or ``agent_path`` is given, no answer is,
            and the row to re-enter lies outside that subtree.
        AlreadyResumed: finished; the interrupt was claimed by another caller; nothing is
            pending; or ``agent_path`` is given with an answer and the pending interrupt lies
            outside that subtree.
    """
    value = check_resume_value(resume_value)
    store = runner.checkpointer
    run = await load_run(store, execution_id, runner.name)
    cp = await alatest_resumable(store, execution_id)
    if cp is None:
        if value is not None:
            raise AlreadyResumed(
                f"run {execution_id!r} has no pending interrupt to answer",
                execution_id=execution_id,
            )
        await _lease.mark_running(store, execution_id, run.status)
        return await drive_outermost(runner, store, execution_id, run.input, None)
    reentry = await claim_reentry(
        store, cp, value, agent_path, lease_seconds=runner.claim_lease_seconds, runner=runner
    )
    return await drive_outermost(runner, store, execution_id, run.input, reentry)


async def claim_reentry(
    store: Checkpointer,
    cp: Checkpoint,
    value: Resume | None,
    agent_path: str | None,
    *,
    lease_seconds: float,
    runner: Any,
) -> ReEntry:
    """The re-entry for the newest row of a run, claiming its interrupt if it is one.

    Args:
        cp: the newest resumable row (from ``alatest_resumable``).
        value: the caller's answer.
        agent_path: resume only if ``cp`` lies in this subtree.
        lease_seconds: the claim's lease.
        runner: the outermost runner (a ``Chain``, ``Swarm`` or ``Supervisor``), checked to
            still have the row's step before anything is claimed (:func:`check_reentry`).

    Raises:
        ChainResumeError, AlreadyResumed: as for :func:`resume`.
        ConfigurationError: the runner no longer has the row's step; nothing was claimed.
    """
    eid = cp.execution_id
    check_in_subtree(eid, cp.node_id, cp.agent_path, value, agent_path)
    reentry = reentry_of(cp)
    if cp.status != "interrupted" and value is not None:
        raise AlreadyResumed(
            f"run {eid!r} is not paused (latest step {cp.node_id!r} is {cp.status}); "
            "there is no interrupt to answer",
            execution_id=eid,
            node_id=cp.node_id,
        )
    check_reentry(runner, reentry, eid)
    if cp.status == "interrupted":
        answers, owner = await claim(store, cp, value, lease_seconds=lease_seconds)
        fault("agent.after_claim")
        reentry.answers, reentry.claim_owner = answers, owner
    else:
        if reentry.status == "interrupted":  # a fork's first row, standing for an interrupt
            reentry.answers = stored_answers(reentry.node_input)
        await _lease.mark_running(store, eid, None)
    return reentry


@_lease.leased_fork
async def fork(
    runner: Composite,
    execution_id: str,
    checkpoint_id: str | None,
    resume_value: Any,
    new_execution_id: str | None,
) -> AgentResult:
    """Copy a row (its frames included) into a new run linked by ``parent_checkpoint_id``, and
    drive the branch from it.

    Raises:
        RunNotFoundError, RunnerMismatchError, CheckpointNotFoundError.
        AlreadyResumed: a ``resume_value`` for a row that is not an interrupt.
    """
    value = check_resume_value(resume_value)
    store = runner.checkpointer
    run = await load_run(store, execution_id, runner.name)
    src = await afork_checkpoint(store, execution_id, checkpoint_id, value)
    reentry, source = fork_source(src, value)
    check_reentry(runner, reentry, execution_id)
    eid = await _lease.acreate_branch_run(store, runner, run, src.checkpoint_id, new_execution_id)
    await store.aput(
        Checkpoint(
            execution_id=eid,
            node_id=src.node_id,
            step_type="fork_origin",
            status="completed",
            state_snapshot=src.state_snapshot,
            node_index=src.node_index,
            node_input={"forked_from": execution_id, "source": source},
            agent_path=src.agent_path,
            parent_checkpoint_id=src.checkpoint_id,
        )
    )
    await record_fork_answer(store, eid, value, src)
    return await drive_outermost(runner, store, eid, run.input, reentry)
