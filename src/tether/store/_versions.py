"""The version of the code that started a run (docs/design.md §13, "Deploys"): the schema
change that records it, and the claim filter a worker uses to serve only the versions it
declares compatible.

A run's ``app_version`` is written once, when the run is created (or when a worker starts a
queued run that was enqueued without one), and never changed. ``NULL`` means "not recorded":
runs started before versions were recorded, or by code that declares none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

__all__ = [
    "POSTGRES_MIGRATION_V8",
    "POSTGRES_SERVED",
    "SQLITE_MIGRATION_V8",
    "postgres_served",
    "sqlite_served",
]

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

# Postgres: one statement shape for every worker; parameters (serve_all, versions). A run with
# no recorded version is served by every worker (it predates versions, or its code declared
# none); the re-entry checks still refuse one whose step this code lacks (MissingStepError).
POSTGRES_SERVED: Final = " AND (%s OR r.app_version IS NULL OR r.app_version = ANY(%s))"


def postgres_served(versions: Sequence[str] | None) -> tuple[bool, list[str]]:
    """The parameters of :data:`POSTGRES_SERVED` for a worker serving ``versions`` (``None``:
    every run)."""
    return versions is None, list(versions or ())


def sqlite_served(versions: Sequence[str] | None) -> tuple[str, list[Any]]:
    """The claim's ``AND ...`` fragment and its parameters for a worker serving ``versions``
    (``None``: every run, no fragment)."""
    if versions is None:
        return "", []
    if not versions:
        return " AND r.app_version IS NULL", []
    marks = ",".join("?" * len(versions))
    return f" AND (r.app_version IS NULL OR r.app_version IN ({marks}))", list(versions)
