"""CLI tests run the real ``tether`` entry point in subprocesses against both backends."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture(autouse=True)
def _postgres_backend_present(request: pytest.FixtureRequest) -> None:
    # The shared fixtures import tether.store.postgres; skip visibly while it is absent.
    wants_postgres = (
        "backend" in request.fixturenames and request.getfixturevalue("backend") == "postgres"
    )
    if wants_postgres and importlib.util.find_spec("tether.store.postgres") is None:
        pytest.skip("tether.store.postgres is not in this tree yet")
