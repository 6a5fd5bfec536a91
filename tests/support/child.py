"""Run one verb of a test chain in this process; used by crash and race tests.

Usage: python -m tests.support.child <db_url> <chain> run <execution_id> <json input>
       python -m tests.support.child <db_url> <chain> resume <execution_id> [approve|reject]

Prints one JSON line: {"status": ..., "error": ...}. Exit code 0 on any tether outcome.
"""

from __future__ import annotations

import json
import sys

import tether
from tests.support.chains import CHAINS


def main(argv: list[str]) -> int:
    url, chain_name, verb, eid = argv[:4]
    store = tether.connect(url)
    chain = CHAINS[chain_name](store)
    try:
        if verb == "run":
            result = chain.run(json.loads(argv[4]), execution_id=eid)
        elif verb == "resume":
            value = None
            if len(argv) > 4:
                value = tether.Resume(approved=argv[4] == "approve")
            result = chain.resume(eid, value)
        else:
            raise SystemExit(f"unknown verb {verb}")
        print(json.dumps({"status": result.status, "error": repr(result.error)}), flush=True)
    except tether.TetherError as exc:
        print(json.dumps({"status": "error", "error": type(exc).__name__}), flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
