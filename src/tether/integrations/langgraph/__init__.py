"""LangGraph on tether (the ``langgraph`` extra; docs/langgraph.md).

:class:`TetherSaver` is a LangGraph checkpoint saver on tether's SQLite or Postgres store:
swap it in for ``SqliteSaver``/``PostgresSaver`` and the graph's code and ``thread_id`` stay
as they are, while each checkpoint is stored as what changed since the thread's previous one::

    from tether.integrations.langgraph import TetherSaver

    graph = builder.compile(checkpointer=TetherSaver.from_url("sqlite:///app.db"))

:class:`LangGraphRunner` makes the compiled graph a tether runner: its paused threads are
listed and answered by ``tether pending``/``approve``, the approvals page and the API, under
tether's run lease; ``tether worker`` continues threads whose process died::

    app = Registry(LangGraphRunner(graph, name="support"))

``import tether`` never imports LangGraph; only this package does.
"""

from __future__ import annotations

from .runner import LangGraphResult, LangGraphRunner
from .saver import TetherSaver
from .serde import TetherSerializer

__all__ = ["LangGraphResult", "LangGraphRunner", "TetherSaver", "TetherSerializer"]
