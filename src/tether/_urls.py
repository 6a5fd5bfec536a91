"""Store URLs split into their parts, an unparseable one refused as configuration; the file a
``sqlite:`` URL names."""

from __future__ import annotations

from urllib.parse import SplitResult, unquote, urlsplit

from .errors import ConfigurationError

__all__ = ["split_store_url", "sqlite_url_path"]


def split_store_url(url: str) -> SplitResult:
    """``url`` split into its parts, as :func:`urllib.parse.urlsplit` does.

    Raises:
        ConfigurationError: the URL cannot be parsed (an unclosed ``[`` of an IPv6 host...);
            the message says why, without the password.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        scheme = url.split("://", 1)[0] if "://" in url else ""
        shown = f"a {scheme}:// URL" if scheme else "the store URL"
        raise ConfigurationError(f"cannot parse {shown}: {exc}") from None
    return parts


def sqlite_url_path(url: str, parts: SplitResult) -> str:
    """The file a ``sqlite:`` URL names, percent-decoded, or ``":memory:"``.

    ``sqlite:///rel.db`` names ``rel.db``, ``sqlite:////abs.db`` names ``/abs.db``, and
    ``sqlite://:memory:`` (or ``sqlite:///:memory:``) a throwaway store.

    Args:
        url: the URL, for messages.
        parts: ``url`` as :func:`split_store_url` split it.

    Raises:
        ConfigurationError: the URL names no file, or has a query or fragment: tether reads
            none (``?mode=ro`` would be dropped and the file opened writable), and a ``?`` or
            ``#`` meant for the file's name would cut it short.
    """
    if parts.netloc == ":memory:" or parts.path == "/:memory:":
        return ":memory:"
    path = unquote(parts.path)
    path = path[1:] if path.startswith("/") else path
    # A 'file:' URI's query is part of the mistake the store's own check names.
    if (parts.query or parts.fragment) and not path.startswith("file:"):
        extra = f"?{parts.query}" if parts.query else f"#{parts.fragment}"
        raise ConfigurationError(
            f"SQLite URL {url!r} has a query or fragment ({extra!r}), which tether does not "
            "read: to read without writing pass read_only=True (the CLI's reading commands "
            "open the store read-only already), and write a '?' or '#' in a file name as %3F "
            "or %23"
        )
    if not path:
        raise ConfigurationError(f"SQLite URL {url!r} names no file")
    return path
