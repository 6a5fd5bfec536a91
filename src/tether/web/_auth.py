"""Who may use the page and the API, and the CSRF check on every form post.

- **API** (``/api/...``): ``Authorization: Bearer <TETHER_UI_TOKEN>``. No cookie is ever
  accepted there, so a browser on another site cannot ride an operator's login; and a write
  must be sent as ``application/json``, which a cross-site form cannot send.
- **Pages**: the login form takes the token and sets an HttpOnly, ``SameSite=Strict`` session
  cookie. Every visitor, logged in or not (and every visitor under ``--no-auth``), holds a
  signed session; each form carries that session's CSRF token in a hidden field, and a post
  without the matching token is refused (403).

Sessions are stateless: ``<nonce>.<authenticated 0|1>.<issued, unix seconds>.<user>.<HMAC>``,
refused once older than :data:`SESSION_MAX_AGE_SECONDS`. The key derives from the token, so
changing ``TETHER_UI_TOKEN`` logs everyone out; without one (``--no-auth``, or named users
only) it is random per process. ``<user>`` is the named user who logged in (:mod:`._users`),
empty under the shared token; a session of a user removed from the users file is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass

from ._users import Users

__all__ = ["SESSION_COOKIE", "Session", "Sessions", "is_loopback"]

SESSION_COOKIE = "tether_session"
CSRF_FIELD = "csrf_token"
SESSION_MAX_AGE_SECONDS = 12 * 3600


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Session:
    """A visitor's signed session.

    Attributes:
        nonce: random per session; the CSRF token derives from it.
        authenticated: the visitor gave the token (always true under ``--no-auth``).
        user: the named user logged in; ``None`` under the shared token or ``--no-auth``.
    """

    nonce: str
    authenticated: bool
    user: str | None = None


class Sessions:
    """Issues and checks session cookies, CSRF tokens and bearer tokens.

    Args:
        token: the shared operator token; ``None`` with no ``users`` turns authentication
            off (``--no-auth``).
        users: the named users (``tether serve --users``), each logging in with their own
            token.
    """

    def __init__(self, token: str | None, users: Users | None = None) -> None:
        self.token = token
        self.users = users
        self.required = token is not None or users is not None
        seed = token.encode() if token is not None else secrets.token_bytes(32)
        self._key = hashlib.sha256(b"tether-web-session\0" + seed).digest()

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def new(self, *, authenticated: bool, user: str | None = None) -> tuple[Session, str]:
        """A fresh session (of ``user``, when a named user logged in) and its cookie value."""
        session = Session(secrets.token_hex(16), authenticated or not self.required, user)
        body = f"{session.nonce}.{int(session.authenticated)}.{int(time.time())}.{user or ''}"
        return session, f"{body}.{self._sign(body)}"

    def load(self, cookie: str | None) -> Session | None:
        """The session a cookie holds, or ``None`` when it is missing or forged."""
        if not cookie:
            return None
        body, _, signature = cookie.rpartition(".")
        parts = body.split(".")
        if len(parts) != 4 or parts[1] not in ("0", "1") or not parts[2].isdigit():
            return None
        if not hmac.compare_digest(signature, self._sign(body)):
            return None
        if time.time() - int(parts[2]) > SESSION_MAX_AGE_SECONDS:
            return None
        user = parts[3] or None
        if user is not None and (self.users is None or not self.users.exists(user)):
            return None  # the user was removed: their sessions end with them
        return Session(parts[0], parts[1] == "1" or not self.required, user)

    def csrf_token(self, session: Session) -> str:
        """The CSRF token every form of this session must carry."""
        return self._sign(f"csrf:{session.nonce}")

    def csrf_ok(self, session: Session | None, submitted: object) -> bool:
        """Whether a form's hidden CSRF field matches its session."""
        if session is None or not isinstance(submitted, str) or not submitted:
            return False
        return hmac.compare_digest(submitted, self.csrf_token(session))

    def authenticate(self, submitted: str | None) -> tuple[bool, str | None]:
        """``(ok, user)``: whether ``submitted`` is the shared token (``user`` ``None``) or a
        named user's token (``user`` their name). Always ok under ``--no-auth``."""
        if not self.required:
            return True, None
        if submitted is None:
            return False, None
        if self.token is not None and hmac.compare_digest(submitted.encode(), self.token.encode()):
            return True, None
        user = None if self.users is None else self.users.verify(submitted)
        return user is not None, user

    def token_ok(self, submitted: str | None) -> bool:
        """Whether ``submitted`` is the shared token or a named user's token."""
        return self.authenticate(submitted)[0]

    def bearer(self, authorization: str | None) -> tuple[bool, str | None]:
        """:meth:`authenticate` of the token an ``Authorization: Bearer`` header carries."""
        if not self.required:
            return True, None
        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return False, None
        return self.authenticate(value.strip())

    def bearer_ok(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries a token that logs in."""
        return self.bearer(authorization)[0]
