"""What a SQLite store's path must be, checked once when the store is opened.

A directory, a path ending in a separator, a path under a regular file, or a device, FIFO or
socket can never hold a database; nor can a path through a symbolic link that points nowhere
or loops, a name longer than the filesystem takes, or a NUL byte. SQLite reports them as
``unable to open database file`` or ``disk I/O error`` (Python as a raw ``ValueError`` or
``OSError``), which tether would translate into :class:`~tether.errors.StoreUnavailableError`,
the one store error worth retrying, so a worker would retry a typo for ever. They are the
caller's mistake, said before anything is opened or created, naming the path:
:class:`~tether.errors.ConfigurationError`.

A leading ``~`` is the home directory, as in a shell. An SQLite ``file:`` URI is refused: this
sqlite3 takes one even without ``uri=True``, but its query (``mode=ro``) would be tether's to
honour, and tether reads without writing through ``read_only=True`` instead.

A path whose directories do not exist yet is fine: the store creates them. So is a link to a
file not there yet in a directory that is: SQLite creates the file the link names. A place this
process may not write is not a mistake in the path (the same path works for another user, or
once the filesystem is remounted), and stays a ``StoreUnavailableError`` saying why
(:func:`._sqlite_readonly.read_only_reason`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import ConfigurationError

__all__ = ["check_store_path"]

_NOT_FILES = "not a regular file (a device, a FIFO or a socket)"
_LOOPS = "a symbolic link that loops (too many levels of symbolic links)"


def check_store_path(path: str) -> str:
    """Refuse a ``path`` that cannot name a SQLite database file; the path to open.

    One ``stat`` call for a file that exists; a few more (``lstat`` up to the nearest thing
    that exists) for one that does not, or for a link that leads nowhere. Only when a store is
    opened.

    Args:
        path: the store's file, as given; ``":memory:"`` and ``""`` (SQLite's private
            temporary database) are not paths and pass.

    Returns:
        ``path`` with a leading ``~`` or ``~user`` expanded to that home directory.

    Raises:
        ConfigurationError: ``path`` holds a NUL byte, is an SQLite ``file:`` URI, starts with
            a ``~`` naming no home directory, is a directory or ends with a separator, a
            component of it is a regular file, a symbolic link in it points nowhere or loops,
            a name in it is too long, or it is a device, FIFO or socket. The message names it.
    """
    if path in (":memory:", ""):
        return path
    if "\0" in path:
        raise ConfigurationError(
            f"SQLite store path {path!r} contains a NUL byte ('\\x00'), which no file name can "
            "hold; check how the path (or the %00 in its URL) was built"
        )
    if path.startswith("file:"):
        raise ConfigurationError(
            f"SQLite store path {path!r} is an SQLite URI, which tether does not open: give a "
            f"plain path ({unquote(urlsplit(path).path)!r}) and, to read without writing, "
            "read_only=True (the CLI's reading commands open the store read-only already)"
        )
    path = _expand_home(path)
    seps = tuple(s for s in (os.sep, os.altsep) if s)
    try:
        mode: int | None = os.stat(path).st_mode
    except NotADirectoryError:
        raise _under_a_file(path) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise _too_long(path, exc) from None
        broken = _broken_link(path)
        if broken is not None:
            raise broken from None
        if exc.errno == errno.ELOOP:
            raise ConfigurationError(f"SQLite store path {path!r} goes through {_LOOPS}") from None
        mode = None  # missing (created on open), or SQLite's own error says what is wrong
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
    return path


def _expand_home(path: str) -> str:
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):  # no such user, or no HOME: never a directory named '~'
        raise ConfigurationError(
            f"SQLite store path {path!r} starts with {path.split(os.sep, 1)[0]!r}, which names "
            "no home directory here; write the full path"
        )
    return expanded


def _broken_link(path: str) -> ConfigurationError | None:
    """The error for a link in ``path`` that leads nowhere, or ``None`` (it is just missing).

    ``stat`` found nothing at ``path``: the nearest thing that exists, looking up from it, is
    a directory (the rest is created), or a link that points nowhere or loops.
    """
    here = path
    while True:
        try:
            st = os.lstat(here)
        except OSError:  # missing, or behind the broken link: one level up
            parent = os.path.dirname(here)
            if not parent or parent == here:
                return None
            here = parent
            continue
        if not stat.S_ISLNK(st.st_mode):
            return None
        try:
            os.stat(here)
        except OSError as exc:
            return _link_error(path, here, exc)
        return None


def _link_error(path: str, link: str, exc: OSError) -> ConfigurationError | None:
    where = f"SQLite store path {path!r} " + (
        "is" if link == path else f"cannot be opened: {link!r} is"
    )
    if exc.errno == errno.ELOOP:
        return ConfigurationError(f"{where} {_LOOPS}; fix or remove the link")
    if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
        return None  # a permission, say: SQLite's own error says so, and it may be retried
    target = os.readlink(link)
    if link != path:
        return ConfigurationError(
            f"{where} a symbolic link to {target!r}, which does not exist; create it or fix the "
            "link"
        )
    directory = os.path.dirname(os.path.realpath(link))
    if os.path.isdir(directory):
        return None  # SQLite creates the file the link names
    return ConfigurationError(
        f"{where} a symbolic link to {target!r}, whose directory {directory!r} does not exist; "
        "create it or fix the link"
    )


def _too_long(path: str, exc: OSError) -> ConfigurationError:
    longest = max(len(os.fsencode(name)) for name in Path(path).parts)
    return ConfigurationError(
        f"SQLite store path {path!r} is too long for the filesystem ({exc.strerror}; its "
        f"longest name is {longest} bytes, the whole path {len(os.fsencode(path))}); name a "
        "shorter file"
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
