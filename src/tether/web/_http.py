"""Small pieces every handler of the page and the API shares: the security headers of every
response, JSON responses, the capped request body, who a client is for the login throttle, and
the token check off the loop."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..cli._render import to_json
from ._auth import Sessions
from ._paths import run_page_url
from ._service import BODY_MAX_BYTES, ActionError

__all__ = [
    "SECURITY_HEADERS",
    "SecurityHeaders",
    "authenticate",
    "capped_body",
    "client_address",
    "json_response",
    "to_run_page",
    "too_many",
]


#: No script runs on these pages; styles come from our own static file only.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def to_run_page(execution_id: str, notice: str) -> Response:
    """The redirect (303) to a run's page after a form post, with a notice to show."""
    return RedirectResponse(run_page_url(execution_id, notice=notice), status_code=303)


def json_response(data: Any, status_code: int = 200) -> Response:
    """``data`` as the JSON the CLI prints with ``--json``."""
    return Response(to_json(data), status_code=status_code, media_type="application/json")


def client_address(request: Request) -> str:
    """Whom failed logins are counted against: the client's address."""
    return request.client.host if request.client is not None else "-"


def too_many(wait_seconds: float) -> str:
    """The refusal of a throttled client, naming how long to wait."""
    return f"Too many failed logins from this address; try again in {int(wait_seconds) + 1} s."


async def authenticate(sessions: Sessions, token: str | None) -> tuple[bool, str | None]:
    """:meth:`Sessions.authenticate`, off the event loop: a named user's token costs a
    scrypt."""
    return await anyio.to_thread.run_sync(sessions.authenticate, token)


async def capped_body(request: Request) -> bytes:
    """The request body, refused past :data:`BODY_MAX_BYTES` before it is all read.

    Raises:
        ActionError: (413) the body is larger.
    """
    too_large = ActionError(413, f"the request body is larger than {BODY_MAX_BYTES} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > BODY_MAX_BYTES:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > BODY_MAX_BYTES:
            raise too_large
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # request.form() then parses what was read here
    return body
