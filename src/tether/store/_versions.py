"""The version of the code that started a run (docs/design.md §13, "Deploys"): the schema
change that records it. The claim filter a worker uses to serve only the versions it declares
compatible is ``_SERVED`` in each SQL module (:mod:`._sqlite_sql`, :mod:`._postgres_sql`).

A run's ``app_version`` is written once, when the run is created (or when a worker starts a
queued run that was enqueued without one), and never changed. ``NULL`` means "not recorded":
runs started before versions were recorded, or by code that declares none.
"""

from __future__ import annotations

from typing import Final

__all__ = ["POSTGRES_MIGRATION_V8", "SQLITE_MIGRATION_V8"]

# Nullable and unindexed by default rows: a partial index serves the drain listing
# (`tether runs list --version old`) without costing unversioned inserts anything.
SQLITE_MIGRATION_V8: Final[tuple[str, ...]] = (
    "ALTER TABLE runs ADD COLUMN app_version TEXT",
    "CREATE INDEX runs_version_idx ON runs (app_version, status) WHERE app_version IS NOT NULL",
)
POSTGRES_MIGRATION_V8: Final[tuple[str, ...]] = (
    "ALTER TABLE {schema}.runs ADD COLUMN app_version text",
    "CREATE INDEX runs_version_idx ON {schema}.runs (app_version, status) "
    "WHERE app_version IS NOT NULL",
)
