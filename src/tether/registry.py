"""Name an application's runners in one importable object, so operators can reach them.

A stored run records the name of the runner that started it (``RunRecord.runner_name``), but
not its code: to resume or fork a run, a process needs the runner object itself. A
:class:`Registry` holds an application's runners by name; tools such as the ``tether`` CLI and
the approvals page import it (``--app myapp.workflows:app``) and look the right runner up for
any stored run with :meth:`Registry.for_run`.

Example::

    # myapp/workflows.py
    from tether import Chain, Registry

    refunds = Chain("refunds")
    ...
    app = Registry(refunds)

    # then, from a shell:
    #   tether approve 3f2a... --app myapp.workflows:app
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigurationError, RunnerMismatchError, RunNotFoundError
from .interrupt import Resume
from .store.base import Checkpointer, RunRecord

__all__ = ["Registry", "RunOutcome", "Runner", "load_app"]

_VERBS = ("aresume", "afork", "resume", "fork")


@runtime_checkable
class RunOutcome(Protocol):
    """What every runner's verbs return (``ChainResult``, ``AgentResult``)."""

    @property
    def status(self) -> str:
        """``completed``, ``paused`` or ``failed``."""

    @property
    def execution_id(self) -> str:
        """The run's id (a fork's own new id)."""

    @property
    def output(self) -> Any:
        """The final output on completion, else ``None``."""

    @property
    def pending_interrupt(self) -> dict[str, Any] | None:
        """For a pause: ``{reason, context, node_id, agent_path}``."""

    @property
    def error(self) -> BaseException | None:
        """For a failure: the exception that escaped."""


class Runner(Protocol):
    """Anything a registry can hold: ``Chain`` today, ``Agent``/``Swarm``/``Supervisor`` too.

    A runner has a ``name`` (recorded on each run it starts), a ``kind`` (``chain``, ``agent``,
    ``swarm``, ``supervisor``) and the resume and fork verbs of docs/design.md §1.
    """

    @property
    def name(self) -> str:
        """The name recorded on each run the runner starts."""

    @property
    def kind(self) -> str:
        """``chain``, ``agent``, ``swarm`` or ``supervisor``."""

    async def aresume(self, execution_id: str, resume_value: Resume | None = None) -> Any:
        """Continue a run (docs/design.md §4)."""

    async def afork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        state_updates: dict[str, Any] | None = None,
        resume_value: Resume | None = None,
    ) -> Any:
        """Branch a new run from a checkpoint (docs/design.md §9)."""

    def resume(self, execution_id: str, resume_value: Resume | None = None) -> Any:
        """Sync twin of :meth:`aresume`."""

    def fork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        state_updates: dict[str, Any] | None = None,
        resume_value: Resume | None = None,
    ) -> Any:
        """Sync twin of :meth:`afork`."""


def _check_runner(obj: object) -> Runner:
    missing = [a for a in ("name", "kind", *_VERBS) if not hasattr(obj, a)]
    if missing:
        raise ConfigurationError(
            f"{obj!r} is not a runner (a Chain, Agent, Swarm or Supervisor): it lacks "
            + ", ".join(missing)
        )
    name = obj.name  # type: ignore[attr-defined]
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"runner {obj!r} has no usable name (got {name!r})")
    return obj  # type: ignore[return-value]


