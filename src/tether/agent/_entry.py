"""Where an agent's drive starts: a new run, a resume by the latest row's ``node_id``, a fork
(docs/design.md §4, §9). The loop itself is :mod:`tether.agent._executor`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._context import current_agent_path
from .._faults import fault
from ..checkpoint import new_id
from ..engine import lease, rows
from ..engine.claim import claim
from ..engine.fork import ForkPoint, leased_fork
from ..engine.nesting import check_in_subtree, check_reentry, fork_source, join_path, reentry_of
from ..errors import ConfigurationError
from ..interrupt import Answer
from ..llm.messages import Message, Usage
from ..result import AgentResult
from ..store.base import RunRecord
from ._executor import Cursor, drive

if TYPE_CHECKING:
    from .agent import Agent


def _agent_path(agent: Agent) -> str:
    return join_path(current_agent_path(), f"agent:{agent.name}")


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


@lease.leased_start
async def start(agent: Agent, input: Any, execution_id: str | None) -> AgentResult:
    messages = initial_messages(agent, input)
    store = agent.checkpointer
    eid = execution_id or new_id()
    await lease.acreate_run(
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


@lease.leased_resume
async def resume(
    agent: Agent, execution_id: str, resume_value: Any, agent_path: str | None = None
) -> AgentResult:
    store = agent.checkpointer
    value, run, cp = await rows.resume_point(store, execution_id, agent.name, resume_value)
    if cp is None:
        check_in_subtree(execution_id, "turn:0", _agent_path(agent), value, agent_path)
    else:
        check_in_subtree(execution_id, cp.node_id, cp.agent_path, value, agent_path)
    if cp is None:  # died before its first row committed
        input = await rows.restart_input(store, run, value)
        messages = [Message.from_dict(m) for m in input or ()]
        return await drive(agent, store, execution_id, Cursor(messages, 0, Usage()))
    reentry = reentry_of(cp)
    node_id, status, node_input = reentry.node_id, reentry.status, reentry.node_input
    if cp.status != "interrupted" and value is not None:
        raise rows.not_paused(cp)
    check_reentry(agent, reentry, execution_id)
    if cp.status == "interrupted":
        answers, owner = await claim(store, cp, value, lease_seconds=agent.claim_lease_seconds)
        fault("agent.after_claim")
        cursor = cursor_at(node_id, status, node_input, cp.state_snapshot, answers)
        cursor.claim_owner = owner
        return await drive(agent, store, execution_id, cursor)
    answers = rows.branch_answers(cp, reentry.source, None)
    cursor = cursor_at(node_id, status, node_input, cp.state_snapshot, answers)
    await lease.mark_running(store, execution_id, run.status)
    return await drive(agent, store, execution_id, cursor)


@leased_fork
async def fork(agent: Agent, point: ForkPoint) -> AgentResult:
    store, value, src, execution_id = point.store, point.value, point.src, point.execution_id
    reentry, source = fork_source(src, value)
    check_reentry(agent, reentry, execution_id)
    cursor = cursor_at(
        reentry.node_id, reentry.status, reentry.node_input, src.state_snapshot, reentry.answers
    )
    eid = await point.create_branch(agent)
    origin_input = {"forked_from": execution_id, "source": source}
    await store.aput(
        rows.fork_origin(eid, src, src.state_snapshot, origin_input, agent_path=_agent_path(agent))
    )
    await rows.record_fork_answer(store, eid, value, src)
    return await drive(agent, store, eid, cursor)
