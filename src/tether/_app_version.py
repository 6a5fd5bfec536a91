"""Which version of the application's code a run was started by (docs/design.md §13).

A process declares its version with ``Registry(version=...)`` (bound to the registry's
runners here) or the ``TETHER_APP_VERSION`` environment variable (every runner, with or
without a registry). Each new run records the version of the runner that starts it; a
worker claims only runs of the versions it serves.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable
from typing import Any, Final

from .errors import ConfigurationError

__all__ = ["ENV_VAR", "bind", "check_version", "from_env", "of_runner"]

ENV_VAR: Final = "TETHER_APP_VERSION"

# Runner -> the version its registry declares. Weak: a registry does not keep runners alive.
_bound: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def check_version(version: Any, what: str = "version") -> str:
    """``version`` if it is a usable version string.

    Raises:
        ConfigurationError: not a non-empty string without commas or surrounding spaces
            (a comma separates versions in ``tether worker --versions``).
    """
    if not isinstance(version, str) or not version or version != version.strip():
        raise ConfigurationError(
            f"{what} must be a non-empty string without surrounding spaces, got {version!r}"
        )
    if "," in version:
        raise ConfigurationError(f"{what} {version!r} must not contain a comma")
    return version


def from_env() -> str | None:
    """The version in ``TETHER_APP_VERSION`` (``None`` when unset or empty).

    Raises:
        ConfigurationError: the variable holds an unusable version.
    """
    raw = os.environ.get(ENV_VAR)
    if raw is None or not raw.strip():
        return None
    return check_version(raw.strip(), ENV_VAR)


def bind(runners: Iterable[Any], version: str) -> None:
    """Record that ``runners`` run as ``version`` (their registry's)."""
    for runner in runners:
        _bound[runner] = version


def of_runner(runner: Any) -> str | None:
    """The version a new run of ``runner`` records: its registry's, else the environment's."""
    try:
        bound = _bound.get(runner)
    except TypeError:  # an unhashable runner cannot be bound; only the environment applies
        bound = None
    return bound if bound is not None else from_env()
