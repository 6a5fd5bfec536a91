"""Helpers for hostile-input tests: raw SQL on either backend (to write the rows a buggy or
newer writer might leave), and table counts to prove nothing was lost or added."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import PG_DSN

TABLES = ("runs", "checkpoints", "pending_interrupts", "idempotency_cache", "tether_schema")


def raw_sql(store: Any) -> Callable[..., list[tuple[Any, ...]]]:
    """``sql(statement, params)`` on the store's own database, outside tether; ``{t}`` in the
    statement is the table prefix (the schema on Postgres). Placeholders are ``?``."""
    if hasattr(store, "path"):

        def run_sqlite(statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
            with sqlite3.connect(store.path) as conn:
                rows = conn.execute(statement.format(t=""), params).fetchall()
            conn.close()
            return rows

        return run_sqlite
    import psycopg

    def run_pg(statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        sql = statement.format(t=f'"{store.schema}".').replace("?", "%s")
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    return run_pg


def counts(store: Any) -> dict[str, int]:
    sql = raw_sql(store)
    return {t: sql(f"SELECT COUNT(*) FROM {{t}}{t}")[0][0] for t in TABLES}


@pytest.fixture
def sql(store: Any) -> Callable[..., list[tuple[Any, ...]]]:
    return raw_sql(store)
