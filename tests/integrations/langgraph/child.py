"""A process that drives the test graph on ``TetherSaver`` and prints one JSON line.

``python -m tests.integrations.langgraph.child run <thread_id> <prompt>``,
``... resume <thread_id>`` (continue after a crash), ``... answer <thread_id> <json>``
(``Command(resume=...)``), or ``... runner <thread_id> <prompt>`` (start it as a tether run of
the registered runner, ``app.py``). The store is ``TETHER_DATABASE_URL``; the model
``STUB_URL``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from tests.integrations.langgraph.graphs import build
from tether.integrations.langgraph import TetherSaver


def report(result: dict[str, Any]) -> dict[str, Any]:
    pending = result.get("__interrupt__") or []
    return {
        "status": "paused" if pending else "completed",
        "interrupts": [p.value for p in pending],
        "messages": [[type(m).__name__, m.content] for m in result["messages"]],
    }


def main() -> None:
    verb, thread_id, *rest = sys.argv[1:]
    if verb == "runner":
        from tests.integrations.langgraph.app import support

        outcome = support().run({"messages": [HumanMessage(rest[0])]}, thread_id=thread_id)
        print(json.dumps({"status": outcome.status}), flush=True)
        return
    with TetherSaver.from_url() as saver:
        graph = build().compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        if verb == "run":
            result = graph.invoke({"messages": [HumanMessage(rest[0])]}, config)
        elif verb == "resume":
            result = graph.invoke(None, config)
        else:
            result = graph.invoke(Command(resume=json.loads(rest[0])), config)
        print(json.dumps(report(result)), flush=True)


if __name__ == "__main__":
    main()
