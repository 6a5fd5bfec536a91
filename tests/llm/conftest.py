"""Fixtures for the model adapter tests: a fresh loopback stub server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llm.stub_server import StubServer


@pytest.fixture
def stub() -> Iterator[StubServer]:
    """A started :class:`StubServer` with an empty script."""
    with StubServer() as server:
        yield server
