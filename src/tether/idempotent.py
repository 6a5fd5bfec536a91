"""``@idempotent``: run a side effect at most once per run and argument set (docs/design.md §6).

A re-entered step runs from its top, so anything it did before the resume point fires again.
Inside a run, the first call with a given key runs the body and caches its JSON result under
``(execution_id, key)``; later calls with that key in the same run return the cached value and
do not run the body. Outside any run it is a plain call (with a ``RuntimeWarning`` when runs
execute in the process meanwhile: a thread a node started without the run's context). Calls
with one key that overlap in a run (``asyncio.gather``, threads) run the body once
(:mod:`tether._flights`).

The default key is the sha256 of the function's qualified name and its canonically
JSON-encoded, signature-bound arguments, so ``f(1, b=2)`` and ``f(1, 2)`` share a key; a
lambda adds its place in its file and a nested function the values it captured that cannot
change (strings, numbers...: see :func:`_identity`), so two of them never share a key. Pass
``key=`` (a string, or a callable taking the same arguments) to choose it. While the body runs,
:func:`current_idempotency_key` returns the key, ready to pass on as a provider's idempotency
key (a payment API's ``Idempotency-Key`` header) so the effect is also deduplicated remotely.

Guarantee: exactly once when the process survives the body; if the process dies after the body
ran but before its result was cached, the body runs again on resume (at-least-once) unless the
provider deduplicates on the passed-on key.

A result that cannot be stored (not JSON-able, or of a class the decoder cannot find by name,
such as one defined inside a function) is found out only after the body ran, when the effect
has happened. tether then caches a record that the body ran and its result was lost, and
raises :class:`~tether.errors.SerializationError` naming the result's path; later calls with
that key in the run raise the same error instead of running the body again, so the effect is
never repeated silently (docs/design.md §6).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import warnings
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, ParamSpec, Protocol, TypeVar, cast, overload

from . import _flights, serde
from ._context import active_runs, current_run
from ._faults import fault
from .errors import ConfigurationError, SerializationError

__all__ = ["Idempotent", "current_idempotency_key", "idempotent"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Idempotent(Protocol[P, R_co]):
    """What :func:`idempotent` returns: the function, with its signature kept, and the key a
    call would use (a type checker sees both)."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    def idempotency_key(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """The idempotency key a call with these arguments uses (hex sha256, or ``key=``'s)."""
        ...


_current_key: ContextVar[str | None] = ContextVar("tether_idempotency_key", default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class _ResultNotStored:
    """Cached in place of a result that could not be stored: the body ran, its result is lost.

    A module-level dataclass, so the decoder reads it back by name in any process.
    """

    function: str
    message: str
    path: str
    type_name: str

    def error(self) -> SerializationError:
        return SerializationError(
            f"@idempotent {self.function}: the body ran and its effect stands, but its result "
            f"could not be cached ({self.message}). It does not run again for this key in "
            "this run, so the effect is not repeated: return plain data or a module-level "
            "class, then choose a new key (key=...) to run it again on purpose, or fork the "
            "run from a checkpoint before this step",
            path=self.path,
            type_name=self.type_name,
        )


def _cached(value: Any) -> Any:
    """A cache hit's value; raises for a body whose result was lost (see the module doc)."""
    if isinstance(value, _ResultNotStored):
        raise value.error()
    return value


def _lost(fn: Callable[..., Any], exc: SerializationError) -> _ResultNotStored:
    return _ResultNotStored(
        f"{fn.__module__}.{fn.__qualname__}", exc.message, exc.path, exc.type_name
    )


def _warn_outside_run(fn: Callable[..., Any]) -> None:
    """A call outside any run while runs execute in this process is most likely a call from a
    thread a node started, which did not inherit the run: it would repeat on resume."""
    if not active_runs():
        return
    warnings.warn(
        f"@idempotent {fn.__module__}.{fn.__qualname__} was called outside any tether run "
        "while runs are executing in this process, so it ran as a plain call that a resume "
        "repeats. A thread started inside a node does not inherit its run: submit with "
        "contextvars.copy_context().run(fn, ...) or use asyncio.to_thread (docs/design.md §6)",
        RuntimeWarning,
        stacklevel=3,
    )


def current_idempotency_key() -> str | None:
    """The key of the ``@idempotent`` body running now, or ``None`` outside one."""
    return _current_key.get()


def _derive_key(
    fn: Callable[..., Any],
    sig: inspect.Signature | None,
    key: str | Callable[..., str] | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str:
    if isinstance(key, str):
        return key
    if key is not None:
        k = key(*args, **kwargs)
        if not isinstance(k, str):
            raise ConfigurationError(f"key= callable of {fn.__qualname__} must return str")
        return k
    if sig is not None:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        payload: Any = dict(bound.arguments)
    else:
        payload = {"args": list(args), "kwargs": kwargs}
    name = f"{fn.__module__}.{fn.__qualname__}"
    try:
        encoded = serde.canonical_dumps(payload, path=f"arguments of {name}")
    except SerializationError as exc:
        raise SerializationError(
            f"@idempotent cannot derive a key for {name}: {exc.message}; pass key= to choose one",
            path=exc.path,
            type_name=exc.type_name,
        ) from exc
    return hashlib.sha256(_identity(fn, name).encode() + b"\0" + encoded).hexdigest()


_SCALARS: tuple[type, ...] = (str, int, float, bool, bytes, type(None))


def _identity(fn: Callable[..., Any], name: str) -> str:
    """What tells ``fn`` from the other functions of its qualified ``name`` in its module
    (docs/design.md §6): nothing for a module-level function or a method (their keys are what
    they always were); a lambda's place in its file; a nested function's captured values.

    A nested function made twice by one factory, or two lambdas of one module, share their
    qualified name: by name alone, the second would be handed the first's cached result and
    its body would never run. A captured value counts when it cannot change: a number, a
    string, bytes, ``None``, or a tuple or frozenset of those; a function or class by its
    qualified name; anything else (a client, a list the body appends to) by its type's name
    only, so a body that mutates what it captured keeps its key on a re-entered step.
    """
    qualname = fn.__qualname__
    if "<" not in qualname:  # neither <lambda> nor <locals>
        return name
    code = getattr(fn, "__code__", None)
    if code is None:  # pragma: no cover - a callable object with a nested class's qualname
        return name
    parts = [name]
    if qualname.endswith("<lambda>"):
        # The body's first position (the RESUME before it has none of its own): two lambdas
        # on one line differ by their column.
        body = [(line, col) for line, _, col, end in code.co_positions() if end]
        parts.append(f"@{body[0][0]}:{body[0][1]}" if body else f"@{code.co_firstlineno}")
    for var, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not yet bound
            value = None
        parts.append(f"{var}={_captured(value)}")
    return "\0".join(parts)


def _captured(value: Any) -> str:
    if isinstance(value, _SCALARS) or (
        isinstance(value, tuple | frozenset) and all(isinstance(v, _SCALARS) for v in value)
    ):
        items = sorted(value, key=repr) if isinstance(value, frozenset) else value
        return f"{type(value).__name__}:{items!r}"
    if inspect.isfunction(value) or inspect.isclass(value):
        return f"{value.__module__}.{value.__qualname__}"
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


@overload
def idempotent(fn: Callable[P, R], /) -> Idempotent[P, R]: ...
@overload
def idempotent(
    *, key: str | Callable[..., str] | None = None
) -> Callable[[Callable[P, R]], Idempotent[P, R]]: ...


def idempotent(
    fn: Callable[P, R] | None = None, /, *, key: str | Callable[..., str] | None = None
) -> Idempotent[P, R] | Callable[[Callable[P, R]], Idempotent[P, R]]:
    """Make ``fn`` run at most once per run and key; sync and ``async def`` both work.

    Args:
        fn: the side-effecting function (its result must be JSON-able, see :mod:`tether.serde`).
        key: a fixed key, or a callable ``key(*args, **kwargs) -> str``; default: sha256 of
            the qualified name and the canonically encoded arguments.

    Returns:
        The wrapped function (an :class:`Idempotent`: same signature), with
        ``.idempotency_key(*args, **kwargs) -> str``.

    Raises:
        SerializationError: the arguments have no canonical JSON encoding (and no ``key=``); or
            the result cannot be cached (after the body ran: see the module docstring), and
            then on every later call with that key in the run.

    Warns:
        RuntimeWarning: a call outside any run while runs execute in this process (most
            likely from a thread a node started without the run's context): it runs as a
            plain call that a resume repeats (docs/design.md §6).

    A call whose key another call in the same run holds at that moment waits for it, then
    returns its cached result (:mod:`tether._flights`, docs/design.md §6).
    """

    def decorate(f: Callable[P, R]) -> Idempotent[P, R]:
        try:
            sig: inspect.Signature | None = inspect.signature(f)
        except (TypeError, ValueError):  # pragma: no cover - builtins without signatures
            sig = None

        def key_of(*args: Any, **kwargs: Any) -> str:
            return _derive_key(f, sig, key, args, kwargs)

        if inspect.iscoroutinefunction(f):
            af = cast(Callable[..., Awaitable[Any]], f)

            @functools.wraps(f)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                ctx = current_run()
                if ctx is None:
                    _warn_outside_run(f)
                    return await af(*args, **kwargs)
                k = key_of(*args, **kwargs)
                slot = (ctx.execution_id, k)
                held = await _flights.hold_async(slot)
                try:
                    hit, value = await ctx.checkpointer.aget_idempotent(ctx.execution_id, k)
                    if hit:
                        return _cached(value)
                    token = _current_key.set(k)
                    try:
                        with _flights.holding(slot):
                            result = await af(*args, **kwargs)
                    finally:
                        _current_key.reset(token)
                    fault("idempotent.after_effect")
                    try:
                        await ctx.checkpointer.aput_idempotent(ctx.execution_id, k, result)
                    except SerializationError as exc:
                        lost = _lost(f, exc)
                        await ctx.checkpointer.aput_idempotent(ctx.execution_id, k, lost)
                        raise lost.error() from exc
                    fault("idempotent.after_cache")
                    return result
                finally:
                    if held is not None:
                        _flights.release(slot, held)

            return _with_key(async_wrapper, key_of)

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = current_run()
            if ctx is None:
                _warn_outside_run(f)
                return f(*args, **kwargs)
            k = key_of(*args, **kwargs)
            slot = (ctx.execution_id, k)
            held = _flights.hold(slot)
            try:
                hit, value = ctx.checkpointer.get_idempotent(ctx.execution_id, k)
                if hit:
                    return _cached(value)
                token = _current_key.set(k)
                try:
                    with _flights.holding(slot):
                        result = f(*args, **kwargs)
                finally:
                    _current_key.reset(token)
                fault("idempotent.after_effect")
                try:
                    ctx.checkpointer.put_idempotent(ctx.execution_id, k, result)
                except SerializationError as exc:
                    lost = _lost(f, exc)
                    ctx.checkpointer.put_idempotent(ctx.execution_id, k, lost)
                    raise lost.error() from exc
                fault("idempotent.after_cache")
                return result
            finally:
                if held is not None:
                    _flights.release(slot, held)

        return _with_key(wrapper, key_of)

    if fn is not None:
        return decorate(fn)
    return decorate


def _with_key(wrapper: Callable[..., Any], key_of: Callable[..., str]) -> Idempotent[P, R]:
    wrapper.idempotency_key = key_of  # type: ignore[attr-defined]
    return cast("Idempotent[P, R]", wrapper)
