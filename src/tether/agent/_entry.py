"""Where an agent's drive starts: a new run, a resume by the latest row's ``node_id``, a fork
(docs/design.md §4, §9). The loop itself is :mod:`tether.agent._executor`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _lease
from .._context import current_agent_path
from .._faults import fault
from .._runner import afork_checkpoint, alatest_resumable, claim, load_run, record_fork_answer
from ..checkpoint import Checkpoint, new_id
from ..errors import AlreadyResumed, ConfigurationError
from ..interrupt import Answer, check_resume_value, stored_answers
from ..llm.messages import Message, Usage
from ..result import AgentResult
from ..store.base import RunRecord
from ._executor import Cursor, drive
from ._nested import check_in_subtree, check_reentry, fork_source, reentry_of

if TYPE_CHECKING:
    from .agent import Agent


def _agent_path(agent: Agent) -> str:
    parent = current_agent_path()
    segment = f"agent:{agent.name}"
    return segment if not parent else f"{parent}/{segment}"


def initial_messages(agent: Agent, input: Any) -> list[Message]:
    """The history a run starts with: the system prompt (unless the input brings its own),
    then the input.

    Raises:
        ConfigurationError: ``input`` is neither a ``str`` nor a list of :class:`Message`.
    """
    if isinstance(input, str):
        messages = [Message.user(input)]
    elif isinstance(input, list) and input and all(isinstance(m, Message) for m in input):
        messages = list(input)
    else:
        raise ConfigurationError(
            "an agent's input is a str or a non-empty list of tether.llm.Message, got "
            f"{type(input).__name__}"
        )
    if agent.system_prompt and messages[0].role != "system":
        messages.insert(0, Message.system(agent.system_prompt))
    return messages


@_lease.leased_start
async def start(agent: Agent, input: Any, execution_id: str | None) -> AgentResult:
    messages = initial_messages(agent, input)
    store = agent.checkpointer
    eid = execution_id or new_id()
    await _lease.acreate_run(
        store,
        RunRecord(
            eid, agent.name, agent.kind, status="running", input=[m.to_dict() for m in messages]
        ),
    )
    return await drive(agent, store, eid, Cursor(messages, 0, Usage()))


def cursor_at(
    node_id: str,
    status: str,
    node_input: Any,
    state: dict[str, Any],
    answers: list[Answer] | None = None,
) -> Cursor:
    """The cursor that re-enters an agent row (docs/design.md §4, agents).

    ``turn:N`` re-asks the model with the saved history; ``turn:N/tool:X`` re-invokes that tool
    with its saved arguments without calling the model, then dispatches the calls of the turn
    after it (or, for an ``interrupted`` row, answers them as not run).

    Raises:
        ConfigurationError: the row is not an agent row, or its tool call is not in the history.
    """
    messages = [Message.from_dict(m) for m in state.get("messages", ())]
    turn = int(state.get("turn", 0))
    usage = Usage.from_dict(state.get("usage") or {})
    if node_id.startswith("turn:") and "/tool:" not in node_id:
        reask = int(node_input.get("reask", 0)) if isinstance(node_input, dict) else 0
        return Cursor(messages, turn, usage, write_turn_row=False, reask=reask)
    if node_id.startswith("turn:") and isinstance(node_input, dict):
        call_id = node_input.get("tool_call_id")
        for message in reversed(messages):
            if message.role != "assistant" or not message.tool_calls:
                continue
            ids = [c.id for c in message.tool_calls]
            if call_id in ids:
                return Cursor(
                    messages,
                    turn,
                    usage,
                    calls=list(message.tool_calls[ids.index(call_id) :]),
                    reinvoke_first=True,
                    skip_siblings=status == "interrupted",
                    answers=list(answers or []),
                )
            break
    raise ConfigurationError(f"cannot re-enter an agent at row {node_id!r} ({node_input!r})")


@_lease.leased_resume
async def resume(
    agent: Agent, execution_id: str, resume_value: Any, agent_path: str | None = None
) -> AgentResult:
    value = check_resume_value(resume_value)
    store = agent.checkpointer
    run = await load_run(store, execution_id, agent.name)
    cp = await alatest_resumable(store, execution_id)
    if cp is None:
        check_in_subtree(execution_id, "turn:0", _agent_path(agent), value, agent_path)
    else:
        check_in_subtree(execution_id, cp.node_id, cp.agent_path, value, agent_path)
    if cp is None:
        if value is not None:
            raise AlreadyResumed(
                f"run {execution_id!r} has no pending interrupt to answer",
                execution_id=execution_id,
            )
        # Died before its first row committed: start over from the recorded input.
        await _lease.mark_running(store, execution_id, run.status)
        messages = [Message.from_dict(m) for m in run.input or ()]
        return await drive(agent, store, execution_id, Cursor(messages, 0, Usage()))
    reentry = reentry_of(cp)
    node_id, status, node_input = reentry.node_id, reentry.status, reentry.node_input
    if cp.status != "interrupted" and value is not None:
        raise AlreadyResumed(
            f"run {execution_id!r} is not paused (latest step {cp.node_id!r} is {cp.status}); "
            "there is no interrupt to answer",
            execution_id=execution_id,
            node_id=cp.node_id,
        )
    check_reentry(agent, reentry, execution_id)
    if cp.status == "interrupted":
        answers, owner = await claim(store, cp, value, lease_seconds=agent.claim_lease_seconds)
        fault("agent.after_claim")
        cursor = cursor_at(node_id, status, node_input, cp.state_snapshot, answers)
        cursor.claim_owner = owner
        return await drive(agent, store, execution_id, cursor)
    answers = stored_answers(node_input) if status == "interrupted" else []
    cursor = cursor_at(node_id, status, node_input, cp.state_snapshot, answers)
    await _lease.mark_running(store, execution_id, run.status)
    return await drive(agent, store, execution_id, cursor)


@_lease.leased_fork
async def fork(
    agent: Agent,
    execution_id: str,
    checkpoint_id: str | None,
    resume_value: Any,
    new_execution_id: str | None,
) -> AgentResult:
    value = check_resume_value(resume_value)
    store = agent.checkpointer
    run = await load_run(store, execution_id, agent.name)
    src = await afork_checkpoint(store, execution_id, checkpoint_id, value)
    reentry, source = fork_source(src, value)
    check_reentry(agent, reentry, execution_id)
    cursor = cursor_at(
        reentry.node_id, reentry.status, reentry.node_input, src.state_snapshot, reentry.answers
    )
    eid = await _lease.acreate_branch_run(store, agent, run, src.checkpoint_id, new_execution_id)
    await store.aput(
        Checkpoint(
            execution_id=eid,
            node_id=src.node_id,
            step_type="fork_origin",
            status="completed",
            state_snapshot=src.state_snapshot,
            node_index=src.node_index,
            node_input={"forked_from": execution_id, "source": source},
            agent_path=_agent_path(agent),
            parent_checkpoint_id=src.checkpoint_id,
        )
    )
    await record_fork_answer(store, eid, value, src)
    return await drive(agent, store, eid, cursor)
