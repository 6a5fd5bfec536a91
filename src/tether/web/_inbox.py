"""The inbox: the pending approvals and runs listings of the page and the API.

Both are keyset pages over :class:`tether.store.Listings` (``?after=<execution_id>`` continues
after that entry, never ``OFFSET``), with filters, a sort for the pending list, counts, and
search by execution id. The query parameters (all optional):

- ``/pending``, ``/api/pending``: ``runner`` (``orders`` or ``chain:orders``), ``reason``,
  ``waiting`` (at least this long: ``90s``, ``15m``, ``2h``, ``3d``), ``q`` (part of an
  execution id), ``sort`` (``since``, ``runner``, ``step``, ``reason``), ``dir`` (``asc``,
  ``desc``), ``after``, ``limit`` (1-1000, default 100).
- ``/runs``, ``/api/runs``: ``status`` (``queued``, ``running``, ...), ``name`` (a runner),
  ``q``, ``after``, ``limit``.

A bad value is a 400 naming it. The API's body stays a list; the next page's address is in a
``Link: <...>; rel="next"`` header and the number of matching entries in ``X-Total-Count``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

import anyio.to_thread
from starlette.requests import Request

from .. import _durations as durations
from ..errors import ListingCursorError
from ..registry import Registry
from ..store import PENDING_SORTS, Listings, PendingQuery, RunsQuery
from ..store.base import Checkpointer
from ..views import (
    compact,
    missing_parents,
    pending_json,
    run_json,
    runner_filter,
    status_filter,
    time_left,
)
from ._service import ActionError

__all__ = ["Inbox", "Listing", "pending_query", "runs_query"]

T = TypeVar("T")

LIMIT_MAX = 1000
#: The "waiting at least" choices the page offers (any value of the same form is accepted).
WAITING_CHOICES = (("", "any time"), ("15m", "15 min"), ("1h", "1 hour"), ("1d", "1 day"))


def limit_of(text: str | None, default: int = 100) -> int:
    """A ``limit`` parameter: an integer from 1 to 1000.

    Raises:
        ActionError: (400) anything else.
    """
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= LIMIT_MAX:
        raise ActionError(400, f"limit must be an integer from 1 to {LIMIT_MAX}, got {text!r}")
    return value


def seconds_of(text: str) -> float:
    """The ``waiting`` parameter (``90s``, ``15m``, ``2h``, ``3d``) in seconds
    (:func:`tether._durations.parse_duration`).

    Raises:
        ActionError: (400) another form, or more than 36500 days.
    """
    try:
        return durations.parse_duration(text, "waiting").total_seconds()
    except ValueError as exc:
        raise ActionError(400, str(exc)) from None


def _text(params: Any, name: str) -> str | None:
    value = params.get(name)
    return value.strip() or None if isinstance(value, str) else None


def pending_query(params: Any) -> PendingQuery:
    """The :class:`PendingQuery` of a request's query parameters (counted).

    Raises:
        ActionError: (400) a bad limit, duration, sort or direction.
    """
    sort = _text(params, "sort") or "since"
    if sort not in PENDING_SORTS:
        raise ActionError(400, f"sort must be one of {', '.join(PENDING_SORTS)}, got {sort!r}")
    direction = _text(params, "dir") or "asc"
    if direction not in ("asc", "desc"):
        raise ActionError(400, f"dir must be asc or desc, got {direction!r}")
    waiting = _text(params, "waiting")
    return PendingQuery(
        runner_name=runner_filter(_text(params, "runner")),
        reason=_text(params, "reason"),
        waiting_seconds=None if waiting is None else seconds_of(waiting),
        search=_text(params, "q"),
        sort=sort,
        descending=direction == "desc",
        after=_text(params, "after"),
        limit=limit_of(_text(params, "limit")),
        count=True,
    )


def runs_query(params: Any) -> RunsQuery:
    """The :class:`RunsQuery` of a request's query parameters (counted).

    Raises:
        ActionError: (400) a bad status (one, or several comma-separated) or limit.
    """
    try:
        status = status_filter(_text(params, "status"))
    except ValueError as exc:
        raise ActionError(400, f"status: {exc}") from None
    return RunsQuery(
        status=status,
        runner_name=runner_filter(_text(params, "name")),
        app_version=_text(params, "version"),
        search=_text(params, "q"),
        after=_text(params, "after"),
        limit=limit_of(_text(params, "limit")),
        count=True,
    )


@dataclass(slots=True)
class Listing:
    """One page of a listing, as the page and the API show it.

    Attributes:
        items: the entries, as ``tether runs list --json`` / ``pending list --json`` print
            them (each with ``damaged``).
        total: how many entries the filters match.
        all_total: how many there are without filters (the heading's count).
        next_after: the execution_id to continue after, or ``None`` on the last page.
    """

    items: list[dict[str, Any]]
    total: int
    all_total: int
    next_after: str | None

    def next_url(self, path: str, params: dict[str, str]) -> str | None:
        """The address of the next page: ``path`` with ``params`` and ``after``."""
        if self.next_after is None:
            return None
        kept = {k: v for k, v in params.items() if v and k not in ("after", "start")}
        start = int(params.get("start") or 0) + len(self.items)
        return f"{path}?{urlencode({**kept, 'after': self.next_after, 'start': start})}"


class Inbox:
    """The listings, read off the event loop.

    Args:
        store: a store with paged listings (both built-in backends).
        registry: the server's runners (``runner_available`` of each pending entry).
    """

    def __init__(self, store: Checkpointer, registry: Registry) -> None:
        self.store = store
        self.registry = registry

    def _listings(self) -> Listings:
        if not isinstance(self.store, Listings):
            raise ActionError(501, f"{type(self.store).__name__} has no paged listings")
        return self.store

    async def _off_loop(self, fn: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(fn)

    async def runs(self, query: RunsQuery) -> Listing:
        """A page of runs, newest first."""

        def read() -> Listing:
            store = self._listings()
            page = store.list_runs_page(query)
            filtered = any((query.status, query.runner_name, query.app_version, query.search))
            every = store.list_runs_page(RunsQuery(limit=1, count=True)) if filtered else page
            pruned = missing_parents(self.store, page.items)
            items = [run_json(r, parent_pruned=r.parent_execution_id in pruned) for r in page.items]
            return Listing(items, page.total or 0, every.total or 0, page.next_after)

        return await self._read(read)

    async def pending(self, query: PendingQuery) -> Listing:
        """A page of pending interrupts with their runs' runner names."""

        def read() -> Listing:
            store = self._listings()
            page = store.list_pending_page(query)
            filtered = any((query.runner_name, query.reason, query.waiting_seconds, query.search))
            every = store.list_pending_page(PendingQuery(limit=1, count=True)) if filtered else page
            items = [
                {
                    **pending_json(e.pending),
                    "time_left": time_left(e.pending),
                    "runner_name": e.runner_name,
                    "runner_kind": e.runner_kind,
                    "run_error": e.run_error,
                    "runner_available": e.runner_name in self.registry,
                }
                for e in page.items
            ]
            return Listing(items, page.total or 0, every.total or 0, page.next_after)

        return await self._read(read)

    async def _read(self, read: Callable[[], Listing]) -> Listing:
        try:
            return await self._off_loop(read)
        except ListingCursorError as exc:  # the page's `after` entry is gone: say so (409)
            raise ActionError(409, exc.message) from None


def api_headers(request: Request, listing: Listing) -> dict[str, str]:
    """``X-Total-Count`` and, when another page follows, ``Link: <...>; rel="next"``."""
    headers = {"x-total-count": str(listing.total)}
    following = listing.next_url(request.url.path, dict(request.query_params))
    if following is not None:
        headers["link"] = f'<{following}>; rel="next"'
    return headers


def summary(value: Any, width: int = 90) -> str:
    """A context as one line for a table cell: ``key: value`` pairs of a dict, else its JSON,
    cut to ``width`` characters."""
    if isinstance(value, dict):
        parts = [f"{k}: {compact(v, 40)}" for k, v in value.items()]
        text = ", ".join(parts)
    else:
        text = compact(value, width)
    return text if len(text) <= width else text[: width - 1] + "…"


def sort_params(params: dict[str, str], key: str | None, direction: str | None) -> str:
    """``params`` as a query string for the first page of a listing, sorted by ``key`` in
    ``direction`` when given (the table's sortable headings)."""
    kept = {k: v for k, v in params.items() if v and k not in ("after", "start")}
    if key is not None:
        kept.update(sort=key, dir=direction or "asc")
    return urlencode(kept)


def age(when: Any) -> str:
    """How long ago ``when`` (an aware datetime) was: ``40 s``, ``5 min``, ``3 h``, ``2 d``."""
    if not isinstance(when, _dt.datetime):
        return "?"
    seconds = max(0.0, (_dt.datetime.now(_dt.UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"
