"""The approvals page and JSON API (the ``web`` extra): ``tether serve`` or :func:`create_app`.

Server-rendered HTML (Jinja2 templates shipped in this package, no script, no front-end build)
on Starlette, over the same store as the CLI: pending approvals with their frozen context,
approve or reject with a note and optional JSON data, the runs list with filters, and each
run's timeline (checkpoints with key-level state diffs and trace ids, pending interrupt,
idempotency cache). The API under ``/api/`` does the same for scripts. See ``docs/web.md``.

``import tether`` never imports this package.
"""

from __future__ import annotations

from ._app import create_app
from ._auth import is_loopback
from ._guard import allowed_hosts_for
from ._users import add_user, list_users, remove_user

__all__ = [
    "add_user",
    "allowed_hosts_for",
    "create_app",
    "is_loopback",
    "list_users",
    "remove_user",
]
