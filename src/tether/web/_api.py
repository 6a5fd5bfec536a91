"""The JSON API under ``/api/`` (docs/web.md, "JSON API"): ``Authorization: Bearer <token>``
on every route, never a cookie; answers only as ``application/json``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ._auth import Sessions
from ._body import ANSWER, read_body
from ._http import authenticate, client_address, json_response, too_many
from ._inbox import Inbox, Listing, api_headers, limit_of, pending_query, runs_query
from ._service import ActionError, Answer, Service
from ._users import Throttle

__all__ = ["Api"]


class Api:
    """The API's route handlers; one instance per application.

    Args:
        throttle: the login throttle the pages share: a wrong bearer token counts as a failed
            login of its client.
    """

    def __init__(
        self, service: Service, inbox: Inbox, sessions: Sessions, throttle: Throttle
    ) -> None:
        self.service = service
        self.inbox = inbox
        self.sessions = sessions
        self.throttle = throttle

    async def user(self, request: Request) -> tuple[Response | None, str | None]:
        """``(refusal, user)``: a 401 or 429 to send back, or ``None`` and the named user the
        bearer token belongs to (``None`` under the shared token)."""
        if not self.sessions.required:
            return None, None
        client = client_address(request)
        wait = self.throttle.retry_after_seconds(client)
        if wait:
            body = {"error": "too_many_failures", "message": too_many(wait)}
            refusal = json_response(body, 429)
            refusal.headers["retry-after"] = str(int(wait) + 1)
            return refusal, None
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            ok, user = await authenticate(self.sessions, value.strip())
            if ok:
                return None, user
        self.throttle.failed(client)
        return _unauthorized(), None

    async def _denied(self, request: Request) -> Response | None:
        return (await self.user(request))[0]

    async def runs(self, request: Request) -> Response:
        return await self._listing(request, runs_query, self.inbox.runs)

    async def pending(self, request: Request) -> Response:
        return await self._listing(request, pending_query, self.inbox.pending)

    async def _listing(
        self,
        request: Request,
        parse: Callable[[Any], Any],
        read: Callable[[Any], Awaitable[Listing]],
    ) -> Response:
        if denied := await self._denied(request):
            return denied
        try:
            listing = await read(parse(request.query_params))
        except ActionError as exc:
            return json_response({"error": exc.message}, exc.status_code)
        response = json_response(listing.items)
        response.headers.update(api_headers(request, listing))
        return response

    async def run(self, request: Request) -> Response:
        if denied := await self._denied(request):
            return denied
        try:
            shown = await self.service.run(
                request.path_params["execution_id"],
                request.query_params.get("checkpoint") or None,
            )
            return json_response(shown)
        except ActionError as exc:
            return json_response({"error": exc.message}, exc.status_code)

    async def audit(self, request: Request) -> Response:
        if denied := await self._denied(request):
            return denied
        try:
            since = request.query_params.get("since") or "7d"
            limit = limit_of(request.query_params.get("limit"), 500)
            return json_response(await self.service.audit(since, limit))
        except ActionError as exc:
            return json_response({"error": exc.message}, exc.status_code)

    async def answer(self, request: Request) -> Response:
        denied, user = await self.user(request)
        if denied is not None:
            return denied
        try:
            body = await read_body(request, ANSWER)
            answer = Answer(
                request.path_params["action"] == "approve",
                body.get("note"),
                body.get("data"),
                checkpoint_id=body.get("checkpoint_id"),
                via="api",
                actor=user,
            )
            outcome = await self.service.answer(request.path_params["execution_id"], answer)
        except ActionError as exc:
            return json_response({"error": exc.message}, exc.status_code)
        return json_response(outcome)


def _unauthorized() -> Response:
    refusal = json_response(
        {"error": "unauthorized", "message": "send Authorization: Bearer <token>"}, 401
    )
    refusal.headers["www-authenticate"] = 'Bearer realm="tether"'
    return refusal
