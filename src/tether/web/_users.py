"""Named users of the approvals page, their hashed tokens, and the throttle on failed logins.

A users file (``tether users add alice --file users.json``; ``tether serve --users
users.json``) holds, per user, a salted ``hashlib.scrypt`` hash of their token, never the token.
A user's token reads ``<name>.<secret>``: the name says whose hash to check, so a login costs
one scrypt however many users there are, and the name is what the audit trail records for
their answers (docs/web.md, "Users"). The file is re-read when it changes, so adding or
removing a user needs no restart; a removed user's sessions stop working at once.

Failed logins and failed API tokens are throttled per client address: after
:data:`MAX_FAILURES` failures within :data:`FAILURE_WINDOW_SECONDS`, that address is refused
(429) until the window has passed, whatever it sends.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..errors import ConfigurationError

__all__ = ["MIN_TOKEN_CHARS", "Throttle", "Users", "add_user", "remove_user"]

MIN_TOKEN_CHARS: Final = 16
"""The shortest shared token (``TETHER_UI_TOKEN``) the server accepts."""
USER_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_SCRYPT: Final = {"n": 2**14, "r": 8, "p": 1}  # ~16 MiB and tens of ms per check
_ENTRY_KEYS: Final = frozenset({"salt", "scrypt", *_SCRYPT})
MAX_FAILURES: Final = 5
FAILURE_WINDOW_SECONDS: Final = 60.0


def check_shared_token(token: str) -> None:
    """Refuse a shared token shorter than :data:`MIN_TOKEN_CHARS`.

    Raises:
        ConfigurationError: it is too short, naming how to make a good one.
    """
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(
            f"TETHER_UI_TOKEN is {len(token)} characters; use at least {MIN_TOKEN_CHARS}, "
            "e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )


def _hash(secret: str, salt: bytes, params: dict[str, int]) -> bytes:
    return hashlib.scrypt(
        secret.encode(), salt=salt, n=params["n"], r=params["r"], p=params["p"], dklen=32
    )


def _read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the users file {str(path)!r}: {exc}") from None
    users = raw.get("users") if isinstance(raw, dict) else None
    if not isinstance(users, dict):
        raise ConfigurationError(
            f'the users file {str(path)!r} is not one tether wrote (no "users" object)'
        )
    return users


def _write(path: Path, users: dict[str, dict[str, Any]]) -> None:
    """Replace the file atomically, readable by its owner only (it holds hashes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".users-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "users": users}, f, indent=2, sort_keys=True)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_user(path: str | os.PathLike[str], name: str, *, replace: bool = False) -> str:
    """Add user ``name`` to the users file (created if missing) and return their new token,
    ``<name>.<secret>``: shown once, stored only as a salted scrypt hash.

    Args:
        replace: give an existing user a new token (their old one stops working).

    Raises:
        ConfigurationError: a name that is not 1-32 of ``a-z0-9_-`` (starting with a letter
            or digit), a user that exists without ``replace``, or an unreadable file.
    """
    if not USER_NAME.match(name):
        raise ConfigurationError(
            f"user name {name!r} must be 1-32 characters of a-z, 0-9, _ and -, starting "
            "with a letter or digit"
        )
    file = Path(path)
    users = _read(file)
    if name in users and not replace:
        raise ConfigurationError(
            f"user {name!r} already exists in {str(file)!r}; pass --replace to give them a "
            "new token"
        )
    secret = secrets.token_urlsafe(24)
    salt = secrets.token_bytes(16)
    users[name] = {
        "salt": salt.hex(),
        "scrypt": _hash(secret, salt, _SCRYPT).hex(),
        **_SCRYPT,
        "created_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    _write(file, users)
    return f"{name}.{secret}"


def remove_user(path: str | os.PathLike[str], name: str) -> bool:
    """Remove user ``name``; ``False`` when there was none. Their sessions end at once."""
    file = Path(path)
    users = _read(file)
    if users.pop(name, None) is None:
        return False
    _write(file, users)
    return True


def list_users(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """``[{"name", "created_at", "damaged"}]`` of the users file, by name. ``damaged`` marks
    an entry that is not one ``add_user`` wrote (a hand edit): it admits nobody, and
    ``add_user(name, replace=True)`` or ``remove_user`` repairs it."""
    return [
        {
            "name": name,
            "created_at": entry.get("created_at") if isinstance(entry, dict) else None,
            "damaged": not (isinstance(entry, dict) and entry.keys() >= _ENTRY_KEYS),
        }
        for name, entry in sorted(_read(Path(path)).items())
    ]


@dataclass(slots=True)
class _Loaded:
    stamp: tuple[int, int] | None
    users: dict[str, dict[str, Any]]


class Users:
    """The users file of a running server: checks tokens, knows who still exists.

    Args:
        path: the users file (``tether serve --users``).

    Raises:
        ConfigurationError: the file cannot be read or is not a users file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._loaded = _Loaded(None, {})
        # sha256 of a token already checked -> its user: scrypt is deliberately slow, and
        # the API checks the bearer token on every request.
        self._verified: dict[bytes, str] = {}
        self._current()

    def _current(self) -> dict[str, dict[str, Any]]:
        try:
            st = self.path.stat()
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp != self._loaded.stamp:
                self._loaded = _Loaded(stamp, _read(self.path) if stamp else {})
                self._verified.clear()
            return self._loaded.users

    def exists(self, name: str) -> bool:
        """Whether ``name`` is (still) a user."""
        return name in self._current()

    def generation(self, name: str) -> str | None:
        """A tag of ``name``'s current token (a hash of its salt, new at every ``tether users
        add``), or ``None`` when there is no such user. A session records it at login, so a
        new token (``--replace``) or a removed-and-re-added user ends the sessions of the old.
        """
        entry = self._current().get(name)
        salt = entry.get("salt") if isinstance(entry, dict) else None
        if not isinstance(salt, str):
            return None
        return hashlib.sha256(b"tether-session-generation\0" + salt.encode()).hexdigest()[:16]

    def verify(self, token: str | None) -> str | None:
        """The user whose token ``token`` is, or ``None``."""
        if not token or "." not in token:
            return None
        users = self._current()
        digest = hashlib.sha256(token.encode()).digest()
        known = self._verified.get(digest)
        if known is not None and known in users:
            return known
        name, _, secret = token.partition(".")
        entry = users.get(name)
        if entry is None:
            return None
        try:
            params = {k: int(entry[k]) for k in ("n", "r", "p")}
            expected = bytes.fromhex(entry["scrypt"])
            got = _hash(secret, bytes.fromhex(entry["salt"]), params)
        except (KeyError, ValueError, TypeError):
            return None  # a damaged entry admits nobody
        if not hmac.compare_digest(got, expected):
            return None
        with self._lock:
            self._verified[digest] = name
        return name


class Throttle:
    """Counts failed logins per client address and refuses one that failed too often.

    Args:
        max_failures: failures allowed within ``window_seconds``.
        window_seconds: how far back failures count.
    """

    def __init__(
        self, max_failures: int = MAX_FAILURES, window_seconds: float = FAILURE_WINDOW_SECONDS
    ) -> None:
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after_seconds(self, client: str) -> float:
        """0 when ``client`` may try; else how long until it may."""
        now = time.monotonic()
        with self._lock:
            times = self._failures.get(client)
            if not times:
                return 0.0
            while times and times[0] <= now - self.window_seconds:
                times.popleft()
            if len(times) < self.max_failures:
                return 0.0
            return max(0.0, times[0] + self.window_seconds - now)

    def failed(self, client: str) -> None:
        """Record a failure of ``client``."""
        with self._lock:
            if len(self._failures) > 10_000:  # a flood of addresses must not grow it forever
                self._failures.clear()
            self._failures.setdefault(client, deque()).append(time.monotonic())
