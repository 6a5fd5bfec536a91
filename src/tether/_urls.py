"""Store URLs split into their parts, an unparseable one refused as configuration."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from .errors import ConfigurationError

__all__ = ["split_store_url"]


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
