"""Look at what a store URL names without creating or migrating anything (``tether``'s
read-only commands check a store this way before they open it).

Defined in the store's ``_probe`` module; this module is its public name.
"""

from __future__ import annotations

from ._probe import PROBE_CONNECT_TIMEOUT_SECONDS, check_postgres, check_sqlite

__all__ = ["PROBE_CONNECT_TIMEOUT_SECONDS", "check_postgres", "check_sqlite"]
