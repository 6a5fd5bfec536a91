"""``Supervisor`` and ``Worker``: a supervising agent that delegates tasks to worker agents
(docs/design.md §1, §3, §8).

The supervisor is itself a tool loop (an :class:`~tether.agent.Agent` under the hood) whose
tools are ``delegate_to_<role>(task)``, one per worker; a delegation runs the worker inside the
same run, and the worker's final answer is the tool's result. Rows of a run, all under one
``execution_id``:

- the supervisor's own ``turn:N`` rows under ``supervisor:<s>`` and its pre-tool rows
  ``turn:N/tool:delegate_to_<role>`` under ``supervisor:<s>/tool:delegate_to_<role>``, with the
  task in ``node_input["arguments"]``;
- the worker's rows under ``supervisor:<s>/worker:<role>`` (and ``.../tool:<t>``), each carrying
  the frame ``{"runner": "supervisor", "name": <s>, "role": <role>, "node_id": <the delegation's
  pre-tool node_id>, "node_input": {...}, "state": <the supervisor's state at it>}`` (see
  :mod:`tether.engine.nesting`);
- one ``run_end`` (``agent_path="supervisor:<s>"``) when the supervisor is the outermost runner.

So resuming a worker re-enters the supervisor at the delegation the worker runs in, without
asking the supervisor's model again, and re-enters the worker at its own row; a worker that
finished earlier is not run again (its answer is in the supervisor's history).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._context import current_agent_path, current_run
from ..engine.claim import DEFAULT_CLAIM_LEASE_SECONDS
from ..engine.nesting import (
    ChildPaused,
    Missing,
    ReEntry,
    agent_path_at,
    check_agent,
    current_tool_step,
    is_under,
    join_path,
    outer_frame,
)
from ..errors import ConfigurationError
from ..llm.base import LLM
from ..llm.messages import Usage
from ..result import AgentResult
from ._compose import as_input, run_agent
from ._entry import cursor_at, initial_messages
from ._executor import Cursor, drive, state_of
from ._verbs import CompositeVerbs
from .agent import Agent
from .tool import Tool

if TYPE_CHECKING:
    from ..store.base import Checkpointer

__all__ = ["Supervisor", "Worker"]

DELEGATE_PREFIX = "delegate_to_"


@dataclass(frozen=True, slots=True)
class Worker:
    """A worker of a :class:`Supervisor`.

    Attributes:
        agent: the agent that does the work; it runs inside the supervisor's run, its rows
            under ``supervisor:<s>/worker:<role>``.
        role: the worker's name in the supervisor: its tool is ``delegate_to_<role>``
            (``[A-Za-z0-9_-]``, at most 52 characters).
        description: what the worker is for; the supervisor's model reads it in the tool's
            description.
    """

    agent: Agent
    role: str
    description: str


@dataclass(slots=True)
class _PendingWorker:
    """The worker row a resumed supervisor hands to the delegation it re-enters first."""

    call_id: str | None = None
    reentry: ReEntry | None = None


_pending: ContextVar[_PendingWorker | None] = ContextVar("tether_pending_worker", default=None)


@contextmanager
def _pending_scope(pending: _PendingWorker) -> Iterator[None]:
    token = _pending.set(pending)
    try:
        yield
    finally:
        _pending.reset(token)


def _delegate_tool(supervisor: str, worker: Worker) -> Tool[[str], Any]:
    role = worker.role

    async def delegate(task: str) -> str:
        """Delegate a task.

        Args:
            task: what the worker should do, with every detail it needs; it sees nothing else.
        """
        run, step = current_run(), current_tool_step()
        if run is None or step is None:
            raise ConfigurationError(
                f"delegate_to_{role} runs only inside supervisor {supervisor!r}'s run"
            )
        pending = _pending.get()
        reentry = None
        if pending is not None and pending.call_id == step.tool_input["tool_call_id"]:
            reentry, pending.reentry, pending.call_id = pending.reentry, None, None
        here = current_agent_path() or ""
        frame = {
            "runner": "supervisor",
            "name": supervisor,
            "role": role,
            "node_id": step.node_id,
            "node_input": step.tool_input,
            "state": state_of(step.messages, step.turn, step.usage),
        }
        # The worker runs beside the delegating tool (supervisor:<s>/worker:<role>), not in it.
        with agent_path_at(here.rpartition("/")[0] or None), outer_frame(frame):
            result = await run_agent(
                worker.agent,
                run.checkpointer,
                run.execution_id,
                task,
                reentry,
                segment=f"worker:{role}",
            )
        return result.output or ""

    return Tool(
        delegate,
        name=f"{DELEGATE_PREFIX}{role}",
        description=f"Delegate a task to the {role} worker: {worker.description}",
    )


class Supervisor(CompositeVerbs):
    """A durable supervising agent that delegates tasks to worker agents.

    Worker A finishes, worker B pauses for a human: resuming answers B's question, B goes on
    from its own row, A is not run again and the supervisor's model is not asked again for
    delegations it already made. An answer given for B's interrupt answers only that one: a
    worker that asks later pauses the run again. See the module docstring for the rows.

    Args:
        name: the runner's name, recorded on each run; also the ``supervisor:<name>`` segment
            of every row's ``agent_path``. No ``/``.
        llm: the supervisor's model (:class:`tether.llm.LLM`).
        workers: the :class:`Worker` objects; roles must be unique.
        system_prompt: the supervisor's system prompt.
        checkpointer: where runs are stored; default: ``tether.connect()``.
        max_turns: the most model calls of the supervisor's own loop in one run.
        claim_lease_seconds: how long a resumer's claim on a pending interrupt lasts without a
            heartbeat.

    Raises:
        ConfigurationError: an empty or ``/``-holding name, no workers, a worker that is not a
            :class:`Worker` of an ``Agent``, a duplicate or unusable role, or a bad ``llm`` /
            ``max_turns`` (as for ``Agent``).

    Example::

        desk = Supervisor(
            "desk",
            llm=OpenAIChat("gpt-4o"),
            workers=[Worker(researcher, "research", "finds facts"),
                     Worker(writer, "write", "drafts replies")],
        )
        result = desk.run("Answer ticket T-12")
    """

    kind = "supervisor"

    def __init__(
        self,
        name: str,
        *,
        llm: LLM,
        workers: Sequence[Worker],
        system_prompt: str = "",
        checkpointer: Checkpointer | None = None,
        max_turns: int = 10,
        claim_lease_seconds: float = DEFAULT_CLAIM_LEASE_SECONDS,
    ) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigurationError("a Supervisor needs a non-empty name without '/'")
        if not workers:
            raise ConfigurationError(f"supervisor {name!r}: give at least one Worker")
        tools = []
        self.workers: dict[str, Worker] = {}
        for worker in workers:
            if not isinstance(worker, Worker) or not isinstance(worker.agent, Agent):
                raise ConfigurationError(
                    f"supervisor {name!r}: workers must be Worker(agent, role, description)"
                )
            if worker.role in self.workers:
                raise ConfigurationError(f"supervisor {name!r}: two workers are {worker.role!r}")
            try:
                tools.append(_delegate_tool(name, worker))
            except ConfigurationError:
                raise ConfigurationError(
                    f"supervisor {name!r}: role {worker.role!r} cannot be part of a tool name "
                    "(use letters, digits, '_' or '-', at most 52 characters)"
                ) from None
            self.workers[worker.role] = worker
        self.name = name
        self._checkpointer = checkpointer
        self.claim_lease_seconds = claim_lease_seconds
        self._loop = Agent(
            name,
            llm=llm,
            tools=tools,
            system_prompt=system_prompt,
            checkpointer=checkpointer,
            max_turns=max_turns,
            claim_lease_seconds=claim_lease_seconds,
        )

    def __repr__(self) -> str:
        return f"Supervisor({self.name!r}, workers={list(self.workers)})"

    @property
    def llm(self) -> LLM:
        """The supervisor's model."""
        return self._loop.llm

    def check_reentry(self, reentry: ReEntry, missing: Missing, parent: str | None) -> None:
        """The supervisor's level of ``tether.engine.nesting.check_reentry``: its own loop's
        row, or a row of a worker it still has."""
        path = join_path(parent, self.segment)
        if reentry.is_own_row:
            check_agent(self._loop, reentry, path, missing)
            return
        role = reentry.frame("supervisor", self.name).get("role")
        worker = self.workers.get(role) if isinstance(role, str) else None
        if worker is None:
            raise missing(f"worker {role!r}", f"supervisor {self.name!r}")
        check_agent(worker.agent, reentry.deeper(), join_path(path, f"worker:{role}"), missing)

    async def nested(
        self, store: Checkpointer, eid: str, input: Any, reentry: ReEntry | None
    ) -> AgentResult:
        """Run the supervisor inside the caller's run (see ``tether.agent._compose``).

        Raises:
            ChildPaused: the supervisor's loop or a worker paused.
            ConfigurationError: ``reentry`` does not fit this supervisor.
        """
        path = join_path(current_agent_path(), self.segment)
        pending = _PendingWorker()
        if reentry is None:
            cursor = Cursor(initial_messages(self._loop, as_input(input)), 0, Usage())
        elif reentry.is_own_row:
            if not is_under(reentry.agent_path, path):
                raise ConfigurationError(
                    f"cannot re-enter row {reentry.node_id!r} at {reentry.agent_path!r} as "
                    f"supervisor {path!r} (was the topology changed?)"
                )
            cursor = cursor_at(
                reentry.node_id, reentry.status, reentry.node_input, reentry.state, reentry.answers
            )
            cursor.claim_owner = reentry.claim_owner
        else:
            frame = reentry.frame("supervisor", self.name)
            if frame.get("role") not in self.workers:
                raise ConfigurationError(
                    f"supervisor {self.name!r} has no worker {frame.get('role')!r} to resume "
                    "(was the supervisor changed?)",
                    execution_id=eid,
                )
            cursor = cursor_at(frame["node_id"], "completed", frame["node_input"], frame["state"])
            pending = _PendingWorker(frame["node_input"]["tool_call_id"], reentry.deeper())
        with _pending_scope(pending):
            result = await drive(
                self._loop, store, eid, cursor, outermost=False, segment=self.segment
            )
        if result.status == "paused":
            raise ChildPaused(result)
        return result