class Registry:
    """An application's runners, by name.

    Args:
        *runners: the runners; each name must be unique within the registry.

    Raises:
        ConfigurationError: an argument is not a runner, or two runners share a name.

    Example::

        app = Registry(refunds_chain, support_agent)
        app.get("refunds").resume(execution_id)
    """

    def __init__(self, *runners: Runner) -> None:
        self._runners: dict[str, Runner] = {}
        for runner in runners:
            self.add(runner)

    def __repr__(self) -> str:
        return f"Registry({', '.join(repr(n) for n in self._runners)})"

    def __len__(self) -> int:
        return len(self._runners)

    def __iter__(self) -> Iterator[Runner]:
        return iter(self._runners.values())

    def __contains__(self, name: object) -> bool:
        return name in self._runners

    def add(self, runner: Runner) -> Runner:
        """Register one more runner and return it.

        Raises:
            ConfigurationError: not a runner, or its name is taken.
        """
        checked = _check_runner(runner)
        if checked.name in self._runners:
            raise ConfigurationError(
                f"two runners are named {checked.name!r}; runner names must be unique because "
                "each run records only its runner's name"
            )
        self._runners[checked.name] = checked
        return checked

    def names(self) -> list[str]:
        """The registered runner names, sorted."""
        return sorted(self._runners)

    def get(self, name: str) -> Runner:
        """The runner called ``name``.

        Raises:
            ConfigurationError: no runner has that name (the message lists those that do).
        """
        try:
            return self._runners[name]
        except KeyError:
            known = ", ".join(repr(n) for n in self.names()) or "none"
            raise ConfigurationError(
                f"no runner named {name!r} in this registry (registered: {known})"
            ) from None

    def for_run(self, store: Checkpointer, execution_id: str) -> Runner:
        """The runner that owns a stored run, found by the run's recorded ``runner_name``.

        Args:
            store: the checkpointer holding the run.
            execution_id: the run.

        Raises:
            RunNotFoundError: no run has this id in ``store``.
            ConfigurationError: the registry has no runner of the run's name.
            RunnerMismatchError: the runner of that name is of another kind than the one that
                started the run (e.g. an agent registered where a chain of that name ran).
        """
        return self._match(store.get_run(execution_id), store, execution_id)

    async def afor_run(self, store: Checkpointer, execution_id: str) -> Runner:
        """Async twin of :meth:`for_run`."""
        return self._match(await store.aget_run(execution_id), store, execution_id)

    def _match(self, run: RunRecord | None, store: Checkpointer, execution_id: str) -> Runner:
        if run is None:
            raise RunNotFoundError(
                f"no run with execution_id {execution_id!r} in {store!r}",
                execution_id=execution_id,
            )
        runner = self.get(run.runner_name)
        if run.runner_kind and runner.kind != run.runner_kind:
            raise RunnerMismatchError(
                f"run {execution_id!r} was started by a {run.runner_kind} named "
                f"{run.runner_name!r}, but the registry's {run.runner_name!r} is a {runner.kind}",
                expected=f"{runner.kind}:{runner.name}",
                found=f"{run.runner_kind}:{run.runner_name}",
                execution_id=execution_id,
            )
        return runner


def load_app(spec: str) -> Registry:
    """Import an application's runners from ``"package.module:attribute"``.

    The module is the caller's own application code, imported as ``import`` would (the current
    directory is put on ``sys.path`` first, as ``python -m`` does). ``attribute`` may be dotted
    (``module:obj.registry``) and defaults to ``app`` when the ``:`` part is left out.

    Args:
        spec: ``"module:attribute"`` naming a :class:`Registry`, a single runner, or a list or
            tuple of runners.

    Returns:
        A registry of the runners found.

    Raises:
        ConfigurationError: the spec is malformed, the module or attribute does not exist, or
            the object is not a registry or runner(s).
    """
    module_name, _, attr_path = spec.partition(":")
    module_name, attr_path = module_name.strip(), (attr_path.strip() or "app")
    if not module_name:
        raise ConfigurationError(f"app {spec!r} must look like 'package.module:attribute'")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigurationError(
                f"cannot import app module {module_name!r} (from {spec!r}): no such module; "
                "run from the project directory or set PYTHONPATH"
            ) from exc
        raise ConfigurationError(f"importing app module {module_name!r} failed: {exc}") from exc
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(
                f"app module {module_name!r} has no attribute {attr_path!r} (from {spec!r})"
            ) from None
    return _as_registry(obj, spec)


def _as_registry(obj: Any, spec: str) -> Registry:
    if isinstance(obj, Registry):
        return obj
    if isinstance(obj, list | tuple):
        return Registry(*_runners(obj, spec))
    try:
        return Registry(_check_runner(obj))
    except ConfigurationError:
        raise ConfigurationError(
            f"{spec!r} names a {type(obj).__name__}; expected a tether.Registry, a runner "
            "(Chain, Agent, ...) or a list of runners"
        ) from None


def _runners(items: Iterable[Any], spec: str) -> list[Runner]:
    out = []
    for item in items:
        try:
            out.append(_check_runner(item))
        except ConfigurationError as exc:
            raise ConfigurationError(f"{spec!r}: {exc.message}") from None
    return out
