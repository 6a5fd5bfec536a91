"""Who may use the page and the API, and the CSRF check on every form post.

- **API** (``/api/...``): ``Authorization: Bearer <TETHER_UI_TOKEN>``. No cookie is ever
  accepted there, so a browser on another site cannot ride an operator's login; and a write
  must be sent as ``application/json``, which a cross-site form cannot send.
- **Pages**: the login form takes the token and sets an HttpOnly, ``SameSite=Strict`` session
  cookie. Every visitor, logged in or not (and every visitor under ``--no-auth``), holds a
  signed session; each form carries that session's CSRF token in a hidden field, and a post
  without the matching token is refused (403).

Sessions are stateless: ``<nonce>.<authenticated 0|1>.<issued, unix seconds>.<HMAC>``, refused
once older than :data:`SESSION_MAX_AGE_SECONDS`. The key derives from the token, so changing
``TETHER_UI_TOKEN`` logs everyone out; under ``--no-auth`` it is random per process.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass

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
    """

    nonce: str
    authenticated: bool


class Sessions:
    """Issues and checks session cookies, CSRF tokens and bearer tokens.

    Args:
        token: the operator token; ``None`` turns authentication off (``--no-auth``).
    """

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.required = token is not None
        seed = token.encode() if token is not None else secrets.token_bytes(32)
        self._key = hashlib.sha256(b"tether-web-session\0" + seed).digest()

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def new(self, *, authenticated: bool) -> tuple[Session, str]:
        """A fresh session and its cookie value."""
        session = Session(secrets.token_hex(16), authenticated or not self.required)
        body = f"{session.nonce}.{int(session.authenticated)}.{int(time.time())}"
        return session, f"{body}.{self._sign(body)}"

    def load(self, cookie: str | None) -> Session | None:
        """The session a cookie holds, or ``None`` when it is missing or forged."""
        if not cookie:
            return None
        body, _, signature = cookie.rpartition(".")
        parts = body.split(".")
        if len(parts) != 3 or parts[1] not in ("0", "1") or not parts[2].isdigit():
            return None
        if not hmac.compare_digest(signature, self._sign(body)):
            return None
        if time.time() - int(parts[2]) > SESSION_MAX_AGE_SECONDS:
            return None
        return Session(parts[0], parts[1] == "1" or not self.required)

    def csrf_token(self, session: Session) -> str:
        """The CSRF token every form of this session must carry."""
        return self._sign(f"csrf:{session.nonce}")

    def csrf_ok(self, session: Session | None, submitted: object) -> bool:
        """Whether a form's hidden CSRF field matches its session."""
        if session is None or not isinstance(submitted, str) or not submitted:
            return False
        return hmac.compare_digest(submitted, self.csrf_token(session))

    def token_ok(self, submitted: str | None) -> bool:
        """Whether ``submitted`` is the operator token (always true under ``--no-auth``)."""
        if self.token is None:
            return True
        return submitted is not None and hmac.compare_digest(
            submitted.encode(), self.token.encode()
        )

    def bearer_ok(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries the operator token."""
        if self.token is None:
            return True
        scheme, _, value = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(value.strip())
