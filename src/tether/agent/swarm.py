"""``Swarm``: agents that hand one conversation to each other (docs/design.md §1, §3, §8).

Each agent of a swarm is offered a generated tool per agent it may hand off to,
``transfer_to_<agent>``; calling it ends that agent's turn and the named agent takes the
conversation over. Rows of a run, all under one ``execution_id``:

- ``handoff:N`` (``step_type="handoff"``, ``agent_path="swarm:<s>"``): before each agent takes
  over (``N = 0`` for the entrypoint), with state ``{"active": <agent>, "handoffs": N,
  "messages": [<the shared conversation, no system prompt; each assistant message of an agent
  that handed off carries its name in ``name``>], "usage": {...}}`` and
  ``node_input = {"from": <agent or None>, "to": <agent>}``;
- the active agent's own rows under ``swarm:<s>/agent:<a>`` (and ``.../tool:<t>``), each
  carrying the frame ``{"runner": "swarm", "name": <s>, "active": <a>, "handoffs": N}`` (see
  :mod:`tether.engine.nesting`);
- one ``run_end`` (``agent_path="swarm:<s>"``) when the swarm is the outermost runner.

Each agent sees the conversation behind its own system prompt. Its ``max_turns`` bounds each
time it is active; ``max_handoffs`` bounds the handoffs of the whole run.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._context import agent_path_scope
from ..engine import rows
from ..engine.claim import DEFAULT_CLAIM_LEASE_SECONDS
from ..engine.nesting import (
    OUTER_KEY,
    EndLoop,
    Missing,
    ReEntry,
    check_agent,
    join_path,
    outer_frame,
    outer_frames,
)
from ..errors import ConfigurationError
from ..llm.messages import Message, Usage
from ..result import AgentResult
from ._compose import as_input, run_agent
from ._verbs import CompositeVerbs
from .agent import Agent
from .tool import Tool

if TYPE_CHECKING:
    from ..store.base import Checkpointer

__all__ = ["Swarm"]

TRANSFER_PREFIX = "transfer_to_"


@dataclass(slots=True)
class _HandoffBox:
    """What the active agent's transfer tools see and set during one activation."""

    left: int
    target: str | None = None


_box: ContextVar[_HandoffBox | None] = ContextVar("tether_swarm_handoff", default=None)


@contextmanager
def _box_scope(box: _HandoffBox) -> Iterator[None]:
    token = _box.set(box)
    try:
        yield
    finally:
        _box.reset(token)


def _transfer_tool(target: str) -> Tool[[], EndLoop | str]:
    def transfer() -> EndLoop | str:
        box = _box.get()
        if box is None:
            return "Error: this agent is not running inside its swarm; nothing was transferred."
        if box.left <= 0:
            return (
                "Error: this run has used all its handoffs; nothing was transferred. Answer "
                "the user yourself."
            )
        box.target = target
        return EndLoop(f"Transferred the conversation to {target}.")

    return Tool(
        transfer,
        name=f"{TRANSFER_PREFIX}{target}",
        description=(
            f"Hand the conversation to the agent {target!r}, who answers the user from here on. "
            "Call it alone, as the last thing you do."
        ),
    )


def _conversation(messages: Sequence[Message]) -> list[Message]:
    """The shared conversation: the history without the active agent's system prompt."""
    return list(messages[1:] if messages and messages[0].role == "system" else messages)


def _signed(conversation: list[Message], author: str, since: int) -> list[Message]:
    """The conversation with the assistant messages from ``since`` on that have no author
    signed by ``author`` (``Message.name``): the agents after it, their models and a
    resume-aware ``ScriptedLLM`` then tell who said what in the shared history."""
    return [
        *conversation[:since],
        *(
            dataclasses.replace(m, name=author) if m.role == "assistant" and m.name is None else m
            for m in conversation[since:]
        ),
    ]


