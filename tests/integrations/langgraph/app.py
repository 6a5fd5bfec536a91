"""The test graph (``graphs.py``) registered as a tether runner, for ``tether`` commands and
the approvals page (``--app tests.integrations.langgraph.app:app``). The store is
``TETHER_DATABASE_URL`` (the CLI sets it from ``--db``); the model ``STUB_URL``."""

from __future__ import annotations

import os

from tests.integrations.langgraph.graphs import build
from tether import Registry, connect
from tether.integrations.langgraph import LangGraphRunner, TetherSaver
from tether.store.base import Checkpointer


def support(store: Checkpointer | None = None) -> LangGraphRunner:
    """The support graph as a runner; in-process tests pass their store."""
    graph = build().compile(checkpointer=TetherSaver(store or connect()))
    # A worker takes a killed thread over within about a second.
    return LangGraphRunner(graph, name="support", lease_seconds=1.0)


app = Registry(support()) if "STUB_URL" in os.environ else Registry()
