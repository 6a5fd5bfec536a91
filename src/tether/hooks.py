"""Notify people when a run starts waiting for them (docs/design.md §12, "Approval deadlines").

``tether.on_pending(callback, webhook_url=...)`` (or ``TETHER_PENDING_WEBHOOK_URL``) is told
of every pending interrupt this process records, right after the commit that records it:

- ``callback(pending)`` gets the :class:`~tether.PendingInterrupt` (``async def`` callbacks are
  awaited); it runs in the drive, so keep it short;
- the webhook gets ``POST`` with a JSON body ``{"event": "interrupt.pending", "execution_id",
  "checkpoint_id", "node_id", "agent_path", "reason", "context", "created_at", "due_at"}``
  (times ISO 8601 UTC), sent from a daemon thread with a 10 s timeout, so a slow receiver
  never holds the run.

A hook never fails the run: what it raises, or a webhook that does not answer 2xx, is logged on
the ``tether.hooks`` logger and dropped. Reminders are out of scope: the hook fires once per
question, when it is asked.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import threading
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .store.base import Checkpointer, PendingInterrupt

__all__ = ["on_pending"]

log = logging.getLogger("tether.hooks")

WEBHOOK_ENV = "TETHER_PENDING_WEBHOOK_URL"
WEBHOOK_TIMEOUT_SECONDS = 10.0

_callback: Callable[[PendingInterrupt], Any] | None = None
_webhook_url: str | None = None


def on_pending(
    callback: Callable[[PendingInterrupt], Any] | None = None, *, webhook_url: str | None = None
) -> None:
    """Set (replacing any before) what is told of each new pending interrupt.

    Args:
        callback: called with the :class:`~tether.PendingInterrupt` after it is committed;
            sync or ``async``. ``None``: none.
        webhook_url: an ``http(s)://`` URL POSTed the question as JSON. ``None``: the
            ``TETHER_PENDING_WEBHOOK_URL`` environment variable, if set.

    Raises:
        ConfigurationError: ``callback`` is not callable, or the URL is not http(s).
    """
    global _callback, _webhook_url
    if callback is not None and not callable(callback):
        raise ConfigurationError(f"on_pending callback must be callable, got {callback!r}")
    if webhook_url is not None and not webhook_url.startswith(("http://", "https://")):
        raise ConfigurationError(
            f"on_pending webhook_url must be http(s)://..., got {webhook_url!r}"
        )
    _callback, _webhook_url = callback, webhook_url


def payload(pending: PendingInterrupt) -> dict[str, Any]:
    """The webhook's JSON body for ``pending``."""
    from . import serde

    def iso(value: Any) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "event": "interrupt.pending",
        "execution_id": pending.execution_id,
        "checkpoint_id": pending.checkpoint_id,
        "node_id": pending.node_id,
        "agent_path": pending.agent_path,
        "reason": pending.reason,
        "context": serde.to_jsonable(pending.context),
        "created_at": iso(pending.created_at),
        "due_at": iso(pending.due_at),
    }


def _post(url: str, body: bytes) -> None:
    if not url.startswith(("http://", "https://")):  # TETHER_PENDING_WEBHOOK_URL unchecked
        log.warning("on_pending webhook %r is not http(s)://...; not sent", url)
        return
    # The scheme is http(s), checked above: no file: or custom scheme is opened.
    request = urllib.request.Request(  # noqa: S310
        url, data=body, method="POST", headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_SECONDS) as response:  # noqa: S310
            if not 200 <= response.status < 300:
                log.warning("on_pending webhook %s answered %s", url, response.status)
    except Exception as exc:  # never the run's problem
        log.warning("on_pending webhook %s failed: %s", url, exc)


async def notify(pending: PendingInterrupt) -> None:
    """Tell the hooks of ``pending`` (see the module docstring); never raises."""
    url = _webhook_url or os.environ.get(WEBHOOK_ENV) or None
    if _callback is None and url is None:
        return
    if _callback is not None:
        try:
            out = _callback(pending)
            if inspect.isawaitable(out):
                await out
        except Exception:
            log.exception("on_pending callback failed for run %s", pending.execution_id)
    if url is not None:
        try:
            body = json.dumps(payload(pending), default=str).encode()
        except Exception:
            log.exception(
                "on_pending webhook: run %s's question cannot be sent", pending.execution_id
            )
            return
        threading.Thread(target=_post, args=(url, body), name="tether-webhook", daemon=True).start()


async def arecord_pause(
    store: Checkpointer, checkpoint: Checkpoint, **kwargs: Any
) -> PendingInterrupt:
    """Record a pause (``store.arecord_interrupt``) and then tell the hooks: the one way every
    runner records a question."""
    pending = await store.arecord_interrupt(checkpoint, **kwargs)
    await notify(pending)
    return pending
