"""A long-lived process that forks one fresh child per runner verb (a fork server).

Starting a Python process that imports the provider SDKs costs about two seconds; the crash
matrix needs hundreds of processes. This server imports everything once and never touches a
store, an SDK client or a thread; each request is served by ``os.fork()``: the child opens its
own store connection and model clients, arms its own fault points, runs one verb and exits, or
is SIGKILLed by a fault point. A child shares nothing with the process that crashed before it
except the store and the files it appends to, exactly like a new process would.

Protocol: one JSON request per line on stdin, one JSON line per answer on stdout::

    {"db_url", "stub_url", "kind", "verb": "run"|"resume"|"fork", "eid", "source_eid"?,
     "checkpoint_id"?, "answer": true|false|null, "fault": "name@n,..."|null,
     "count_faults": bool, "env": {...}}
    -> {"rc": <exit status, -9 when killed>, "out": {"status", "output", "faults", ...}|null}
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from typing import Any

# Imported here, once, so children start warm.
import anthropic  # noqa: F401
import openai  # noqa: F401

import tether
from tests.faults.graphs import GRAPH_ENV, build_chain
from tests.faults.scenarios import input_of, make_runner
from tether import _faults
from tether.llm.anthropic import AnthropicMessages
from tether.llm.openai import OpenAIChat
from tether.store import postgres, sqlite  # noqa: F401

API_KEY = "sk-matrix-4c1d9e"


def make_llm_factory(kind: str, stub_url: str) -> Any:
    from tests.faults.scenarios import PROVIDER

    if PROVIDER.get(kind) == "anthropic":
        return lambda: AnthropicMessages(
            "claude-test", api_key=API_KEY, base_url=stub_url, max_retries=0
        )
    return lambda: OpenAIChat("gpt-test", api_key=API_KEY, base_url=stub_url + "/v1", max_retries=0)


def serve_one(req: dict[str, Any]) -> dict[str, Any]:
    """Run one verb in this (child) process and describe the outcome."""
    os.environ.update(req.get("env") or {})
    if req.get("count_faults"):
        _faults.rearm(",".join(f"{p}@{10**9}" for p in _faults.FAULT_POINTS))
    else:
        _faults.rearm(req.get("fault") or "")
    store = tether.connect(req["db_url"])
    try:
        if req["kind"] == "random_chain":  # tests.faults.graphs, spec in the environment
            runner = build_chain(json.loads(os.environ[GRAPH_ENV]), store)
            start_input: Any = {"x": 1}
        else:
            llms = make_llm_factory(req["kind"], req["stub_url"])
            runner = make_runner(req["kind"], store, llms)
            start_input = input_of(req["kind"])
        answer = req.get("answer")
        value = None if answer is None else tether.Resume(approved=bool(answer))
        try:
            if req["verb"] == "run":
                result = runner.run(start_input, execution_id=req["eid"])
            elif req["verb"] == "resume":
                result = runner.resume(req["eid"], value)
            else:
                result = runner.fork(
                    req["source_eid"],
                    req.get("checkpoint_id"),
                    resume_value=value,
                    new_execution_id=req["eid"],
                )
        except tether.TetherError as exc:
            return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        return {
            "status": result.status,
            "output": result.output,
            "error": None if result.error is None else repr(result.error),
            "faults": dict(_faults._hits) if req.get("count_faults") else None,
        }
    finally:
        store.close()


def fork_child(req: dict[str, Any]) -> dict[str, Any]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # stdout is the protocol channel of the server
        try:
            out = serve_one(req)
        except BaseException:
            out = {"status": "crashed", "error": traceback.format_exc()}
        with os.fdopen(write_fd, "w") as pipe:
            pipe.write(json.dumps(out, default=str))
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return {"rc": rc, "out": json.loads(data) if data else None}


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        print(json.dumps(fork_child(json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
