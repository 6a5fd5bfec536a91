"""Who holds a claim or a lease: owner ids (``host:pid:nonce``), the owners this process holds
right now, and whether an owner's process is gone (``docs/workers.md``, "Leases and
heartbeats")."""

from __future__ import annotations

import os
import socket
import uuid

__all__ = [
    "HOSTNAME",
    "activate",
    "deactivate",
    "is_active",
    "new_owner",
    "owner_is_dead",
    "process_is_dead",
]

HOSTNAME = socket.gethostname()

_ACTIVE: set[str] = set()
"""Owners whose leases drives or workers in this process hold right now."""


def activate(owner: str) -> None:
    """Record that a drive or a worker of this process holds leases as ``owner`` from now on
    (before it takes any: see :func:`tether.engine.lease.hold`)."""
    _ACTIVE.add(owner)


def deactivate(owner: str) -> None:
    """Record that nothing in this process holds leases as ``owner`` any more."""
    _ACTIVE.discard(owner)


def is_active(owner: str) -> bool:
    """True while a drive or a worker of this process holds leases as ``owner``."""
    return owner in _ACTIVE


def new_owner() -> str:
    """An owner id for one claim: ``host:pid:nonce``."""
    return f"{HOSTNAME}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def process_is_dead(owner: str | None) -> bool:
    """True when ``owner`` is a process on this host that no longer exists.

    A claim whose process died need not wait out its lease: a SIGKILLed resumer on the same
    machine is detected at once. Owners on other hosts are trusted until the lease lapses.
    """
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid_s = rest.partition(":")[0]
    if host != HOSTNAME or not pid_s.isdigit():
        return False
    pid = int(pid_s)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def owner_is_dead(owner: str | None) -> bool:
    """True when ``owner`` is a process on this machine that is gone, or this very process
    holding no lease under that owner any more (a drive that crashed in-process)."""
    if process_is_dead(owner):
        return True
    if not owner or owner in _ACTIVE:
        return False
    host, _, rest = owner.partition(":")
    return host == HOSTNAME and rest.partition(":")[0] == str(os.getpid())
