"""``tether serve``: the approvals page and JSON API (needs the ``web`` extra)."""

from __future__ import annotations

import os

import click

from . import _errors
from ._app import app_option, db_option, display_url, open_app, open_store
from ._render import err

TOKEN_ENV = "TETHER_UI_TOKEN"  # noqa: S105 - the variable's name, not a secret


@click.command("serve")
@db_option
@app_option(required=False)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option(
    "--no-auth",
    is_flag=True,
    help="Serve without a token (only on a loopback host such as 127.0.0.1).",
)
@click.option(
    "--allowed-host",
    "allowed_host",
    multiple=True,
    metavar="NAME",
    help="Another host name operators reach this server by (a proxy's name); repeatable. "
    "Requests for any other Host are refused (DNS rebinding).",
)
@click.option(
    "--users",
    "users_path",
    envvar="TETHER_UI_USERS",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="A users file (`tether users add NAME`): each user logs in with their own token and "
    "their answers are recorded under their name [env: TETHER_UI_USERS].",
)
def serve(
    db_url: str,
    app_spec: str | None,
    host: str,
    port: int,
    no_auth: bool,
    allowed_host: tuple[str, ...],
    users_path: str | None,
) -> int:
    """Serve the approvals page and the JSON API under /api/.

    Operators log in with their own token (--users) or the shared one in $TETHER_UI_TOKEN;
    scripts send it as 'Authorization: Bearer <token>'. With --app, approving a run resumes
    it here through its runner; without it (or for runners not in the app) the answer is
    only stored.
    """
    try:
        import uvicorn

        from ..web import allowed_hosts_for, create_app, is_loopback
    except ImportError as exc:
        raise _errors.CommandError(
            f"tether serve needs the web extra ({exc.name} is missing): pip install 'tether[web]'",
            _errors.BAD_INPUT,
        ) from None
    token = os.environ.get(TOKEN_ENV) or None
    if no_auth and not is_loopback(host):
        raise _errors.CommandError(
            f"--no-auth is refused on {host!r}: anyone who reaches that address could approve "
            f"runs. Listen on 127.0.0.1, or set {TOKEN_ENV} and drop --no-auth",
            _errors.BAD_INPUT,
        )
    if not no_auth and not token and not users_path:
        raise _errors.CommandError(
            f"set {TOKEN_ENV} to the token operators log in with, or give each operator a "
            "token of their own (`tether users add NAME`, then --users FILE), or pass --no-auth "
            "on a loopback host",
            _errors.BAD_INPUT,
        )
    if users_path and not no_auth and not os.path.exists(users_path):
        # The server re-reads the file when it appears, but a typo in the path would otherwise
        # start a server nobody can log in to, with nothing said.
        missing = (
            f"the users file {users_path!r} does not exist; create it with "
            f"`tether users add NAME --file {users_path}`"
        )
        if not token:
            raise _errors.CommandError(
                f"{missing}: until then nobody could log in", _errors.BAD_INPUT
            )
        err.print(
            f"tether: warning: {missing}; until then only {TOKEN_ENV} logs in",
            markup=False,
            highlight=False,
        )
    store = open_store(db_url, migrate=True)
    registry = open_app(app_spec, db_url) if app_spec else None
    hosts = allowed_hosts_for(host, allowed_host)
    if not hosts:
        raise _errors.CommandError(
            f"listening on {host!r} answers to no host name: name the ones operators use with "
            "--allowed-host (e.g. --allowed-host approvals.example.com)",
            _errors.BAD_INPUT,
        )
    app = create_app(
        store,
        registry=registry,
        token=token,
        no_auth=no_auth,
        allowed_hosts=hosts,
        users=users_path,
    )
    shown = f"[{host}]" if ":" in host else host
    err.print(
        f"tether: serving {display_url(db_url)} on http://{shown}:{port}/"
        + (" (no auth)" if no_auth else "")
        + ("" if registry else " (no --app: approvals are stored, not resumed)"),
        markup=False,
        highlight=False,
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        store.close()
    return _errors.OK


COMMANDS = (serve,)
