"""Reading a SQLite file without writing it: no write lock, and files this process cannot write.

A connection opened ``mode=ro`` never takes the write lock, so under WAL it reads the last
commit while another process holds the lock for a long step (SQLite's WAL documentation:
readers do not block writers and a writer does not block readers).

A WAL database is read through its ``-shm`` index, which the first reader creates. On a
read-only mount, or in a directory this process cannot write, a file whose last connection
closed cleanly has neither ``-wal`` nor ``-shm`` beside it, and SQLite refuses to open it even
read-only (``SQLITE_CANTOPEN``, ``SQLITE_READONLY_DIRECTORY``). The main file then holds every
commit, so it is opened ``immutable=1``: read without locks, as SQLite documents for read-only
media. That is exact while nothing writes the file, which a read-only mount guarantees; a
writer with more rights than this process that starts during the read is not waited for. A
``-wal`` that holds commits cannot be read without its index: that is refused, naming why.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from ..errors import StoreUnavailableError

__all__ = ["connect_read_only", "read_only_reason"]

# What SQLite says when it cannot create a WAL database's -shm index for a reader.
_NO_INDEX = (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY)
_FIRST_READ = "SELECT COUNT(*) FROM sqlite_master"


def connect_read_only(path: str, **options: Any) -> sqlite3.Connection:
    """A connection that reads ``path`` and can never write it (see the module docstring).

    Args:
        path: an existing database file.
        **options: passed to :func:`sqlite3.connect` (``timeout``, ``isolation_level``...).

    Raises:
        sqlite3.Error: SQLite's own error (not a database, a file that cannot be opened).
        StoreUnavailableError: the file's ``-wal`` holds commits that this process cannot
            read, since it cannot create the ``-shm`` index beside it.
    """
    file = Path(path).resolve()
    uri = f"{file.as_uri()}?mode=ro"
    conn: sqlite3.Connection = sqlite3.connect(uri, uri=True, **options)
    try:  # SQLite opens lazily: the first read opens the file and its WAL index
        conn.execute(_FIRST_READ).fetchone()
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code not in _NO_INDEX or not file.is_file():
            raise
        wal = Path(f"{file}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            reason = _read_only_filesystem(file.parent) or (
                f"this process may not create files in {str(file.parent)!r}"
            )
            raise StoreUnavailableError(
                f"cannot read SQLite database {path!r}: its write-ahead log {str(wal)!r} holds "
                f"commits, which SQLite reads through a '-shm' file it cannot create here "
                f"({reason}); open the file once with write access (the last writer to close "
                "folds the log into the file), or read it where its directory is writable"
            ) from exc
        first = exc
    conn = sqlite3.connect(f"{uri}&immutable=1", uri=True, **options)
    try:
        conn.execute(_FIRST_READ).fetchone()
    except sqlite3.Error:
        conn.close()
        raise first from None
    return conn


def read_only_reason(path: str) -> str | None:
    """Why this process cannot write the SQLite file ``path``, or ``None``.

    SQLite writes the file and creates its ``-wal`` and ``-shm`` beside it, so the file, its
    filesystem and (unless both are there) its directory must be writable. A file not there
    yet is created in its directory, or in the nearest one that exists, along with the
    directories between. Root writes whatever a mode says.
    """
    file = Path(path)
    exists = file.exists()
    where = file.parent if exists else _nearest_directory(file)
    on_read_only = _read_only_filesystem(where)
    if on_read_only is not None:
        return on_read_only
    if not exists:
        if os.access(where, os.W_OK | os.X_OK):
            return None
        return f"this process may not create files in {str(where)!r}"
    if not os.access(file, os.W_OK):
        return f"this process may not write {path!r}"
    beside = [Path(f"{file}-wal"), Path(f"{file}-shm")]
    if not all(p.exists() for p in beside) and not os.access(where, os.W_OK | os.X_OK):
        return f"this process may not create files in {str(where)!r}"
    return None


def _nearest_directory(file: Path) -> Path:
    for parent in file.absolute().parents:
        if parent.is_dir():
            return parent
    return file.parent


def _read_only_filesystem(where: Path) -> str | None:
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:
            return f"{str(where)!r} is on a read-only filesystem"
    except OSError:
        pass
    return None
