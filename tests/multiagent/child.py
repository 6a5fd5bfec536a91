"""Run one verb of the test swarm or supervisor in this process, its models talking to the LLM
stub over HTTP; used by the multi-agent crash tests.

Usage: python -m tests.multiagent.child <db_url> <stub_url> <openai|anthropic> <swarm|supervisor>
           run <eid> <text>
       python -m tests.multiagent.child ... resume <eid> [approve|reject]

Prints one JSON line: {"status": ..., "output": ..., "pending": ..., "error": ...}.
"""

from __future__ import annotations

import json
import sys

import tether
from tests.agent.child import make_llm
from tests.multiagent.topologies import make_supervisor, make_swarm


def main(argv: list[str]) -> int:
    url, stub_url, provider, topology, verb, eid = argv[:6]
    store = tether.connect(url)
    roles = ("boss", "research", "approve", "audit", "triage", "billing")
    llms = {role: make_llm(provider, stub_url) for role in roles}
    runner = make_swarm(llms, store) if topology == "swarm" else make_supervisor(llms, store)
    try:
        if verb == "run":
            result = runner.run(argv[6], execution_id=eid)
        else:
            value = tether.Resume(approved=argv[6] == "approve") if len(argv) > 6 else None
            result = runner.resume(eid, value)
        out = {
            "status": result.status,
            "output": result.output,
            "pending": result.pending_interrupt,
            "error": repr(result.error),
        }
        print(json.dumps(out), flush=True)
    except tether.TetherError as exc:
        print(json.dumps({"status": "error", "error": type(exc).__name__}), flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
