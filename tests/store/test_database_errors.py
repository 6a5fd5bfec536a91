"""The rule that turns a database error into a tether error, pinned code by code: a failure is
"unavailable" (the one class callers retry) only when the database's code says it is about
reaching or keeping the database. The real databases produce these errors in
``test_rejected_values.py`` and ``test_postgres_faults.py``; here every code the rule names
is checked, with the driver's own exception classes."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from tether.errors import (
    ConcurrentWriteError,
    CorruptRecordError,
    RecordRejectedError,
    StoreError,
    StoreUnavailableError,
)
from tether.store._database_errors import Kind, postgres_kind, sqlite_kind, store_error

POSTGRES = {
    "08006": Kind.UNAVAILABLE,  # connection_failure
    "53100": Kind.UNAVAILABLE,  # disk_full
    "53300": Kind.UNAVAILABLE,  # too_many_connections
    "57P01": Kind.UNAVAILABLE,  # admin_shutdown
    "57014": Kind.UNAVAILABLE,  # query_canceled (statement_timeout)
    "58030": Kind.UNAVAILABLE,  # io_error
    "25006": Kind.UNAVAILABLE,  # read_only_sql_transaction (a standby)
    "55P03": Kind.UNAVAILABLE,  # lock_not_available
    "40001": Kind.CONFLICT,  # serialization_failure
    "40P01": Kind.CONFLICT,  # deadlock_detected
    "42P01": Kind.MISSING,  # undefined_table
    "42703": Kind.MISSING,  # undefined_column
    "3F000": Kind.MISSING,  # invalid_schema_name
    "54000": Kind.REJECTED,  # program_limit_exceeded: index row too large
    "23505": Kind.REJECTED,  # unique_violation
    "23514": Kind.REJECTED,  # check_violation
    "23502": Kind.REJECTED,  # not_null_violation
    "22003": Kind.REJECTED,  # numeric_value_out_of_range
    "22P05": Kind.REJECTED,  # untranslatable_character
    "22021": Kind.REJECTED,  # character_not_in_repertoire
    "42501": Kind.OTHER,  # insufficient_privilege
    "P0001": Kind.OTHER,  # raise_exception
    "XX000": Kind.OTHER,  # internal_error
    "55006": Kind.OTHER,  # object_in_use
}


@pytest.mark.parametrize("sqlstate", sorted(POSTGRES))
def test_a_postgres_error_is_unavailable_only_when_its_code_is_about_the_connection(sqlstate):
    exc = psycopg.errors.lookup(sqlstate)("from the server")
    assert postgres_kind(exc, lost=False) is POSTGRES[sqlstate]
    assert postgres_kind(exc, lost=True) is Kind.UNAVAILABLE  # the session is gone anyway


def test_a_postgres_error_without_a_code_is_unavailable_only_for_the_connection():
    assert postgres_kind(psycopg.OperationalError("server closed"), lost=False) is Kind.UNAVAILABLE
    assert postgres_kind(psycopg.InterfaceError("closed"), lost=False) is Kind.UNAVAILABLE
    assert postgres_kind(psycopg.ProgrammingError("cannot adapt"), lost=False) is Kind.OTHER


SQLITE = [
    ("INSERT INTO t VALUES (2, 'y')", True, Kind.UNAVAILABLE),  # locked by another writer
    ("INSERT INTO t VALUES (1, 'x')", False, Kind.REJECTED),  # unique
    ("INSERT INTO t VALUES (2, NULL)", False, Kind.REJECTED),  # not null
    ("SELECT nope FROM t", False, Kind.MISSING),
    ("INSERT INTO gone VALUES (1)", False, Kind.MISSING),
    ("SELEKT 1", False, Kind.OTHER),  # a syntax error
]


@pytest.mark.parametrize(("statement", "locked", "kind"), SQLITE)
def test_a_sqlite_error_gets_the_kind_its_result_code_says(tmp_path, statement, locked, kind):
    path = tmp_path / "db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    other.execute("INSERT INTO t VALUES (1, 'x')")
    if locked:
        other.execute("BEGIN IMMEDIATE")  # holds the write lock
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        with pytest.raises(sqlite3.Error) as caught:
            conn.execute(statement)
        assert sqlite_kind(caught.value) is kind, caught.value
    finally:
        conn.close()
        other.close()


def test_each_kind_is_one_tether_error_and_only_unavailable_is_unavailable():
    classes = {kind: type(store_error(kind, "m")) for kind in Kind}
    assert classes == {
        Kind.UNAVAILABLE: StoreUnavailableError,
        Kind.CONFLICT: ConcurrentWriteError,
        Kind.MISSING: CorruptRecordError,
        Kind.CORRUPT: CorruptRecordError,
        Kind.REJECTED: RecordRejectedError,
        Kind.OTHER: StoreError,
    }
    rejected = store_error(Kind.REJECTED, "m", code="23514", constraint="c", execution_id="r")
    assert isinstance(rejected, RecordRejectedError)
    assert (rejected.code, rejected.constraint, rejected.execution_id) == ("23514", "c", "r")
