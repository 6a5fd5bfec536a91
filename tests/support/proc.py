"""Run test children in real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def child_env(fault: str | None = None, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TETHER_FAULT", None)
    if fault:
        env["TETHER_FAULT"] = fault
    env.update(extra)
    return env


def run_child(
    args: list[str], *, fault: str | None = None, timeout: float = 60, **extra: str
) -> tuple[int, dict[str, Any] | None]:
    """Run ``python -m tests.support.child *args``; returns (returncode, parsed output)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.child", *args],
        env=child_env(fault, **extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    out = None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if lines:
        out = json.loads(lines[-1])
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return proc.returncode, out


def run_together(argvs: list[list[str]], *, timeout: float = 120) -> list[tuple[int, str, str]]:
    """Start ``python <argv>`` for every argv at once (test env, repo root) and wait for all;
    returns ``(returncode, stdout, stderr)`` per process, in order."""
    procs = [
        subprocess.Popen(
            [sys.executable, *argv],
            env=child_env(),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs, strict=True)]


def run_module(
    module: str,
    args: list[str],
    *,
    fault: str | None = None,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    **extra: str,
) -> tuple[int, dict[str, Any] | None, str]:
    """Run ``python -m <module> *args`` (test env, repo root; ``env`` and ``extra`` add
    environment variables); returns (returncode, its last JSON line parsed, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        env=child_env(fault, **{**(env or {}), **extra}),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    out = json.loads(lines[-1]) if lines else None
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return proc.returncode, out, proc.stderr
