"""Shared fixtures: one ``store`` fixture parametrized over every backend.

Postgres tests use the server at ``TETHER_TEST_PG_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``), each in its own schema, dropped afterwards.
Outside CI they skip with a visible reason when no server answers; in CI (``CI=true``) they
fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.store.base import Checkpointer
from tether.store.sqlite import SQLiteCheckpointer

PG_DSN = os.environ.get("TETHER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

_pg_checked: str | None = None  # "" when reachable, else the reason


def postgres_unavailable_reason() -> str:
    """Empty when the test Postgres answers; else why not."""
    global _pg_checked
    if _pg_checked is None:
        try:
            import psycopg

            with psycopg.connect(PG_DSN, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            _pg_checked = ""
        except Exception as exc:  # any failure means: no usable server
            _pg_checked = f"PostgreSQL at {PG_DSN} not reachable: {exc}"
    return _pg_checked


def require_postgres() -> None:
    reason = postgres_unavailable_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"CI requires PostgreSQL: {reason}")
        pytest.skip(reason)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh Postgres schema name, dropped after the test."""
    require_postgres()
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _make_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> tuple[Checkpointer, str]:
    if kind == "sqlite":
        return SQLiteCheckpointer(tmp_path / "tether.db"), f"sqlite:///{tmp_path / 'tether.db'}"
    schema = request.getfixturevalue("pg_schema")
    from tether.store.postgres import PostgresCheckpointer

    return PostgresCheckpointer(PG_DSN, schema=schema), f"{PG_DSN}?schema={schema}"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test: ``sqlite`` or ``postgres``."""
    return str(request.param)


@pytest.fixture
def store_and_url(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Checkpointer, str]]:
    """``(checkpointer, url)`` for the backend under test; the URL reaches the same store from
    a child process."""
    store, url = _make_store(backend, tmp_path, request)
    yield store, url
    store.close()


@pytest.fixture
def store(store_and_url: tuple[Checkpointer, str]) -> Checkpointer:
    """A fresh, empty checkpointer of the backend under test."""
    return store_and_url[0]


@pytest.fixture
def db_url(store_and_url: tuple[Checkpointer, str]) -> str:
    """A URL for ``tether.connect`` that reaches the same store as ``store``."""
    return store_and_url[1]
