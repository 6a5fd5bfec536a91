"""Fixtures for the worker tests: a throwaway PostgreSQL cluster a test may crash and restart
(never the shared server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import IN_CI
from tests.store.pg_cluster import Cluster, find_bindir


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[Cluster]:
    """A private server for this module, room for a few workers' pools; a test that stops it
    starts it again."""
    bindir = find_bindir()
    if bindir is None:
        reason = "PostgreSQL server binaries (initdb, pg_ctl) not found"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = Cluster(bindir, max_connections=200)
    try:
        cluster.init()
        cluster.start()
    except Exception as exc:
        cluster.destroy()
        if IN_CI:
            raise
        pytest.skip(f"cannot start a throwaway PostgreSQL cluster: {exc}")
    yield cluster
    cluster.destroy()
