"""A redeploy that renamed the tool a run is paused in, met by ``tether approve --app``,
``tether resume --app`` and ``tether worker``, each in a fresh process, on both backends: the
error names the missing tool and reaches the operator (stderr, exit code 4, the worker's log),
nothing is claimed, the answer (when one was stored) is kept, and the code with the tool back
continues the run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tether
from tests.cli.test_cli import tether_cli
from tests.support.answers_app import effects
from tests.support.proc import ROOT, child_env, run_module
from tests.support.waiting import wait_for

APP = "tests.support.answers_app:app"
RENAMED = {"TETHER_TEST_TOOL": "refund_v2"}


def _paused(db_url: str, steps: str, eid: str) -> None:
    env = {"TETHER_DATABASE_URL": db_url, "TETHER_TEST_STEPS": steps}
    _, out, _ = run_module("tests.support.answers_app", ["desk", "run", eid], env=env)
    assert (
        out is not None
        and out["status"] == "paused"
        and out["pending"]["reason"] == "approve_refund"
    ), out


def _refused_naming_the_tool(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 4, (proc.returncode, proc.stdout, proc.stderr)
    assert "MissingStepError" in proc.stderr and "tool 'refund'" in proc.stderr
    assert "nothing was claimed" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_tether_approve_with_a_renamed_tool_is_refused_and_the_interrupt_stays_answerable(
    store: Any, db_url: str, tmp_path: Path
) -> None:
    steps = str(tmp_path / "steps.txt")
    _paused(db_url, steps, "c1")
    refused = tether_cli(db_url, "approve", "c1", "--app", APP, TETHER_TEST_STEPS=steps, **RENAMED)
    _refused_naming_the_tool(refused)
    pending = store.get_pending_interrupt("c1")
    assert pending.resume_value is None and pending.claimed_by is None
    assert store.get_run("c1").status == "paused" and effects(steps) == []

    done = tether_cli(db_url, "approve", "c1", "--app", APP, "--json", TETHER_TEST_STEPS=steps)
    assert done.returncode == 0, done.stderr
    assert store.get_run("c1").status == "completed"
    assert effects(steps) == ["tool A-1 900"]


def test_tether_resume_of_a_stored_approval_with_a_renamed_tool_keeps_the_answer(
    store: Any, db_url: str, tmp_path: Path
) -> None:
    steps = str(tmp_path / "steps.txt")
    _paused(db_url, steps, "c2")
    stored = tether_cli(db_url, "approve", "c2")  # no --app: the answer is only stored
    assert stored.returncode == 0, stored.stderr
    refused = tether_cli(db_url, "resume", "c2", "--app", APP, TETHER_TEST_STEPS=steps, **RENAMED)
    _refused_naming_the_tool(refused)
    pending = store.get_pending_interrupt("c2")
    assert pending.resume_value["approved"] is True and pending.claimed_by is None
    assert effects(steps) == []

    done = tether_cli(db_url, "resume", "c2", "--app", APP, TETHER_TEST_STEPS=steps)
    assert done.returncode == 0, done.stderr
    assert store.get_run("c2").status == "completed"
    assert effects(steps) == ["tool A-1 900"]


def _worker(db_url: str, log: Path, *options: str, **env: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tether.cli",
                "worker",
                "--app",
                APP,
                "--db",
                db_url,
                "--lease-seconds",
                "1",
                "--poll-interval",
                "0.05",
                *options,
            ],
            env=child_env(TETHER_DATABASE_URL=db_url, **env),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(10)


def test_a_worker_with_a_renamed_tool_logs_it_and_leaves_the_approval_for_the_fixed_code(
    store: Any, db_url: str, tmp_path: Path
) -> None:
    steps = str(tmp_path / "steps.txt")
    _paused(db_url, steps, "c3")
    assert tether_cli(db_url, "approve", "c3").returncode == 0
    log = tmp_path / "renamed.log"
    worker = _worker(db_url, log, TETHER_TEST_STEPS=steps, **RENAMED)
    try:
        wait_for(lambda: "tool 'refund'" in log.read_text(), "the worker to log the refusal", 60)
    finally:
        _stop(worker)
    text = log.read_text()
    assert "c3" in text and "nothing was claimed" in text
    pending = store.get_pending_interrupt("c3")
    assert pending.resume_value["approved"] is True and pending.claimed_by is None
    assert store.get_run("c3").status == "paused" and effects(steps) == []

    fixed = _worker(db_url, tmp_path / "fixed.log", TETHER_TEST_STEPS=steps)
    try:
        wait_for(lambda: store.get_run("c3").status == "completed", "the fixed worker", 60)
    finally:
        _stop(fixed)
    assert effects(steps) == ["tool A-1 900"]


def test_a_worker_without_the_step_leaves_the_run_paused_once_and_never_dead_letters_it(
    store: Any, db_url: str, tmp_path: Path
) -> None:
    """A refusal into missing code is not a crash: the worker logs one line naming what is
    missing, gives the run back with its answer (never failed, never dead-lettered, whatever
    ``--max-attempts``), records why on the run, does not claim it again while it keeps
    working, and a worker with the code continues it."""
    steps = str(tmp_path / "steps.txt")
    _paused(db_url, steps, "c4")
    assert tether_cli(db_url, "approve", "c4").returncode == 0
    log = tmp_path / "renamed.log"
    worker = _worker(db_url, log, "--max-attempts", "2", TETHER_TEST_STEPS=steps, **RENAMED)
    try:
        wait_for(lambda: "tool 'refund'" in log.read_text(), "the worker to log the refusal", 60)
        # The worker keeps claiming other work meanwhile: a run queued now is driven.
        tether.enqueue(store, "approvals", {"order_id": "Q-1"}, execution_id="other")
        wait_for(lambda: store.get_run("other").status == "paused", "the worker's next run", 60)
        # Without the fix the run was retried every back-off (at most the 1 s lease) and
        # dead-lettered at its second claim; watch it for several of those periods.
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            run = store.get_run("c4")
            assert run.status == "paused", run
            time.sleep(0.2)
    finally:
        _stop(worker)
    text = log.read_text()
    assert "Traceback" not in text and "DeadLetter" not in text
    # "run c4 ": the worker's owner id is random hex and may itself contain "c4".
    lines = [entry for entry in text.splitlines() if "run c4 " in entry]
    assert len(lines) == 1, text
    [line] = lines
    assert "tool 'refund'" in line and "Deploy code that has it" in line
    run = store.get_run("c4")
    assert run.status == "paused" and run.owner is None
    assert run.error.startswith("MissingStepError") and "tool 'refund'" in run.error
    pending = store.get_pending_interrupt("c4")
    assert pending.resume_value["approved"] is True and pending.claimed_by is None
    listed = tether_cli(db_url, "pending", "list", "--json")
    [shown] = [p for p in json.loads(listed.stdout) if p["execution_id"] == "c4"]
    assert "tool 'refund'" in shown["run_error"]
    assert effects(steps) == []

    fixed = _worker(db_url, tmp_path / "fixed.log", TETHER_TEST_STEPS=steps)
    try:
        wait_for(lambda: store.get_run("c4").status == "completed", "the fixed worker", 60)
    finally:
        _stop(fixed)
    assert store.get_run("c4").error is None
    assert effects(steps) == ["tool A-1 900"]
