"""A CLI app (``--app tests.security.cli_app:app``) built on each import of the attribute, so
in-process CLI invocations against different stores each get runners on their own store."""

from __future__ import annotations

from typing import Any

from tests.security.runners import injection_chain
from tether.registry import Registry


def __getattr__(name: str) -> Any:
    if name == "app":  # the chain connects lazily to $TETHER_DATABASE_URL (set by the CLI)
        return Registry(injection_chain(None))
    raise AttributeError(name)
