"""Run one verb of the durable support agent in this process (crash and takeover tests).

Usage: python -m tests.integrations.openai_agents.child run <execution_id> <input>
       python -m tests.integrations.openai_agents.child resume <execution_id> [approve|reject]

Reads ``TETHER_DATABASE_URL``, ``TETHER_TEST_STUB_URL``, ``TETHER_TEST_LEDGER`` and
``TETHER_TEST_HOLD`` (see :mod:`tests.integrations.openai_agents.app`). Prints one JSON line:
``{"status", "output", "error"}``.
"""

from __future__ import annotations

import json
import sys

import tether
from tests.integrations.openai_agents.app import support


def main(argv: list[str]) -> int:
    verb, eid = argv[:2]
    durable = support()
    if verb == "run":
        result = durable.run(argv[2], execution_id=eid)
    else:
        value = None if len(argv) < 3 else tether.Resume(approved=argv[2] == "approve")
        result = durable.resume(eid, value)
    print(
        json.dumps({"status": result.status, "output": result.output, "error": repr(result.error)})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
