"""A deploy that renamed a chain node and an agent's tool carries runs across with a rename
map (docs/design.md §13, rule 5), on both backends, with real processes: runs paused in the
renamed tool and the renamed node, and a run SIGKILLed mid-step in a renamed node, are all
continued by a worker of the new code (serving the old version), each effect once."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_changed_code import _stop, _worker
from tests.cli.test_cli import tether_cli
from tests.support.answers_app import effects
from tests.support.proc import run_module
from tests.support.results import run_of
from tests.support.waiting import wait_for
from tether import Agent, Chain
from tether.errors import ConfigurationError
from tether.testing import ScriptedLLM

OLD = {"TETHER_APP_VERSION": "1.4"}
# The new code: the tool, the approval node and the crashed node have new names, mapped.
NEW = {
    "TETHER_APP_VERSION": "1.5",
    "TETHER_TEST_TOOL": "refund_v2",
    "TETHER_TEST_REVIEW": "inspect",
    "TETHER_TEST_PACK": "packing",
    "TETHER_TEST_RENAMED": "refund:refund_v2,review:inspect,pack:packing",
}


def _start(db_url: str, runner: str, eid: str, steps: str, **env: str) -> dict[str, Any]:
    code, out, _ = run_module(
        "tests.support.answers_app",
        [runner, "run", eid],
        env={**OLD, **env},
        TETHER_DATABASE_URL=db_url,
        TETHER_TEST_STEPS=steps,
    )
    if code != 0:
        return {"killed": code}
    assert out is not None, "the child printed no result"
    return out


def test_a_renamed_tool_and_node_carry_paused_and_crashed_runs_to_the_new_code(
    store: Any, db_url: str, tmp_path: Path
) -> None:
    steps = str(tmp_path / "steps.txt")
    assert _start(db_url, "desk", "tool-paused", steps)["status"] == "paused"
    assert _start(db_url, "receipts", "node-paused", steps)["status"] == "paused"
    # Killed inside `pack` once its effect ran and was cached, before the step committed.
    crashed = _start(db_url, "fulfil", "crashed", steps, TETHER_FAULT="idempotent.after_cache")
    assert crashed == {"killed": -signal.SIGKILL}
    assert store.get_run("crashed").status == "running"
    assert tether_cli(db_url, "approve", "tool-paused").returncode == 0  # stored for a worker
    assert {store.get_run(e).app_version for e in ("tool-paused", "node-paused", "crashed")} == {
        "1.4"
    }

    # The paused node: answered by the new code in a fresh process.
    _, out, _ = run_module(
        "tests.support.answers_app",
        ["receipts", "resume", "node-paused", "approve"],
        env=NEW,
        TETHER_DATABASE_URL=db_url,
        TETHER_TEST_STEPS=steps,
    )
    assert out is not None and out["status"] == "completed", out

    # The paused tool and the crashed node: a worker of the new code that serves 1.4.
    worker = _worker(
        db_url, tmp_path / "new.log", "--versions", "1.4", TETHER_TEST_STEPS=steps, **NEW
    )
    try:
        for eid in ("tool-paused", "crashed"):

            def finished(eid: str = eid) -> bool:
                return run_of(store, eid).status == "completed"

            wait_for(finished, f"{eid} to finish", 60)
    finally:
        _stop(worker)
    assert "MissingStepError" not in (tmp_path / "new.log").read_text()
    assert sorted(effects(steps)) == ["pack A-1", "receipt A-1", "tool A-1 900"]  # each once
    # The rows written after the deploy name the steps as the new code has them.
    assert "inspect" in [cp.node_id for cp in store.list("node-paused")]
    assert "packing" in [cp.node_id for cp in store.list("crashed")]


def test_without_the_map_the_new_code_refuses_naming_the_step_and_the_fix(
    store: Any, db_url: str, tmp_path: Path
) -> None:
    steps = str(tmp_path / "steps.txt")
    assert _start(db_url, "receipts", "r1", steps)["status"] == "paused"
    unmapped = {**NEW, "TETHER_TEST_RENAMED": ""}
    _, out, _ = run_module(
        "tests.support.answers_app",
        ["receipts", "resume", "r1", "approve"],
        env=unmapped,
        TETHER_DATABASE_URL=db_url,
    )
    assert out is not None and out["error_type"] == "MissingStepError", out
    assert "node 'review'" in out["error"] and "renamed={old: new}" in out["error"]
    assert store.get_pending_interrupt("r1").resume_value is None  # nothing claimed


def test_rename_maps_are_checked(store: Any) -> None:
    with pytest.raises(ConfigurationError, match="to itself"):
        Chain("c", store, renamed={"a": "a"})
    with pytest.raises(ConfigurationError, match="renamed again"):
        Chain("c", store, renamed={"a": "b", "b": "c"})
    with pytest.raises(ConfigurationError, match="dict of old name"):
        Agent("a", llm=ScriptedLLM([]), renamed=["x"])  # type: ignore[arg-type]
