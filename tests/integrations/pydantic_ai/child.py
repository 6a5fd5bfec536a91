"""Run one verb of the durable support agent in this process (crash tests kill it).

Usage: python -m tests.integrations.pydantic_ai.child <db_url> <stub_url> run <eid> <prompt>
       python -m tests.integrations.pydantic_ai.child <db_url> <stub_url> resume <eid> [approve]

Prints one JSON line: {"status", "output", "error", "pending"}.
"""

from __future__ import annotations

import json
import os
import sys

import tether
from tests.integrations.pydantic_ai.agents import durable


def main(argv: list[str]) -> int:
    db_url, stub_url, verb, eid = argv[:4]
    store = tether.connect(db_url)
    agent = durable(stub_url, store)
    if os.environ.get("LEASE_SECONDS"):  # a short lease, so a worker takes the run over soon
        agent.lease_seconds = float(os.environ["LEASE_SECONDS"])
    try:
        if verb == "run":
            result = agent.run(argv[4], execution_id=eid)
        else:
            value = tether.Resume(approved=True) if argv[4:] == ["approve"] else None
            result = agent.resume(eid, value)
        error = None if result.error is None else f"{type(result.error).__name__}: {result.error}"
        out = {
            "status": result.status,
            "output": result.output,
            "error": error,
            "pending": result.pending_interrupt,
        }
        print(json.dumps(out), flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
