"""Execution ids in URLs: how a page writes them and how a route reads them back.

An execution id is the caller's text: it may hold ``/``, ``?``, ``#`` or be ``..``. Written
into a link or a form action as it is, a browser normalises ``a/../../runs/b/approve`` into
``/runs/b/approve`` and an Approve button on one run's card answers another's. So:

- every id is written as **one** path segment, percent-encoded with nothing left safe
  (:func:`run_url`); the ids ``.`` and ``..``, which no encoding keeps from being read as dot
  segments (``%2E%2E`` is one too), are written as a query parameter
  (``/run?execution_id=..``) instead;
- routes read the id from the **raw** path (``scope["raw_path"]``, before any decoding), and
  only a path of exactly ``<prefix>/<one segment>[/<action>]`` reaches a run: an id split by a
  literal ``/`` or smuggled through ``%2F`` into an action's place matches nothing (404).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import quote, unquote, urlencode

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["DOT_IDS", "RunRoutes", "run_url"]

Handler = Callable[[Request], Awaitable[Response]]

#: Ids that are dot segments however they are encoded: served through ``?execution_id=``.
DOT_IDS = frozenset({"", ".", ".."})


def run_url(execution_id: str, action: str | None = None, *, prefix: str = "/runs") -> str:
    """The URL of a run (``/runs/<id>``) or of an action on it (``/runs/<id>/approve``).

    Args:
        execution_id: the run's id, any text.
        action: a sub-path such as ``"approve"``; ``None`` for the run itself.
        prefix: ``"/runs"`` for pages, ``"/api/runs"`` for the API.

    Returns:
        A path whose id is one percent-encoded segment (``"a/b"`` -> ``a%2Fb``), or for the
        ids in :data:`DOT_IDS` the query form ``/run[/<action>]?execution_id=..``.
    """
    if execution_id in DOT_IDS:
        alias = prefix[: -len("s")] if prefix.endswith("s") else prefix
        tail = f"/{action}" if action else ""
        return f"{alias}{tail}?execution_id={quote(execution_id, safe='')}"
    tail = f"/{action}" if action else ""
    return f"{prefix}/{quote(execution_id, safe='')}{tail}"


def run_page_url(execution_id: str, **query: str) -> str:
    """:func:`run_url` of a run's page with ``query`` parameters added (``notice=...``,
    ``checkpoint=...``), whichever form the id's address takes."""
    target = run_url(execution_id)
    joiner = "&" if "?" in target else "?"
    return f"{target}{joiner}{urlencode(query)}" if query else target


def parse_run_path(raw_path: str, prefix: str, query_id: str | None) -> tuple[str, str] | None:
    """``(execution_id, action)`` from a raw (still encoded) path, ``action`` ``""`` for the
    run itself; ``None`` when the path is not exactly one id segment and at most one action.
    """
    alias = prefix[:-1]
    if raw_path == alias or raw_path.startswith(alias + "/"):
        # /run[/<action>]?execution_id=...: only for ids no path segment can carry.
        if query_id is None or query_id not in DOT_IDS:
            return None
        rest = raw_path[len(alias) :]
        parts = rest.split("/")[1:] if rest else []
        if len(parts) > 1 or any(not p for p in parts):
            return None
        return query_id, (parts[0] if parts else "")
    if not raw_path.startswith(prefix + "/"):
        return None
    parts = raw_path[len(prefix) + 1 :].split("/")
    if len(parts) > 2 or not parts[0]:
        return None
    execution_id = unquote(parts[0], errors="strict")
    if execution_id in DOT_IDS:
        return None
    return execution_id, (parts[1] if len(parts) == 2 else "")


class RunRoutes:
    """One route for everything under ``/runs/<id>``: reads the id from the raw path and
    hands the request to the handler of its method and action, with
    ``request.path_params["execution_id"]`` set to the decoded id and
    ``request.path_params["action"]`` to the action (``""`` for the run itself).

    Args:
        prefix: ``"/runs"`` or ``"/api/runs"``.
        handlers: ``{(method, action): handler}``, action ``""`` for the run itself.
        not_found: builds the 404 for a path that names no run route.
    """

    def __init__(
        self,
        prefix: str,
        handlers: Mapping[tuple[str, str], Handler],
        not_found: Callable[[Request, str], Response],
    ) -> None:
        self.prefix = prefix
        self.handlers = dict(handlers)
        self.not_found = not_found

    async def dispatch(self, request: Request) -> Response:
        raw = request.scope.get("raw_path") or request.url.path.encode()
        raw_path = raw.decode("latin-1").split("?", 1)[0]
        try:
            found = parse_run_path(raw_path, self.prefix, request.query_params.get("execution_id"))
        except UnicodeDecodeError:
            found = None
        hint = (
            f"a run's address is {self.prefix}/<execution_id>[/<action>], the id "
            "percent-encoded as one segment (tenant/order-1 -> tenant%2Forder-1)"
        )
        if found is None:
            return self.not_found(request, f"no such page: {hint}")
        execution_id, action = found
        handler = self.handlers.get((request.method, action))
        if handler is None:
            if any(key[1] == action for key in self.handlers):
                allowed = ", ".join(sorted(m for m, a in self.handlers if a == action))
                return Response(
                    f"method not allowed (use {allowed})",
                    status_code=405,
                    headers={"allow": allowed},
                )
            return self.not_found(request, f"no action {action!r} on a run: {hint}")
        params = request.scope.setdefault("path_params", {})
        params["execution_id"], params["action"] = execution_id, action
        return await handler(request)
