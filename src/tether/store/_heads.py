"""The writer's memory of each run's newest row, so the step path never reads the database."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

from ._delta import Head

HEAD_CACHE_RUNS: Final = 256  # each head holds its run's encoded state


class HeadCache:
    """Bounded cache of run heads, keyed by execution_id, evicting the run whose head was
    stored longest ago (a writer stores its run's head on every row); safe to share between
    threads."""

    def __init__(self, size: int = HEAD_CACHE_RUNS) -> None:
        self._size = size
        self._heads: dict[str, Head] = {}  # oldest stored first
        self._lock = threading.Lock()
        # The dict's own get, without the lock (atomic under the GIL) or a Python frame: every
        # step takes one.
        self.get: Callable[[str], Head | None] = self._heads.get

    def set(self, execution_id: str, head: Head) -> None:
        """Remember ``head`` unless a newer one is known: a reader that loaded an older row
        must not move the head back under a writer that has since appended (a run's rows
        only grow, so the higher seq is always the truth)."""
        with self._lock:
            heads = self._heads
            known = heads.pop(execution_id, None)
            if known is not None and known.seq > head.seq:
                head = known
            heads[execution_id] = head  # at the end: the newest (a step's set, inlined)
            if len(heads) > self._size:
                del heads[next(iter(heads))]

    def drop(self, execution_id: str) -> None:
        with self._lock:
            self._heads.pop(execution_id, None)

    def reset(self, execution_id: str, head: Head) -> None:
        """Remember ``head`` whatever was known (a run row created anew)."""
        with self._lock:
            self._heads.pop(execution_id, None)
            self._store(execution_id, head)

    def clear(self) -> None:
        with self._lock:
            self._heads.clear()

    def _store(self, execution_id: str, head: Head) -> None:
        self._heads[execution_id] = head  # at the end: the newest
        if len(self._heads) > self._size:
            del self._heads[next(iter(self._heads))]
