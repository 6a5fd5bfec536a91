"""What a SQLite store's path must be, checked once when the store is opened.

A directory, a path ending in a separator, a path under a regular file, or a device, FIFO or
socket can never hold a database. SQLite reports them as ``unable to open database file`` or
``disk I/O error``, which tether would translate into
:class:`~tether.errors.StoreUnavailableError`, the one store error worth retrying, so a worker
would retry a typo for ever. They are the caller's mistake, said before anything is opened or
created, naming the path: :class:`~tether.errors.ConfigurationError`.

A path whose directories do not exist yet is fine: the store creates them. A place this
process may not write is not a mistake in the path (the same path works for another user, or
once the filesystem is remounted), and stays a ``StoreUnavailableError`` saying why
(:func:`._sqlite_readonly.read_only_reason`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ConfigurationError

__all__ = ["check_store_path"]

_NOT_FILES = "not a regular file (a device, a FIFO or a socket)"


def check_store_path(path: str) -> None:
    """Refuse a ``path`` that cannot name a SQLite database file.

    One ``stat`` call (two for a path under a regular file); only when a store is opened.

    Args:
        path: the store's file, as given; ``":memory:"`` and ``""`` (SQLite's private
            temporary database) are not paths and pass.

    Raises:
        ConfigurationError: ``path`` is a directory or ends with a separator, a component of
            it is a regular file, or it is a device, FIFO or socket. The message names it.
    """
    if path in (":memory:", ""):
        return
    seps = tuple(s for s in (os.sep, os.altsep) if s)
    try:
        mode = os.stat(path).st_mode
    except NotADirectoryError:
        raise _under_a_file(path) from None
    except OSError:  # missing (created on open), or SQLite's own error says what is wrong
        mode = None
    if (mode is not None and stat.S_ISDIR(mode)) or path.endswith(seps):
        what = (
            "is a directory"
            if mode is not None
            else "ends with a separator, so it names a directory"
        )
        raise ConfigurationError(
            f"SQLite store path {path!r} {what}, not a database file; name a file, e.g. "
            f"{os.path.join(path, 'tether.db')!r}"
        )
    if mode is not None and not stat.S_ISREG(mode):
        raise ConfigurationError(
            f"SQLite store path {path!r} is {_NOT_FILES}; name a database file"
        )


def _under_a_file(path: str) -> ConfigurationError:
    """The error for ``path`` below a regular file (``stat`` said ``ENOTDIR``)."""
    for parent in reversed(Path(path).absolute().parents):
        if parent.exists() and not parent.is_dir():
            return ConfigurationError(
                f"SQLite store path {path!r} cannot be created: {str(parent)!r} is a file, not "
                "a directory"
            )
    return ConfigurationError(f"SQLite store path {path!r} cannot be created: not a directory")
