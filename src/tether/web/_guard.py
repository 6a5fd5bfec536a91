"""The Host and Origin checks in front of every route (DNS rebinding, cross-site writes).

A page on ``evil.example`` whose name the attacker re-points at ``127.0.0.1`` (DNS rebinding)
talks to a local ``tether serve`` as if it were same-origin: the browser sends
``Host: evil.example:8000``. Serving only the host names the server was started for closes
that, with or without a token. A write (any method but GET, HEAD, OPTIONS) whose ``Origin``
is not the address it was sent to is refused too: a form on another local port is
"same-site" to a browser, and its cookies would ride along.

Both refusals are plain 403 responses that set no cookie, so a refused request never replaces
an operator's session.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ._auth import is_loopback

__all__ = ["LOOPBACK_NAMES", "HostGuard", "allowed_hosts_for"]

#: The names a browser uses for this machine.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Listening addresses that name no host (every interface).
_ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - compared, never bound


def allowed_hosts_for(listen_host: str, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The host names a server listening on ``listen_host`` answers to.

    A loopback address answers to every loopback name; ``0.0.0.0``/``::`` to none by
    itself (the names operators use must be given in ``extra``, e.g. with
    ``tether serve --allowed-host``); any other address to itself.
    """
    names = [h.strip("[]").lower() for h in extra if h.strip()]
    host = listen_host.strip("[]").lower()
    if is_loopback(host):
        names += [*LOOPBACK_NAMES, host]
    elif host not in _ANY_ADDRESS:
        names.append(host)
    return tuple(dict.fromkeys(names))


def host_name(value: str) -> str:
    """The host name of a ``Host`` header value (no port, no brackets, lower case)."""
    try:
        return (urlsplit(f"//{value}").hostname or "").lower()
    except ValueError:
        return ""


class HostGuard:
    """ASGI middleware: refuse a request whose ``Host`` is not one of ``allowed_hosts`` and a
    write whose ``Origin`` is not the request's own ``http(s)://<Host>``.

    Args:
        app: the application.
        allowed_hosts: host names (no ports) to serve; ``"*"`` serves any host (the Origin
            check still applies).
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(h.strip("[]").lower() for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if "*" not in self.allowed and host_name(host) not in self.allowed:
            shown = ", ".join(sorted(self.allowed)) or "none"
            refused = PlainTextResponse(
                f"refused: this server answers to {shown}, not to the host {host!r} "
                "(tether serve --allowed-host adds a name)",
                status_code=403,
            )
            await refused(scope, receive, send)
            return
        if scope["method"] not in _SAFE_METHODS:
            origin = headers.get("origin")
            if origin is not None and not _same_origin(origin, host):
                refused = PlainTextResponse(
                    f"refused: a write from {origin!r} to {host!r} (cross-site request)",
                    status_code=403,
                )
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _same_origin(origin: str, host: str) -> bool:
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()
