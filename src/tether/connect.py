"""Open a checkpointer from a URL (``sqlite:///path.db``, ``postgresql://...``)."""

from __future__ import annotations

import os
from typing import Any

from ._urls import split_store_url, sqlite_url_path
from .errors import ConfigurationError
from .store.base import Checkpointer

__all__ = ["DEFAULT_URL", "connect"]

DEFAULT_URL = "sqlite:///tether.db"


def connect(url: str | None = None, **options: Any) -> Checkpointer:
    """Open the store a URL names.

    Args:
        url: ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``,
            ``sqlite:///~/in/home.db``, ``sqlite://:memory:`` (no query: pass
            ``read_only=True`` to read without writing), or
            ``postgresql://user:password@host:port/dbname`` (percent-encode special
            characters in the password; ``?schema=name`` picks the schema). Default: the
            ``TETHER_DATABASE_URL`` environment variable, else ``sqlite:///tether.db``.
        **options: passed to the backend's constructor (e.g. ``synchronous="FULL"``).

    Raises:
        ConfigurationError: an unknown scheme or a bare path (the message gives the URL),
            a SQLite URL with a query, a SQLite path that cannot name a database file (a
            directory, a ``file:`` URI, say; see
            :class:`~tether.store.sqlite.SQLiteCheckpointer`), or Postgres without the
            ``postgres`` extra.
    """
    url = url or os.environ.get("TETHER_DATABASE_URL") or DEFAULT_URL
    parts = split_store_url(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        from .store.sqlite import SQLiteCheckpointer

        return SQLiteCheckpointer(sqlite_url_path(url, parts), **options)
    if scheme in ("postgres", "postgresql", "postgresql+psycopg"):
        try:
            from .store.postgres import PostgresCheckpointer
        except ImportError as exc:  # pragma: no cover - depends on installed extras
            raise ConfigurationError(
                "Postgres needs the postgres extra: pip install 'tether[postgres]'"
            ) from exc
        store: Checkpointer = PostgresCheckpointer.from_url(url, **options)
        return store
    if not parts.scheme and parts.path:
        # The likeliest first mistake: a file's path where a URL belongs.
        raise ConfigurationError(
            f"{url!r} is a path, not a database URL; for a SQLite file write sqlite:///{url}"
        )
    raise ConfigurationError(
        f"unknown database URL scheme {parts.scheme!r} in {url!r}; use sqlite:/// or postgresql://"
    )
