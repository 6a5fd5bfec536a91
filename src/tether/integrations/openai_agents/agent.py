"""``TetherAgent``: an OpenAI Agents SDK agent as a durable tether runner."""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import Agent, Model, RunConfig, RunHooks
from agents.run import DEFAULT_MAX_TURNS

from ...engine.claim import DEFAULT_CLAIM_LEASE_SECONDS
from ...engine.lease import DEFAULT_RUN_LEASE_SECONDS
from ...engine.sync import run_sync
from ...errors import ConfigurationError
from ...interrupt import Resume
from ...store.base import Checkpointer
from ._calls import JournalingProvider, capture_agent, instrument_model
from ._journal import segment
from ._result import TetherRunResult

__all__ = ["TetherAgent"]


class TetherAgent:
    """Make an OpenAI Agents SDK agent a durable tether runner (docs/openai-agents.md).

    ``durable.run(input)`` runs ``Runner.run(agent, input)`` with every model call and every
    function tool call journaled as a checkpoint row. A run that crashes resumes (``resume``,
    ``tether resume``, a worker) by replaying what the journal holds and going on live from the
    first call that is not in it: a completed model request is not sent again, a completed tool
    does not run again. A tool with ``needs_approval`` pauses the run as a tether interrupt
    (answered with ``resume(..., Resume(approved=...))``, ``tether approve``/``reject`` or the
    web page) and the run goes on from its ``RunState``; a function tool may also call
    :func:`tether.interrupt`. Handoffs stay in the one run, each row's ``agent_path`` naming
    the agent that wrote it. A run can be forked from any of its rows.

    Replay re-runs the SDK's own logic (hooks, guardrails, ``needs_approval`` callables) with
    the recorded answers; keep side effects in tools (wrap them with :func:`tether.idempotent`
    to make them exactly-once across a crash inside the tool).

    Args:
        agent: the starting agent; its handoffs, tools and models are used as they are.
        name: the runner's name, recorded on each run (default: ``agent.name``); resume and
            fork refuse runs of another name.
        checkpointer: where runs are stored; default: ``tether.connect()``.
        run_config: the SDK ``RunConfig`` every drive uses (model provider, model, tracing...).
            tether adds its journaling to a copy; ``call_model_input_filter`` still applies.
        hooks: the SDK ``RunHooks`` every drive uses.
        max_turns: the SDK's ``max_turns`` for each ``Runner.run`` of a drive.
        claim_lease_seconds: how long a resumer's claim on a pending interrupt lasts without a
            heartbeat.
        lease_seconds: the run lease of an in-process drive (``docs/workers.md``).

    Raises:
        ConfigurationError: ``agent`` is not an ``agents.Agent``, the name is empty or has a
            ``/``, or ``max_turns`` is below 1.

    Example::

        from agents import Agent, function_tool
        from tether import Resume
        from tether.integrations.openai_agents import TetherAgent

        @function_tool(needs_approval=True)
        def refund(order_id: str, amount: int) -> str: ...

        durable = TetherAgent(Agent(name="support", tools=[refund]))
        paused = durable.run("Refund order A-1")      # paused, waiting for approval
        done = durable.resume(paused.execution_id, Resume(approved=True))
    """

    kind = "openai_agents"

    def __init__(
        self,
        agent: Agent[Any],
        *,
        name: str | None = None,
        checkpointer: Checkpointer | None = None,
        run_config: RunConfig | None = None,
        hooks: RunHooks[Any] | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        claim_lease_seconds: float = DEFAULT_CLAIM_LEASE_SECONDS,
        lease_seconds: float = DEFAULT_RUN_LEASE_SECONDS,
    ) -> None:
        if not isinstance(agent, Agent):
            raise ConfigurationError(
                f"TetherAgent wraps an agents.Agent, got {type(agent).__name__}"
            )
        name = agent.name if name is None else name
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigurationError(
                f"a TetherAgent needs a non-empty name without '/' (got {name!r}); pass name="
            )
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigurationError(f"TetherAgent {name!r}: max_turns must be at least 1")
        self.agent = agent
        self.name = name
        self._checkpointer = checkpointer
        self.hooks = hooks
        self.max_turns = max_turns
        self.claim_lease_seconds = claim_lease_seconds
        self.lease_seconds = lease_seconds
        self.run_config = _journaling(run_config or RunConfig())

    def __repr__(self) -> str:
        return f"TetherAgent({self.name!r}, agent={self.agent.name!r})"

    @property
    def segment(self) -> str:
        """This runner's ``agent_path`` segment: ``openai_agents:<name>``."""
        return segment(self.kind, self.name)

    @property
    def checkpointer(self) -> Checkpointer:
        """The store (opened on first use when none was given)."""
        if self._checkpointer is None:
            from ...connect import connect

            self._checkpointer = connect()
        return self._checkpointer

    # --- verbs ----------------------------------------------------------------------------
    async def arun(
        self, input: Any, *, context: Any = None, execution_id: str | None = None
    ) -> TetherRunResult:
        """Start a run.

        Args:
            input: what ``Runner.run`` takes: a ``str`` or a list of input items. (A dict
                ``{"input": ..., "context": ...}``, the form a run row keeps, is taken too, so
                ``tether.enqueue`` can pass a context.)
            context: the SDK run context object, stored with the run (JSON, dataclass or
                pydantic model: see :mod:`tether.serde`) so a resume in any process gets it back.
            execution_id: choose the run's id (default: a random 32-hex id).

        Returns:
            A :class:`TetherRunResult`: ``completed`` with ``output``, ``paused`` with
            ``pending_interrupt``, or ``failed`` with ``error`` (a failed run stays resumable).

        Raises:
            ConfigurationError: the execution_id exists already.
            SerializationError: the input or context cannot be stored as JSON.
            StoreError: the store failed.
        """
        from ._drive import Start, start, start_of

        first = start_of(input) if isinstance(input, dict) else Start(input, context)
        return await start(self, first, execution_id)

    async def aresume(
        self, execution_id: str, resume_value: Resume | None = None
    ) -> TetherRunResult:
        """Continue a run: replay its journal and go on live (docs/design.md §4).

        Args:
            execution_id: the run.
            resume_value: the answer for a paused run's pending interrupt. For a tool waiting
                for approval, ``approved`` approves or rejects the call; a rejection tells the
                model ``data`` when it is a text (or ``{"message": text}``).

        Raises:
            RunNotFoundError: no such run.
            RunnerMismatchError: the run belongs to another runner.
            ChainResumeError: a paused run was resumed without an answer, or the value is not
                a ``Resume``.
            AlreadyResumed: the run completed, another caller claimed the interrupt, or a
                ``Resume`` was given where nothing is pending.
            LeaseHeldError: another live process is driving the run.
        """
        from ._drive import resume

        return await resume(self, execution_id, resume_value)

    async def afork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
        state_updates: dict[str, Any] | None = None,
    ) -> TetherRunResult:
        """Branch a new run from a row of a run and drive it; the original is untouched
        (docs/design.md §9). The branch replays the journal up to that row and goes on live.

        Args:
            execution_id: the run to branch from (finished, failed, paused or running).
            checkpoint_id: the row to branch from; default: the newest non-tombstone.
            resume_value: when branching from an interrupted row, the answer the branch gives
                it; without one, the branch pauses at the same question.
            new_execution_id: the branch's id (default: random).
            state_updates: must be empty: a run's state is its journal.

        Raises:
            RunNotFoundError, RunnerMismatchError, CheckpointNotFoundError.
            ChainResumeError: a ``resume_value`` for a row that is not an interrupt.
            ConfigurationError: non-empty ``state_updates``.
        """
        from ._drive import fork

        if state_updates:
            raise ConfigurationError(
                f"TetherAgent {self.name!r}: a fork cannot edit a run's state (its journal of "
                "model and tool calls); fork from an earlier row instead"
            )
        return await fork(
            self, execution_id, checkpoint_id, resume_value, new_execution_id=new_execution_id
        )

    def run(
        self, input: Any, *, context: Any = None, execution_id: str | None = None
    ) -> TetherRunResult:
        """Sync twin of :meth:`arun`."""
        return run_sync(self.arun(input, context=context, execution_id=execution_id))

    def resume(self, execution_id: str, resume_value: Resume | None = None) -> TetherRunResult:
        """Sync twin of :meth:`aresume`."""
        return run_sync(self.aresume(execution_id, resume_value))

    def fork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
        state_updates: dict[str, Any] | None = None,
    ) -> TetherRunResult:
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


def _journaling(config: RunConfig) -> RunConfig:
    """A copy of ``config`` whose models journal their calls (see :mod:`._calls`)."""
    if isinstance(config.model_provider, JournalingProvider):
        return config
    if isinstance(config.model, Model):
        instrument_model(config.model)
    return dataclasses.replace(
        config,
        model_provider=JournalingProvider(config.model_provider),
        call_model_input_filter=capture_agent(config.call_model_input_filter),
    )
