"""The writer's memory of each run's newest row, so the step path never reads the database."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

from ._delta import Head

HEAD_CACHE_RUNS: Final = 256  # each head holds its run's encoded state


class HeadCache:
    """Bounded LRU of run heads, keyed by execution_id; safe to share between threads."""

    def __init__(self, size: int = HEAD_CACHE_RUNS) -> None:
        self._size = size
        self._heads: OrderedDict[str, Head] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, execution_id: str) -> Head | None:
        with self._lock:
            head = self._heads.get(execution_id)
            if head is not None:
                self._heads.move_to_end(execution_id)
            return head

    def set(self, execution_id: str, head: Head) -> None:
        """Remember ``head`` unless a newer one is known: a reader that loaded an older row
        must not move the head back under a writer that has since appended (a run's rows
        only grow, so the higher seq is always the truth)."""
        with self._lock:
            known = self._heads.get(execution_id)
            if known is not None and known.seq > head.seq:
                return
            self._heads[execution_id] = head
            self._heads.move_to_end(execution_id)
            if len(self._heads) > self._size:
                self._heads.popitem(last=False)

    def drop(self, execution_id: str) -> None:
        with self._lock:
            self._heads.pop(execution_id, None)

    def reset(self, execution_id: str, head: Head) -> None:
        """Remember ``head`` whatever was known (a run row created anew)."""
        with self._lock:
            self._heads[execution_id] = head
            self._heads.move_to_end(execution_id)
            if len(self._heads) > self._size:
                self._heads.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._heads.clear()
