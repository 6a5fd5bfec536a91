"""``Agent``: a durable LLM tool loop — the model asks for tools, the tools run, repeat — that
checkpoints before every model call and every tool (docs/design.md §1-4, §8, §9)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pydantic

from .._renames import check_renamed, current_name
from .._timeouts import check_timeout
from ..engine.claim import DEFAULT_CLAIM_LEASE_SECONDS
from ..engine.nesting import check_agent, join_path
from ..engine.sync import run_sync
from ..errors import ConfigurationError
from ..interrupt import Resume
from ..llm.base import LLM
from ..llm.messages import Message
from ..result import AgentResult
from ..store.base import Checkpointer
from .tool import Tool

if TYPE_CHECKING:
    from ..engine.nesting import Missing, ReEntry

__all__ = ["Agent"]

OutputGuardrail = Callable[[Any], None]


class Agent:
    """A durable agent.

    A run writes a ``turn:N`` row before the Nth model call and a ``turn:N/tool:<name>`` row,
    with the call's exact arguments, before each tool runs; each row's state is
    ``{"messages": [...], "turn": N, "usage": {...}}``. So a run that crashes re-asks the model
    with the saved history (crash around a model call) or re-invokes the tool with the saved
    arguments without calling the model (crash around a tool); a tool that calls
    :func:`tether.interrupt` pauses the run with no process alive. Wrap a tool's side effects in
    :func:`tether.idempotent` so a re-invoked tool does not repeat them.

    Args:
        name: the runner's name, recorded on each run; resume and fork refuse runs of another
            name. Also the ``agent:<name>`` segment of every row's ``agent_path``.
        llm: the model (:class:`tether.llm.LLM`: ``OpenAIChat``, ``AnthropicMessages``, a test
            double). It is configuration: its client and key are never checkpointed.
        tools: :class:`Tool` objects (``@tool``) or plain typed functions (wrapped with
            ``tool()``); names must be unique.
        system_prompt: prepended as a system message unless the input starts with one.
        checkpointer: where runs are stored; default: ``tether.connect()``.
        max_turns: the most model calls of the tool loop in one run (across resumes); when
            the model still asks for tools after that many, the run fails with
            :class:`~tether.agent.errors.MaxTurnsExceeded`. Corrective re-asks of the final
            answer do not count.
        output_type: a pydantic model: the final text must be a JSON object of it; it is sent
            back with a corrective message up to 2 times, then the run fails with
            :class:`~tether.agent.errors.OutputValidationError`.
        output_guardrail: ``guardrail(output) -> None`` called with the final output (the
            parsed model with ``output_type``, else the text); raising fails the run.
        claim_lease_seconds: how long a resumer's claim on a pending interrupt lasts without a
            heartbeat.
        model_timeout_seconds: the limit of each model call: past it the request is
            cancelled and the run fails with ``StepTimeoutError`` (resumable: a resume asks
            the model again). docs/design.md §12.
        renamed: ``{old_tool_name: new_tool_name}`` for tools a deploy renamed: a call of the
            old name (in a paused or crashed run's history, or from the model) runs the new
            tool (docs/design.md §13, rule 5).

    Raises:
        ConfigurationError: an empty name, ``max_turns`` below 1, duplicate tool names, an
            ``output_type`` that is not a pydantic model, an ``llm`` without ``acomplete``,
            or a bad rename map.

    Example::

        agent = Agent("support", llm=OpenAIChat("gpt-4o-mini"), tools=[lookup_refund])
        result = agent.run("Where is my refund for RF-1001?")
    """

    kind = "agent"

    def __init__(
        self,
        name: str,
        *,
        llm: LLM,
        tools: Sequence[Tool[Any, Any] | Callable[..., Any]] = (),
        system_prompt: str = "",
        checkpointer: Checkpointer | None = None,
        max_turns: int = 10,
        output_type: type[pydantic.BaseModel] | None = None,
        output_guardrail: OutputGuardrail | None = None,
        claim_lease_seconds: float = DEFAULT_CLAIM_LEASE_SECONDS,
        model_timeout_seconds: float | None = None,
        renamed: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigurationError("an Agent needs a non-empty name without '/'")
        if not callable(getattr(llm, "acomplete", None)):
            raise ConfigurationError(f"agent {name!r}: llm must have an async acomplete()")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigurationError(f"agent {name!r}: max_turns must be at least 1")
        if output_type is not None and not (
            isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel)
        ):
            raise ConfigurationError(f"agent {name!r}: output_type must be a pydantic model")
        self.name = name
        self.llm = llm
        self.tools: dict[str, Tool[Any, Any]] = {}
        for item in tools:
            t = item if isinstance(item, Tool) else Tool(item)
            if t.name in self.tools:
                raise ConfigurationError(f"agent {name!r}: two tools are named {t.name!r}")
            self.tools[t.name] = t
        self.renamed = check_renamed(renamed, f"agent {name!r}")
        self.system_prompt = system_prompt
        self._checkpointer = checkpointer
        self.max_turns = max_turns
        self.output_type = output_type
        self.output_guardrail = output_guardrail
        self.claim_lease_seconds = claim_lease_seconds
        self.model_timeout_seconds = check_timeout(
            model_timeout_seconds, f"agent {name!r}: model_timeout_seconds"
        )

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, tools={list(self.tools)})"

    def tool_named(self, name: str) -> Tool[Any, Any] | None:
        """The tool a call of ``name`` runs: the tool of that name, or, for a name a deploy
        renamed (``renamed=``), the tool it is now; ``None`` when the agent has neither."""
        return self.tools.get(current_name(self.renamed, name))

    @property
    def checkpointer(self) -> Checkpointer:
        """The store (opened on first use when none was given)."""
        if self._checkpointer is None:
            from ..connect import connect

            self._checkpointer = connect()
        return self._checkpointer

    # --- verbs ----------------------------------------------------------------------------
    async def arun(
        self, input: str | list[Message], *, execution_id: str | None = None
    ) -> AgentResult:
        """Start a run.

        Args:
            input: the user's message, or a whole starting history (``list[Message]``).
            execution_id: choose the run's id (default: a random 32-hex id).

        Returns:
            An :class:`AgentResult`: ``completed`` with the final ``output`` text (and
            ``parsed`` with ``output_type``), ``paused`` with ``pending_interrupt``, or
            ``failed`` with ``error`` (a tool's exception, a provider error,
            ``MaxTurnsExceeded``, ``OutputValidationError``, a guardrail's exception). A failed
            run stays resumable.

        Raises:
            ConfigurationError: a bad input, or the execution_id exists already.
            StoreError: the store failed.
        """
        from ._entry import start

        return await start(self, input, execution_id)

    async def aresume(
        self,
        execution_id: str,
        resume_value: Resume | None = None,
        *,
        agent_path: str | None = None,
    ) -> AgentResult:
        """Continue a run from its latest resumable row (docs/design.md §4).

        A ``turn:N`` row re-asks the model with the saved history; a ``turn:N/tool:X`` row
        re-invokes that tool with its saved arguments (no model call) and then the turn's later
        calls; an interrupted tool is re-invoked with the answer in scope and the turn's other
        unanswered calls get a tool message saying they did not run.

        Args:
            execution_id: the run.
            resume_value: the answer for a paused run's pending interrupt.
            agent_path: resume only if the row to re-enter lies in this ``agent_path`` subtree
                (e.g. ``"agent:support/tool:refund"``): a guard for a caller answering one
                tool's question, as on ``Chain``, ``Swarm`` and ``Supervisor``.

        Raises:
            RunNotFoundError: no such run.
            RunnerMismatchError: the run belongs to another runner.
            ChainResumeError: a paused run was resumed without an answer, or the value is not
                a ``Resume``; or ``agent_path`` was given without an answer and the run
                continues outside it.
            AlreadyResumed: the run completed, another caller claimed the interrupt, or a
                ``Resume`` was given where nothing is pending; or ``agent_path`` was given with
                an answer and the pending interrupt lies outside it.
            ConfigurationError: the run is paused in a tool this agent no longer has (renamed
                or removed); nothing was claimed and the interrupt stays pending
                (docs/design.md §5).
        """
        from ._entry import resume

        return await resume(self, execution_id, resume_value, agent_path)

    async def afork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
        state_updates: dict[str, Any] | None = None,
    ) -> AgentResult:
        """Branch a new run from a saved row and run it; the original is untouched.

        The branch's first row is a ``fork_origin`` linked by ``parent_checkpoint_id``; it
        ends with its own ``run_end``.

        Args:
            execution_id: the run to branch from (finished, failed, paused or running).
            checkpoint_id: the row to branch from; default: the newest non-tombstone.
            resume_value: when branching from an ``interrupted`` row, the answer the branch
                gives it; without one, the branch pauses at the same question.
            new_execution_id: the branch's id (default: random).
            state_updates: accepted for the runner-neutral verb; an agent's state is its
                message history, which a fork does not edit, so it must be empty.

        Raises:
            RunNotFoundError, RunnerMismatchError, CheckpointNotFoundError.
            ChainResumeError: a ``resume_value`` for a row that is not an interrupt.
            ConfigurationError: non-empty ``state_updates``; or the row is paused in a tool
                this agent no longer has (no branch is created).
        """
        from ._entry import fork

        if state_updates:
            raise ConfigurationError(
                f"agent {self.name!r}: a fork cannot edit an agent's state (its message "
                "history); fork without state_updates"
            )
        return await fork(
            self, execution_id, checkpoint_id, resume_value, new_execution_id=new_execution_id
        )

    async def nested(
        self, store: Checkpointer, eid: str, input: Any, reentry: ReEntry | None
    ) -> AgentResult:
        """Run inside the caller's run (a chain node, a supervisor's delegation): no run row,
        no ``run_end``; a pause raises ``ChildPaused`` (docs/design.md §8)."""
        from ._compose import run_agent

        return await run_agent(self, store, eid, input, reentry)

    def check_reentry(self, reentry: ReEntry, missing: Missing, parent: str | None) -> None:
        """The agent's level of ``tether.engine.nesting.check_reentry``."""
        check_agent(self, reentry, join_path(parent, f"agent:{self.name}"), missing)

    def run(self, input: str | list[Message], *, execution_id: str | None = None) -> AgentResult:
        """Sync twin of :meth:`arun`."""
        return run_sync(self.arun(input, execution_id=execution_id))

    def resume(
        self,
        execution_id: str,
        resume_value: Resume | None = None,
        *,
        agent_path: str | None = None,
    ) -> AgentResult:
        """Sync twin of :meth:`aresume`."""
        return run_sync(self.aresume(execution_id, resume_value, agent_path=agent_path))

    def fork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
        state_updates: dict[str, Any] | None = None,
    ) -> AgentResult:
        """Sync twin of :meth:`afork`."""
        return run_sync(
            self.afork(
                execution_id,
                checkpoint_id,
                resume_value=resume_value,
                new_execution_id=new_execution_id,
                state_updates=state_updates,
            )
        )
