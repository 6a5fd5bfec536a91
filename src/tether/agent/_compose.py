"""Driving runners inside runners, and the verbs of the composite runners (swarm, supervisor).

A composite runner implements :class:`Composite`: ``nested(store, eid, input, reentry)`` runs it
inside whatever run the caller is in (no run row, no ``run_end``; a pause travels up as
:class:`~tether.engine.nesting.ChildPaused`). The functions here wrap that in the outermost
verbs: :func:`start` creates the run row, :func:`resume` re-enters the newest row through the
frames it carries, :func:`fork` copies a row into a new run; all three write the one ``run_end``
row through :func:`drive_outermost`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .. import _trace
from .._context import RunContext, current_agent_path, run_scope
from ..checkpoint import new_id
from ..engine import lease, rows
from ..engine.fork import ForkPoint, leased_fork
from ..engine.nesting import (
    ChildPaused,
    Reenterable,
    ReEntry,
    check_reentry,
    claim_reentry,
    fork_source,
    is_under,
    join_path,
)
from ..errors import ConfigurationError, StoreError
from ..llm.messages import Message, Usage
from ..result import AgentResult
from ..store.base import RunRecord
from ._entry import cursor_at, initial_messages
from ._executor import Cursor, drive

if TYPE_CHECKING:
    from ..store.base import Checkpointer
    from .agent import Agent


class Composite(Reenterable, Protocol):
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


def _jsonable_input(input: Any) -> Any:
    value = as_input(input)
    return value if isinstance(value, str) else [m.to_dict() for m in value]


@lease.leased_start
async def start(runner: Composite, input: Any, execution_id: str | None) -> AgentResult:
    """Create the run (named and kinded after ``runner``; inner agents never touch it) and
    drive it."""
    stored = _jsonable_input(input)
    store = runner.checkpointer
    eid = execution_id or new_id()
    await lease.acreate_run(store, RunRecord(eid, runner.name, runner.kind, "running", stored))
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
            # Failed before the re-entered step committed: the answer stays for a retry.
            owner = reentry.claim_owner if reentry is not None else None
            end = rows.run_end(eid, "failed", node_output=rows.failure(exc), agent_path=path)
            await rows.fail_run(store, end, claim_owner=owner)
            return AgentResult("failed", eid, error=exc)
        state = {
            "messages": [m.to_dict() for m in result.messages],
            "usage": result.usage.to_dict(),
        }
        end = rows.run_end(
            eid, "completed", state=state, node_output={"output": result.output}, agent_path=path
        )
        await store.aput(end, **rows.ends(end))
    return AgentResult(
        "completed",
        eid,
        output=result.output,
        parsed=result.parsed,
        messages=result.messages,
        usage=result.usage,
    )


@lease.leased_resume
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
    store = runner.checkpointer
    value, run, cp = await rows.resume_point(store, execution_id, runner.name, resume_value)
    if cp is None:
        input = await rows.restart_input(store, run, value)
        return await drive_outermost(runner, store, execution_id, input, None)
    reentry = await claim_reentry(
        store, cp, value, agent_path, lease_seconds=runner.claim_lease_seconds, runner=runner
    )
    return await drive_outermost(runner, store, execution_id, run.input, reentry)


@leased_fork
async def fork(runner: Composite, point: ForkPoint) -> AgentResult:
    """Copy a row (its frames included) into a new run linked by ``parent_checkpoint_id``, and
    drive the branch from it.

    Raises:
        RunNotFoundError, RunnerMismatchError, CheckpointNotFoundError.
        ChainResumeError: a ``resume_value`` for a row that is not an interrupt.
    """
    store, value, src, execution_id = point.store, point.value, point.src, point.execution_id
    reentry, source = fork_source(src, value)
    check_reentry(runner, reentry, execution_id)
    eid = await point.create_branch(runner)
    origin_input = {"forked_from": execution_id, "source": source}
    await store.aput(
        rows.fork_origin(eid, src, src.state_snapshot, origin_input, agent_path=src.agent_path)
    )
    await rows.record_fork_answer(store, eid, value, src)
    return await drive_outermost(runner, store, eid, point.run.input, reentry)
