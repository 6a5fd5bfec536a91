"""Run one verb of the test agent in this process, talking to the LLM stub over HTTP; used by
the agent crash tests.

Usage: python -m tests.agent.child <db_url> <stub_url> <openai|anthropic> run <eid> <text>
       python -m tests.agent.child <db_url> <stub_url> <openai|anthropic> resume <eid> [approve]

Prints one JSON line: {"status": ..., "output": ..., "error": ...}. Tool invocations go to
``$TOOL_LOG`` (see tests.agent.agents); ``$AGENT_KIND`` picks the agent (``plain``, ``typed``).
"""

from __future__ import annotations

import json
import os
import sys

import tether
from tests.agent.agents import make_agent
from tether.llm.base import LLM


def make_llm(provider: str, stub_url: str) -> LLM:
    if provider == "anthropic":
        from tether.llm.anthropic import AnthropicMessages

        return AnthropicMessages(
            "claude-test", api_key="sk-test-key", base_url=stub_url, max_retries=0
        )
    from tether.llm.openai import OpenAIChat

    return OpenAIChat("gpt-test", api_key="sk-test-key", base_url=stub_url + "/v1", max_retries=0)


def main(argv: list[str]) -> int:
    url, stub_url, provider, verb, eid = argv[:5]
    store = tether.connect(url)
    agent = make_agent(os.environ.get("AGENT_KIND", "plain"), make_llm(provider, stub_url), store)
    try:
        if verb == "run":
            result = agent.run(argv[5], execution_id=eid)
        elif verb == "resume":
            value = tether.Resume(approved=argv[5] == "approve") if len(argv) > 5 else None
            result = agent.resume(eid, value)
        else:
            raise SystemExit(f"unknown verb {verb}")
        out = {"status": result.status, "output": result.output, "error": repr(result.error)}
        print(json.dumps(out), flush=True)
    except tether.TetherError as exc:
        print(json.dumps({"status": "error", "error": type(exc).__name__}), flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
