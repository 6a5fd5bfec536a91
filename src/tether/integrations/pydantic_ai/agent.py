"""``TetherAgent``: a pydantic-ai ``Agent`` made a durable tether runner."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, NoReturn, TypeVar

from pydantic_ai.agent import AbstractAgent, EventStreamHandler
from pydantic_ai.messages import ModelMessage, UserContent
from pydantic_ai.usage import UsageLimits

from ...engine.claim import DEFAULT_CLAIM_LEASE_SECONDS
from ...engine.lease import DEFAULT_RUN_LEASE_SECONDS
from ...engine.sync import run_sync
from ...errors import ConfigurationError
from ...interrupt import Resume
from ...store.base import Checkpointer
from . import _drive
from ._input import RunInput
from .result import TetherRunResult

__all__ = ["TetherAgent"]

DepsT = TypeVar("DepsT")
OutputT = TypeVar("OutputT")


class TetherAgent(Generic[DepsT, OutputT]):
    """A pydantic-ai agent whose every model request and tool call is a checkpointed step.

    Wrap the agent once; its code, tools and output type stay as they are. Each completed model
    request and tool call is committed as a row of a tether run (the response or result in its
    state), so a run that crashes resumes in any process that reaches the store: the agent runs
    again from its start, and every step the run completed is answered from the store instead
    of being repeated (docs/pydantic_ai.md, "Replay"). A tool that needs approval
    (``requires_approval=True``, ``ApprovalRequired``), an external tool (``CallDeferred``) and
    :func:`tether.interrupt` inside the run pause it as a tether interrupt, answered with a
    :class:`~tether.Resume` from code, ``tether approve`` or the approvals page. It is a tether
    runner: register it in a :class:`~tether.Registry`, and ``tether worker``, ``tether fork``
    and ``tether prune`` handle its runs.

    Args:
        agent: the pydantic-ai agent (any ``AbstractAgent``).
        name: the runner's name, recorded on each run; default: the agent's ``name``.
        checkpointer: where runs are stored; default: ``tether.connect()``.
        deps_factory: makes the agent's ``deps`` for a drive that is given none (a worker's,
            the CLI's, the approvals page's); deps are never stored.
        event_stream_handler: the default ``event_stream_handler`` of each drive (streaming:
            model events of the steps a drive runs reach it as they stream).
        claim_lease_seconds: how long a resumer's claim on a pending interrupt lasts without a
            heartbeat.

    Raises:
        ConfigurationError: no usable name, or ``agent`` is not a pydantic-ai agent.

    Example::

        agent = Agent("openai:gpt-4o-mini", name="support", tools=[refund])
        durable = TetherAgent(agent, checkpointer=SQLiteCheckpointer("tether.db"))
        result = durable.run("Refund order A-1")   # .output is typed as the agent's output
    """

    kind = "pydantic_ai"
    # The run lease period: how long the process that drives a run holds it without a
    # heartbeat; once a crashed owner's lease lapses, a worker takes the run over (§10,
    # docs/workers.md).
    lease_seconds: float = DEFAULT_RUN_LEASE_SECONDS

    def __init__(
        self,
        agent: AbstractAgent[DepsT, OutputT],
        *,
        name: str | None = None,
        checkpointer: Checkpointer | None = None,
        deps_factory: Callable[[], DepsT] | None = None,
        event_stream_handler: EventStreamHandler[DepsT] | None = None,
        claim_lease_seconds: float = DEFAULT_CLAIM_LEASE_SECONDS,
    ) -> None:
        if not isinstance(agent, AbstractAgent):
            raise ConfigurationError(
                f"TetherAgent wraps a pydantic_ai.Agent, got {type(agent).__name__}"
            )
        name = name if name is not None else agent.name
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigurationError(
                "a TetherAgent needs a non-empty name without '/': give the pydantic-ai Agent a "
                "name (Agent(..., name='support')) or pass name="
            )
        self.name = name
        self.wrapped = agent
        self._checkpointer = checkpointer
        self.deps_factory = deps_factory
        self.event_stream_handler = event_stream_handler
        self.claim_lease_seconds = claim_lease_seconds

    def __repr__(self) -> str:
        return f"TetherAgent({self.name!r})"

    @property
    def segment(self) -> str:
        """This runner's ``agent_path`` segment: ``pydantic_ai:<name>``."""
        return f"{self.kind}:{self.name}"

    @property
    def checkpointer(self) -> Checkpointer:
        """The store (opened on first use when none was given)."""
        if self._checkpointer is None:
            from ...connect import connect

            self._checkpointer = connect()
        return self._checkpointer

    def _options(
        self, deps: DepsT | None, event_stream_handler: EventStreamHandler[DepsT] | None
    ) -> _drive.DriveOptions:
        if deps is None and self.deps_factory is not None:
            deps = self.deps_factory()
        return _drive.DriveOptions(deps, event_stream_handler or self.event_stream_handler)

    # --- verbs ----------------------------------------------------------------------------
    async def arun(
        self,
        user_prompt: str | Sequence[UserContent] | dict[str, Any] | None = None,
        *,
        execution_id: str | None = None,
        message_history: Sequence[ModelMessage] | None = None,
        instructions: str | None = None,
        model_settings: dict[str, Any] | None = None,
        usage_limits: UsageLimits | None = None,
        metadata: dict[str, Any] | None = None,
        deps: DepsT | None = None,
        event_stream_handler: EventStreamHandler[DepsT] | None = None,
    ) -> TetherRunResult[OutputT]:
        """Start a durable run: ``Agent.run`` with these arguments, every step checkpointed.

        Args:
            user_prompt: the prompt (text or pydantic-ai user content); a ``dict`` is an input
                as the run row stores it (a queued run's, from ``tether enqueue``).
            execution_id: choose the run's id (default: a random 32-hex id).
            message_history / instructions / model_settings / usage_limits / metadata: as for
                ``Agent.run``; stored with the run (JSON-able; ``instructions`` a ``str``).
            deps: the agent's deps for this drive (default: ``deps_factory()``); not stored.
            event_stream_handler: as for ``Agent.run``, for this drive.

        Returns:
            A :class:`TetherRunResult`: ``completed`` with the typed ``output``, ``paused`` with
            ``pending_interrupt``, or ``failed`` with ``error`` (the run stays resumable).

        Raises:
            ConfigurationError: no prompt and no history, or the execution_id exists already.
            SerializationError: a stored argument JSON cannot hold.
            StoreError: the store failed.
        """
        if isinstance(user_prompt, dict):
            run_input = RunInput.from_json(user_prompt)
        else:
            run_input = RunInput.of(
                user_prompt, message_history, instructions, model_settings, usage_limits, metadata
            )
        args = _drive.StartArgs(run_input, self._options(deps, event_stream_handler))
        result: TetherRunResult[OutputT] = await _drive.start(self, args, execution_id)
        return result

    async def aresume(
        self,
        execution_id: str,
        resume_value: Resume | None = None,
        *,
        deps: DepsT | None = None,
        event_stream_handler: EventStreamHandler[DepsT] | None = None,
    ) -> TetherRunResult[OutputT]:
        """Continue a run: replay it to the step it stopped at, and go on from there.

        Args:
            execution_id: the run.
            resume_value: the answer for a paused run's pending interrupt (see
                docs/pydantic_ai.md, "Approvals", for what it does to a tool call).
            deps / event_stream_handler: for this drive, as for :meth:`arun`.

        Raises:
            RunNotFoundError: no such run.
            RunnerMismatchError: the run belongs to another runner.
            ChainResumeError: a paused run was resumed without an answer, or the value is not
                a ``Resume``.
            AlreadyResumed: the run completed, another caller claimed the interrupt, or a
                ``Resume`` was given where nothing is pending.
            LeaseHeldError: a live process is executing the run.
        """
        result: TetherRunResult[OutputT] = await _drive.resume(
            self, execution_id, resume_value, self._options(deps, event_stream_handler)
        )
        return result

    async def afork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
        state_updates: dict[str, Any] | None = None,
        deps: DepsT | None = None,
        event_stream_handler: EventStreamHandler[DepsT] | None = None,
    ) -> TetherRunResult[OutputT]:
        """Branch a new run from a row and run it; the original is untouched.

        The branch keeps the steps up to and including that row and runs live from the next
        one (to ask a model request again, branch from the row before it). Its first row is a
        ``fork_origin`` linked by ``parent_checkpoint_id``.

        Args:
            execution_id: the run to branch from (finished, failed, paused or running).
            checkpoint_id: the row to branch from; default: the newest non-tombstone.
            resume_value: when branching from an ``interrupted`` row, the answer the branch
                gives it; without one, the branch pauses at the same question.
            new_execution_id: the branch's id (default: random).
            state_updates: accepted for the runner protocol; must be empty (a run's state is
                its journal).
            deps / event_stream_handler: for this drive, as for :meth:`arun`.

        Raises:
            RunNotFoundError, RunnerMismatchError, CheckpointNotFoundError.
            ChainResumeError: a ``resume_value`` for a row that is not an interrupt.
            ConfigurationError: non-empty ``state_updates``.
        """
        if state_updates:
            raise ConfigurationError(
                f"pydantic-ai runner {self.name!r}: a fork cannot edit a run's state (its "
                "journal of model and tool results); fork from another row instead"
            )
        result: TetherRunResult[OutputT] = await _drive.fork(
            self,
            execution_id,
            checkpoint_id,
            resume_value,
            self._options(deps, event_stream_handler),
            new_execution_id=new_execution_id,
        )
        return result

    def run(
        self,
        user_prompt: str | Sequence[UserContent] | dict[str, Any] | None = None,
        *,
        execution_id: str | None = None,
        message_history: Sequence[ModelMessage] | None = None,
        instructions: str | None = None,
        model_settings: dict[str, Any] | None = None,
        usage_limits: UsageLimits | None = None,
        metadata: dict[str, Any] | None = None,
        deps: DepsT | None = None,
        event_stream_handler: EventStreamHandler[DepsT] | None = None,
    ) -> TetherRunResult[OutputT]:
        """Sync twin of :meth:`arun`."""
        return run_sync(
            self.arun(
                user_prompt,
                execution_id=execution_id,
                message_history=message_history,
                instructions=instructions,
                model_settings=model_settings,
                usage_limits=usage_limits,
                metadata=metadata,
                deps=deps,
                event_stream_handler=event_stream_handler,
            )
        )

    def resume(
        self,
        execution_id: str,
        resume_value: Resume | None = None,
        *,
        deps: DepsT | None = None,
        event_stream_handler: EventStreamHandler[DepsT] | None = None,
    ) -> TetherRunResult[OutputT]:
        """Sync twin of :meth:`aresume`."""
        return run_sync(
            self.aresume(
                execution_id, resume_value, deps=deps, event_stream_handler=event_stream_handler
            )
        )

    def fork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
        state_updates: dict[str, Any] | None = None,
        deps: DepsT | None = None,
        event_stream_handler: EventStreamHandler[DepsT] | None = None,
    ) -> TetherRunResult[OutputT]:
        """Sync twin of :meth:`afork`."""
        return run_sync(
            self.afork(
                execution_id,
                checkpoint_id,
                resume_value=resume_value,
                new_execution_id=new_execution_id,
                state_updates=state_updates,
                deps=deps,
                event_stream_handler=event_stream_handler,
            )
        )

    # --- what a durable run does not offer ------------------------------------------------
    def _refuse(self, verb: str) -> NoReturn:
        raise ConfigurationError(
            f"TetherAgent({self.name!r}).{verb}: a durable run is not driven step by step or "
            "read as a stream, since a resume in another process could not hand the stream "
            "back; use arun/run with event_stream_handler=... to receive its events as they "
            "stream"
        )

    def run_stream(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused with :class:`~tether.ConfigurationError` (see :meth:`arun`'s
        ``event_stream_handler`` for streaming)."""
        self._refuse("run_stream")

    def run_stream_events(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`run_stream`."""
        self._refuse("run_stream_events")

    def iter(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`run_stream`."""
        self._refuse("iter")

    def run_sync(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the sync verb of a tether runner is :meth:`run`."""
        raise ConfigurationError(
            f"TetherAgent({self.name!r}).run_sync: call run(...) (tether's sync verb) or "
            "await arun(...)"
        )
