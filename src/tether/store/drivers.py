"""What runs a plan on a tether store, for an integration that keeps its own tables in the
store (the LangGraph saver, :mod:`tether.integrations.langgraph`).

A plan (:data:`Plan`) yields statements and is sent each one's :class:`Result`; :func:`last`
marks a write plan's final statement, which a driver runs alone. :func:`translate_sqlite_error`
turns a :mod:`sqlite3` error into tether's error tree, as the SQLite store does. Defined in
the store's ``_plans`` and ``_sqlite_io`` modules; this module is their public name.
"""

from __future__ import annotations

from ._plans import Plan, Result, Statement, Write, is_last, last
from ._sqlite_io import translate as translate_sqlite_error

__all__ = [
    "Plan",
    "Result",
    "Statement",
    "Write",
    "is_last",
    "last",
    "translate_sqlite_error",
]
