"""The ``tether`` click group, the options every command shares, and the error boundary."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import click

from .._urls import split_store_url, sqlite_url_path
from ..connect import DEFAULT_URL, connect
from ..errors import ConfigurationError
from ..registry import Registry, load_app
from ..store.base import Checkpointer
from ..store.probe import check_sqlite
from . import _errors
from ._render import err

F = TypeVar("F", bound=Callable[..., Any])

TRACEBACK_ENV = "TETHER_TRACEBACK"


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="tether", prog_name="tether")
@click.option("--db", "db_url", metavar="URL", help="The store, for every command (as its --db).")
@click.option("--app", "app_spec", metavar="MODULE:ATTR", help="Your runners (as --app).")
@click.option("--json", "as_json", is_flag=True, help="JSON output (as a command's --json).")
@click.pass_context
def cli(ctx: click.Context, db_url: str | None, app_spec: str | None, as_json: bool) -> None:
    """Operate durable tether runs: inspect, answer, resume, fork, prune.

    Every command reads the store named by --db (default: $TETHER_DATABASE_URL, else
    sqlite:///tether.db). Commands that continue a run import your runners with
    --app module:attribute (default: $TETHER_APP). --db, --app and --json may also come
    before the command (tether --db URL runs list). Exit codes: 0 ok, 1 unexpected error or
    the run failed, 2 already resumed, 3 not found, 4 bad input, 5 store unavailable.
    """
    # Given before the command, --db and --app act as its environment variables do: the
    # command's own option still wins, and both beat anything set outside.
    for name, value in (("TETHER_DATABASE_URL", db_url), ("TETHER_APP", app_spec)):
        if value is not None:
            _set_env_until_close(ctx, name, value)
    if as_json:
        ctx.default_map = _defaults_for(cli, {"as_json": True})


def _set_env_until_close(ctx: click.Context, name: str, value: str) -> None:
    before = os.environ.get(name)
    os.environ[name] = value

    def restore() -> None:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before

    ctx.call_on_close(restore)


def _defaults_for(command: click.Command, values: dict[str, Any]) -> dict[str, Any]:
    """A click ``default_map`` giving ``values`` to every subcommand that takes them."""
    found: dict[str, Any] = {}
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            nested = _defaults_for(sub, values)
            if nested:
                found[name] = nested
    else:
        found = {k: v for k, v in values.items() if any(p.name == k for p in command.params)}
    return found


db_option = click.option(
    "--db",
    "db_url",
    envvar="TETHER_DATABASE_URL",
    default=DEFAULT_URL,
    show_default=True,
    metavar="URL",
    help="Store URL: sqlite:///path.db or postgresql://... [env: TETHER_DATABASE_URL]",
)
"""``--db URL`` (``TETHER_DATABASE_URL``; default ``sqlite:///./tether.db``) as ``db_url``."""


def store_options(fn: F) -> F:
    """Add ``--db`` and ``--json`` to a command."""
    fn = click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print machine-readable JSON on stdout instead of tables.",
    )(fn)
    return db_option(fn)


def app_option(*, required: bool) -> Callable[[F], F]:
    """Add ``--app module:attribute`` to a command."""
    return click.option(
        "--app",
        "app_spec",
        envvar="TETHER_APP",
        required=required,
        metavar="MODULE:ATTR",
        help="Your runners: a tether.Registry, a runner, or a list of runners [env: TETHER_APP].",
    )


def display_url(url: str) -> str:
    """``url`` with any password masked, for printing."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # unparseable: show no more than its scheme
        return url.split("://", 1)[0] + "://…" if "://" in url else "…"
    if password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def open_store(url: str, *, create: bool = False, migrate: bool = False) -> Checkpointer:
    """Open the store at ``url``.

    Unless ``create``, the database is first looked at read-only
    (:mod:`tether.store.probe`): a missing file or schema, an empty file or another
    application's database is an error naming it, and nothing is created. An unreachable
    Postgres server, or a database that does not exist, fails within seconds with one line
    (with ``create`` too).

    Args:
        url: a ``tether.connect`` URL.
        create: a command that writes first (``db migrate``, ``enqueue``): create the store
            when it is missing and migrate it forward.
        migrate: a command that changes runs (``approve``, ``resume``, ``worker``...): the
            store must exist, and an older schema is migrated forward. Otherwise (reading
            only) an older schema is an error naming ``tether db migrate`` (or, when the
            file cannot be written here, saying so), and SQLite is opened ``read_only``:
            no write lock, so a writer holding it for a long step does not hold the reader up.

    Raises:
        ConfigurationError: an empty or unparseable URL, or a SQLite path that cannot name a
            database file (a directory, say), whether or not ``create``.
        StoreUnavailableError: (not ``create``) no store at ``url``; or it cannot be reached.
        CorruptRecordError: the SQLite file is not a database.
    """
    if not url.strip():
        raise ConfigurationError(
            "the store URL is empty (an empty --db or TETHER_DATABASE_URL); give "
            "sqlite:///path.db or postgresql://..."
        )
    parts = split_store_url(url)
    scheme = parts.scheme.lower()
    options: dict[str, Any] = {}
    if not create and scheme == "sqlite":
        path = sqlite_url_path(url, parts)
        if path != ":memory:":
            check_sqlite(path, allow_older=migrate)
            # Reading only: never the write lock (under WAL a reader does not wait for a
            # worker's step), and a file this process cannot write still reads.
            if not migrate:
                options["read_only"] = True
    elif scheme in ("postgres", "postgresql", "postgresql+psycopg"):
        try:
            from ..store.probe import check_postgres
        except ImportError:
            pass  # no postgres extra: connect() names it
        else:  # creating too: a database that is not there fails in seconds, in one line
            check_postgres(url, allow_older=migrate, store_required=not create)
    return connect(url, **options)


def open_app(spec: str, db_url: str) -> Registry:
    """Import the user's runners.

    ``TETHER_DATABASE_URL`` is set to ``db_url`` first, so an app whose runners open their
    store with ``tether.connect()`` (or take the default) reaches the store this command reads.
    """
    os.environ["TETHER_DATABASE_URL"] = db_url
    return load_app(spec)


def invoke(argv: list[str]) -> int:
    """Run the command line and turn every outcome into a documented exit code."""
    try:
        result = cli.main(args=argv, prog_name="tether", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        err.print("tether: aborted")
        return _errors.UNEXPECTED
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.format_message())
        return _errors.OK
    except click.exceptions.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "tether"
        err.print(
            f"tether: {exc.format_message()} (see '{where} --help')", markup=False, highlight=False
        )
        return _errors.BAD_INPUT
    except click.ClickException as exc:
        exc.show()
        return _errors.BAD_INPUT
    except Exception as exc:
        if os.environ.get(TRACEBACK_ENV):
            raise
        code = _errors.exit_code_for(exc)
        hint = f" (set {TRACEBACK_ENV}=1 for a traceback)" if code == _errors.UNEXPECTED else ""
        err.print(f"tether: {_errors.one_line(exc)}{hint}", markup=False, highlight=False)
        return code
    return result if isinstance(result, int) else _errors.OK
