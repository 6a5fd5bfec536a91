"""Polling for a condition another thread or process brings about."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], what: str, timeout: float = 20.0) -> T:
    """Call ``predicate`` every 20 ms until it returns something truthy, and return that.

    Raises:
        AssertionError: ``timeout`` seconds passed first ("timed out waiting for <what>").
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