class Swarm(CompositeVerbs):
    """A durable swarm of agents that hand a conversation to each other.

    A crash resumes inside the agent that was active, at its own turn or tool row; agents that
    were active earlier are not run again and the handoffs already made are not re-asked. See
    the module docstring for the rows.

    Args:
        name: the runner's name, recorded on each run; also the ``swarm:<name>`` segment of
            every row's ``agent_path``. No ``/``.
        agents: the agents; names must be unique and fit a tool name (``[A-Za-z0-9_-]``, at
            most 52 characters, as ``transfer_to_<agent>`` must fit 64). The swarm offers each
            agent its transfer tools without changing the ``Agent`` objects.
        entrypoint: the name of the agent that answers first.
        handoffs: ``{agent: [agents it may transfer to]}``; an agent left out may transfer to
            every other agent (the default for all).
        max_handoffs: the most handoffs in one run (across resumes); after that, transfer
            tools answer the model with an error and nothing is transferred.
        checkpointer: where runs are stored; default: ``tether.connect()``.
        claim_lease_seconds: how long a resumer's claim on a pending interrupt lasts without a
            heartbeat.

    Raises:
        ConfigurationError: an empty or ``/``-holding name, no agents, duplicate or unusable
            agent names, an unknown entrypoint or handoff target, a self-handoff, a
            ``max_handoffs`` below 0, or an agent tool already named ``transfer_to_<agent>``.

    Example::

        desk = Swarm("desk", [triage, billing], entrypoint="triage")
        result = desk.run("I was charged twice")
    """

    kind = "swarm"

    def __init__(
        self,
        name: str,
        agents: Sequence[Agent],
        *,
        entrypoint: str,
        handoffs: Mapping[str, Sequence[str]] | None = None,
        max_handoffs: int = 8,
        checkpointer: Checkpointer | None = None,
        claim_lease_seconds: float = DEFAULT_CLAIM_LEASE_SECONDS,
    ) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigurationError("a Swarm needs a non-empty name without '/'")
        if not agents or not all(isinstance(a, Agent) for a in agents):
            raise ConfigurationError(f"swarm {name!r}: agents must be a non-empty list of Agent")
        by_name: dict[str, Agent] = {}
        for agent in agents:
            if agent.name in by_name:
                raise ConfigurationError(f"swarm {name!r}: two agents are named {agent.name!r}")
            by_name[agent.name] = agent
        if entrypoint not in by_name:
            raise ConfigurationError(f"swarm {name!r}: entrypoint {entrypoint!r} is no agent")
        if not isinstance(max_handoffs, int) or max_handoffs < 0:
            raise ConfigurationError(f"swarm {name!r}: max_handoffs must be 0 or more")
        routes = dict(handoffs or {})
        for source, targets in routes.items():
            unknown = [t for t in (source, *targets) if t not in by_name]
            if unknown or source in targets:
                raise ConfigurationError(
                    f"swarm {name!r}: handoffs[{source!r}] = {list(targets)!r} names "
                    + (f"unknown agents {unknown!r}" if unknown else "the agent itself")
                )
        self.name = name
        self.agents = by_name
        self.entrypoint = entrypoint
        self.handoffs = {a: list(routes.get(a, [b for b in by_name if b != a])) for a in by_name}
        self.max_handoffs = max_handoffs
        self._checkpointer = checkpointer
        self.claim_lease_seconds = claim_lease_seconds
        self._members = {a: self._member(by_name[a], self.handoffs[a]) for a in by_name}

    def __repr__(self) -> str:
        return f"Swarm({self.name!r}, agents={list(self.agents)}, entrypoint={self.entrypoint!r})"

    def _member(self, agent: Agent, targets: list[str]) -> Agent:
        member = copy.copy(agent)
        member.tools = dict(agent.tools)
        for target in targets:
            try:
                transfer = _transfer_tool(target)
            except ConfigurationError:
                raise ConfigurationError(
                    f"swarm {self.name!r}: agent name {target!r} cannot be part of a tool name "
                    "(use letters, digits, '_' or '-', at most 52 characters)"
                ) from None
            if transfer.name in member.tools:
                raise ConfigurationError(
                    f"swarm {self.name!r}: agent {agent.name!r} already has a tool named "
                    f"{transfer.name!r}"
                )
            member.tools[transfer.name] = transfer
        return member

    def check_reentry(self, reentry: ReEntry, missing: Missing, parent: str | None) -> None:
        """The swarm's level of ``tether.engine.nesting.check_reentry``: the active agent the
        row names must still be a member, and have the row's step."""
        path = join_path(parent, self.segment)
        own = reentry.is_own_row
        active = (reentry.state if own else reentry.frame("swarm", self.name)).get("active")
        member = self._members.get(active) if isinstance(active, str) else None
        if member is None:
            raise missing(f"agent {active!r}", f"swarm {self.name!r}")
        if not own:
            check_agent(member, reentry.deeper(), join_path(path, f"agent:{active}"), missing)

    async def nested(
        self, store: Checkpointer, eid: str, input: Any, reentry: ReEntry | None
    ) -> AgentResult:
        """Run the swarm inside the caller's run (see ``tether.agent._compose``).

        Raises:
            ChildPaused: an agent paused.
            ConfigurationError: ``reentry`` names an agent this swarm does not have.
        """
        with agent_path_scope(self.segment) as path:
            inner: ReEntry | None = None
            conversation: list[Message] = []
            usage = Usage()
            if reentry is None:
                first = as_input(input)
                conversation = _conversation(
                    [Message.user(first)] if isinstance(first, str) else first
                )
                active, handoffs = self.entrypoint, 0
                await self._put_handoff(store, eid, path, 0, None, active, conversation, usage)
            elif reentry.is_own_row:
                state = reentry.state
                active, handoffs = str(state["active"]), int(state["handoffs"])
                conversation = [Message.from_dict(m) for m in state["messages"]]
                usage = Usage.from_dict(state.get("usage") or {})
            else:
                own = reentry.frame("swarm", self.name)
                active, handoffs = str(own["active"]), int(own["handoffs"])
                inner = reentry.deeper()
            while True:
                agent = self._members.get(active)
                if agent is None:
                    raise ConfigurationError(
                        f"swarm {self.name!r} has no agent {active!r} to continue with "
                        "(was the swarm changed?)",
                        execution_id=eid,
                    )
                box = _HandoffBox(left=self.max_handoffs - handoffs)
                frame: dict[str, Any] = {"runner": "swarm", "name": self.name}
                frame.update(active=active, handoffs=handoffs)
                history = None if inner else self._history(agent, conversation)
                with outer_frame(frame), _box_scope(box):
                    result = await run_agent(
                        agent, store, eid, None, inner, messages=history, usage=usage
                    )
                # A re-entered activation's start is not known here; its new messages are the
                # unsigned ones, as every earlier activation's were signed at its handoff.
                since = 0 if inner else len(conversation)
                inner = None
                if box.target is None:
                    return result
                conversation = _signed(_conversation(result.messages), active, since)
                usage = result.usage
                handoffs += 1
                await self._put_handoff(
                    store, eid, path, handoffs, active, box.target, conversation, usage
                )
                active = box.target

    @staticmethod
    def _history(agent: Agent, conversation: list[Message]) -> list[Message]:
        if agent.system_prompt:
            return [Message.system(agent.system_prompt), *conversation]
        return list(conversation)

    async def _put_handoff(
        self,
        store: Checkpointer,
        eid: str,
        path: str,
        n: int,
        source: str | None,
        target: str,
        conversation: list[Message],
        usage: Usage,
    ) -> None:
        state: dict[str, Any] = {
            "active": target,
            "handoffs": n,
            "messages": [m.to_dict() for m in conversation],
            "usage": usage.to_dict(),
        }
        outer = outer_frames()
        if outer:
            state[OUTER_KEY] = outer
        await store.aput(
            rows.step(
                eid,
                f"handoff:{n}",
                "handoff",
                state,
                node_index=n,
                node_input={"from": source, "to": target},
                agent_path=path,
            )
        )
