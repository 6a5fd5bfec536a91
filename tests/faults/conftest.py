"""Fixtures of the fault tests: one fork server, one policy stub and one store per backend for
the whole session (every scenario uses its own execution ids).

The full fault matrix is marked ``faults``: ``make test-faults`` selects it (``pytest -m
faults``), and ``make test`` deselects it (the default ``-m "not faults"`` in pyproject.toml),
so a default run neither collects nor skips it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PG_DSN, require_postgres
from tests.faults.harness import ForkServer, PolicyStub


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def policy_stub() -> Iterator[PolicyStub]:
    with PolicyStub() as stub:
        yield stub


@pytest.fixture(scope="session")
def matrix_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Any]]:
    """``matrix_store(backend) -> (store, url)``, opened once per session."""
    opened: dict[str, tuple[Any, str]] = {}
    schemas: list[str] = []

    def get(backend: str) -> tuple[Any, str]:
        if backend not in opened:
            if backend == "sqlite":
                from tether.store.sqlite import SQLiteCheckpointer

                path = tmp_path_factory.mktemp("matrix") / "tether.db"
                opened[backend] = (SQLiteCheckpointer(path), f"sqlite:///{path}")
            else:
                require_postgres()
                from tether.store.postgres import PostgresCheckpointer

                schema = f"t_matrix_{uuid.uuid4().hex[:8]}"
                schemas.append(schema)
                opened[backend] = (
                    PostgresCheckpointer(PG_DSN, schema=schema),
                    f"{PG_DSN}?schema={schema}",
                )
        return opened[backend]

    yield get
    for store, _ in opened.values():
        store.close()
    if schemas:
        import psycopg

        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return tmp_path
