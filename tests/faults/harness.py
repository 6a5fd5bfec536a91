"""The crash-matrix harness: a fork server client, a stub whose answers depend on the request,
and :func:`drive`, which runs one scenario through crashes and resumes to its end."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.scenarios import read_lines, reply_for
from tests.llm.stub_server import StubServer
from tests.support.proc import ROOT, child_env


class PolicyStub(StubServer):
    """The LLM stub, answering each request with :func:`reply_for` of its body instead of a
    queue, so that a model asked again after a crash answers the same.

    The stub's handler records a request and then takes the next answer, both on the thread
    serving that request; the recorded body is kept per thread to pick the answer.
    """

    def __init__(self) -> None:
        self._current = threading.local()
        super().__init__()

    def _record(self, entry: Any) -> None:
        self._current.body = entry.body
        super()._record(entry)

    def _next_item(self) -> dict[str, Any] | None:
        return reply_for(self._current.body)

    def bodies_since(self, mark: int) -> list[tuple[str, Any]]:
        """``(path, body)`` of the API requests received after ``len(self.log) == mark``."""
        with self._lock:
            return [(e.path, e.body) for e in self.log[mark:] if not e.path.startswith("/_stub")]


class ForkServer:
    """A client of ``tests.faults.zygote``: each call forks a fresh child there."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=child_env(),
        )
        self._lock = threading.Lock()
        ready = self.proc.stdout.readline() if self.proc.stdout else ""
        if not ready.startswith('{"ready"'):
            raise RuntimeError(f"fork server did not start: {ready!r}")

    def call(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("fork server died")
        answer = json.loads(line)
        out = answer["out"]
        if answer["rc"] not in (0, -9) or (out and out["status"] == "crashed"):
            raise AssertionError(f"child failed ({answer['rc']}): {out}")
        return answer

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout:
            self.proc.stdout.close()


@dataclass
class Outcome:
    """What one scenario did, from its first process to its completion."""

    execution_id: str
    processes: int = 0
    crashes: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)
    hits_by_role: list[dict[str, int]] = field(default_factory=list)
    steps: Counter[str] = field(default_factory=Counter)
    ledger: Counter[str] = field(default_factory=Counter)
    requests: list[tuple[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Crash:
    """Where to crash: the ``n``-th hit of ``point`` in the process of ``role`` (0: the one
    that starts the run or fork; k: the one that gives the kth answer to an interrupt).
    ``refire``: how many more times the point fires in later resumes (each at its second hit
    there, so every process makes progress before it dies)."""

    point: str
    n: int
    role: int
    refire: int = 0


def drive(
    server: ForkServer,
    stub: PolicyStub,
    store: Any,
    db_url: str,
    kind: str,
    tmp: Path,
    *,
    crash: Crash | None = None,
    count_faults: bool = False,
    fork_of: tuple[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
    max_processes: int = 12,
) -> Outcome:
    """Run scenario ``kind`` (or a fork of ``fork_of = (execution_id, checkpoint_id)``) to
    completion, crashing as ``crash`` says; every resume is a fresh child process. A paused
    run is answered (approve) by the first process after it paused; a run whose answer was
    claimed by a process that died is resumed without one (the stored answer is used)."""
    eid = f"{kind}-{uuid.uuid4().hex[:10]}"
    files = {
        "TETHER_TEST_STEPS": str(tmp / f"{eid}.steps"),
        "TETHER_TEST_LEDGER": str(tmp / f"{eid}.ledger"),
    }
    env = {**files, **(extra_env or {})}
    outcome = Outcome(eid)
    mark = len(stub.log)
    base = {"db_url": db_url, "stub_url": stub.url, "kind": kind, "eid": eid, "env": env}
    if fork_of is None:
        request: dict[str, Any] = {**base, "verb": "run"}
    else:
        request = {**base, "verb": "fork", "source_eid": fork_of[0], "checkpoint_id": fork_of[1]}
    role, answered, refires = 0, 0, 0
    while True:
        if outcome.processes >= max_processes:
            raise AssertionError(f"{eid}: not completed after {max_processes} processes")
        fault = None
        if crash is not None:
            if outcome.crashes == 0 and role == crash.role:
                fault = f"{crash.point}@{crash.n}"
            elif outcome.crashes and refires < crash.refire:
                refires += 1
                fault = f"{crash.point}@2"
        answer = server.call(**request, fault=fault, count_faults=count_faults)
        outcome.processes += 1
        if answer["rc"] == -9:
            outcome.crashes += 1
        else:
            out = answer["out"]
            outcome.results.append(out)
            if out.get("faults") is not None:
                outcome.hits_by_role.append(out["faults"])
            if out["status"] == "completed":
                break
            if out["status"] != "paused":
                raise AssertionError(f"{eid}: unexpected outcome {out}")
        pending = store.get_pending_interrupt(eid)
        give = pending is not None and pending.resume_value is None
        answered += give
        role = answered if give else -1
        request = {**base, "verb": "resume", "answer": True if give else None}
    outcome.steps = Counter(read_lines(files["TETHER_TEST_STEPS"]))
    outcome.ledger = Counter(
        line.split(" ", 1)[1] for line in read_lines(files["TETHER_TEST_LEDGER"])
    )
    outcome.requests = stub.bodies_since(mark)
    return outcome
