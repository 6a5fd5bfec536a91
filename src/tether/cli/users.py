"""``tether users``: the named users of the approvals page (docs/web.md, "Users").

Each user gets a token of their own, shown once and kept in the users file only as a salted
``hashlib.scrypt`` hash; ``tether serve --users FILE`` lets them log in, and their answers are
recorded under their name in the audit trail.
"""

from __future__ import annotations

from types import ModuleType

import click

from ..errors import ConfigurationError
from . import _errors
from ._render import emit_json, err, out

USERS_ENV = "TETHER_UI_USERS"
DEFAULT_USERS_FILE = "tether-users.json"

users_file_option = click.option(
    "--file",
    "path",
    envvar=USERS_ENV,
    default=DEFAULT_USERS_FILE,
    show_default=True,
    metavar="PATH",
    help=f"The users file that tether serve --users reads [env: {USERS_ENV}].",
)


def _web() -> ModuleType:
    """:mod:`tether.web`, which manages the users file (it needs the ``web`` extra)."""
    try:
        from .. import web
    except ImportError as exc:
        raise _errors.CommandError(
            f"tether users needs the web extra ({exc.name} is missing): pip install 'tether[web]'",
            _errors.BAD_INPUT,
        ) from None
    return web


@click.group("users")
def users_group() -> None:
    """Named users of the approvals page."""


@users_group.command("add")
@click.argument("name")
@users_file_option
@click.option("--replace", is_flag=True, help="Give an existing user a new token.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def users_add(name: str, path: str, replace: bool, as_json: bool) -> int:
    """Add a user and print their token (once: only its hash is kept)."""
    try:
        token = _web().add_user(path, name, replace=replace)
    except ConfigurationError as exc:
        raise _errors.CommandError(str(exc), _errors.BAD_INPUT) from None
    if as_json:
        emit_json({"name": name, "token": token, "file": path})
        return _errors.OK
    out.print(f"user {name} {'given a new token' if replace else 'added'} in {path}")
    out.print(f"token (shown once; they log in with it): {token}", markup=False, highlight=False)
    err.print(
        f"serve with `tether serve --users {path}` (or set {USERS_ENV}); the file is re-read "
        "when it changes",
        markup=False,
        highlight=False,
    )
    return _errors.OK


@users_group.command("list")
@users_file_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def users_list(path: str, as_json: bool) -> int:
    """List the users (names and when they were added; tokens are never shown again)."""
    try:
        found = _web().list_users(path)
    except ConfigurationError as exc:
        raise _errors.CommandError(str(exc), _errors.BAD_INPUT) from None
    if as_json:
        emit_json(found)
    elif not found:
        out.print(f"[dim]no users in {path}[/]")
    for user in [] if as_json else found:
        damaged = "  (damaged entry: admits nobody; add it again with --replace)"
        line = f"{user['name']}  added {user['created_at']}"
        out.print(line + (damaged if user["damaged"] else ""), markup=False)
    return _errors.OK


@users_group.command("remove")
@click.argument("name")
@users_file_option
def users_remove(name: str, path: str) -> int:
    """Remove a user; their token and their sessions stop working at once."""
    try:
        removed = _web().remove_user(path, name)
    except ConfigurationError as exc:
        raise _errors.CommandError(str(exc), _errors.BAD_INPUT) from None
    if not removed:
        raise _errors.CommandError(f"no user {name!r} in {path}", _errors.NOT_FOUND)
    out.print(f"user {name} removed from {path}", markup=False)
    return _errors.OK


COMMANDS = (users_group,)
