"""Who holds a claim or a lease: owner ids (``host:pid:nonce``), the owners this process holds
right now, and whether an owner's process is gone (``docs/workers.md``, "Leases and
heartbeats").

``host`` names where a pid means this process's pid: the hostname, and on Linux the boot and
the pid namespace too (``name/boot.namespace``). Two containers of one pod share a hostname
but not a pid namespace, and two machines can be given one hostname: judged by the hostname
alone, a live owner there would look dead here (its pid is not one of ours) and its run would
be taken over while it runs.
"""

from __future__ import annotations

import os
import socket
import uuid

__all__ = [
    "HOST",
    "HOSTNAME",
    "activate",
    "deactivate",
    "is_active",
    "new_owner",
    "owner_is_dead",
    "process_is_dead",
]

HOSTNAME = socket.gethostname()


def _pid_space() -> str:
    """``boot.namespace`` on Linux (``/proc``: the boot id's first 8 hex digits, the pid
    namespace's inode), else ``""``: elsewhere the hostname alone says where a pid is ours."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip().replace("-", "")[:8]
        namespace = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""
    inode = namespace.partition("[")[2].rstrip("]")
    return f"{boot}.{inode}" if boot and inode.isdigit() else ""


_SPACE = _pid_space()
HOST = f"{HOSTNAME}/{_SPACE}" if _SPACE else HOSTNAME
"""The ``host`` part of this process's owner ids (see the module docstring)."""

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
    """An owner id for one claim: ``host:pid:nonce`` (``host`` is :data:`HOST`)."""
    return f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def process_is_dead(owner: str | None) -> bool:
    """True when ``owner`` is a process of this host (same :data:`HOST`: hostname, boot and
    pid namespace) that no longer exists.

    A claim whose process died need not wait out its lease: a SIGKILLed resumer on the same
    machine is detected at once. Owners of other hosts, of another pid namespace or boot of
    this one, and owner ids written by a tether that recorded the hostname alone are trusted
    until the lease lapses.
    """
    pid = _pid_here(owner)
    if pid is None or pid == os.getpid():
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
    return _pid_here(owner) == os.getpid()


def _pid_here(owner: str | None) -> int | None:
    """The pid of ``owner`` when it is a process of this :data:`HOST`, else ``None``."""
    if not owner:
        return None
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    return int(pid) if host == HOST and pid.isdigit() else None
