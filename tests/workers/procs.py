"""Start and kill ``tether worker`` subprocesses for the worker tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

from tests.support.proc import ROOT, child_env

APP = "tests.workers.app:app"


def spawn_worker(
    url: str,
    log_dir: Path,
    name: str,
    *,
    lease_seconds: float = 1.0,
    concurrency: int = 4,
    max_attempts: int = 50,
    app: str = APP,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A ``tether worker`` process serving ``app``, with ``env`` added to its environment; its
    stderr goes to ``log_dir/<name>.log``."""
    with open(log_dir / f"{name}.log", "ab") as log:  # the child keeps its own descriptor
        return _popen(url, log, lease_seconds, concurrency, max_attempts, dict(env or {}), app)


def _popen(
    url: str,
    log: BinaryIO,
    lease_seconds: float,
    concurrency: int,
    max_attempts: int,
    env: dict[str, str],
    app: str = APP,
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "worker",
            "--app",
            app,
            "--db",
            url,
            "--lease-seconds",
            str(lease_seconds),
            "--poll-interval",
            "0.05",
            "--concurrency",
            str(concurrency),
            "--max-attempts",
            str(max_attempts),
        ],
        env=child_env(**env),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            p.kill()
    for p in procs:
        p.wait(10)


def wait_until(pred: Callable[[], bool], timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return pred()
