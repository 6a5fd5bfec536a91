"""Runs record the version of the code that started them, and a worker serves only the
versions it declares compatible (docs/design.md §13), on both backends: in process, and with
``tether worker`` subprocesses that leave an old version's paused run alone until a worker
that serves it comes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import tether
from tests.cli.test_changed_code import _stop, _worker
from tests.cli.test_cli import tether_cli
from tests.support.answers_app import effects
from tests.support.proc import run_module
from tests.support.waiting import wait_for
from tether import Chain, Registry
from tether.errors import ConfigurationError
from tether.store._listing import RunsQuery


def _paused(db_url: str, eid: str, **env: str) -> None:
    """Start the ``desk`` agent in a fresh process until it pauses in its approval tool."""
    _, out, _ = run_module(
        "tests.support.answers_app", ["desk", "run", eid], env=env, TETHER_DATABASE_URL=db_url
    )
    assert out is not None and out["status"] == "paused", out


def _chain(store: Any, name: str = "orders") -> Chain:
    chain = Chain(name, store)
    chain.add_node("one", lambda state: {"done": True})
    return chain


def test_a_run_records_the_registry_version_else_the_environment(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_APP_VERSION", raising=False)
    assert _chain(store).run({}, execution_id="none").status == "completed"
    assert store.get_run("none").app_version is None

    monkeypatch.setenv("TETHER_APP_VERSION", "1.4")
    _chain(store).run({}, execution_id="env")
    assert store.get_run("env").app_version == "1.4"

    registered = _chain(store)
    Registry(registered, version="1.5")
    registered.run({}, execution_id="reg")
    assert store.get_run("reg").app_version == "1.5"
    # A fork is started by the code that forks it.
    fork = registered.fork("env", new_execution_id="fork-of-env")
    assert store.get_run(fork.execution_id).app_version == "1.5"

    page = store.list_runs_page(RunsQuery(app_version="1.4", count=True))
    assert [r.execution_id for r in page.items] == ["env"] and page.total == 1
    both = store.list_runs_page(RunsQuery(status=("completed", "paused"), app_version="1.5"))
    assert {r.execution_id for r in both.items} == {"reg", "fork-of-env"}


def test_a_queued_run_keeps_its_enqueued_version_or_records_its_starters(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_APP_VERSION", raising=False)
    tether.enqueue(store, "orders", {}, execution_id="pinned", app_version="1.4")
    tether.enqueue(store, "orders", {}, execution_id="open")
    assert store.get_run("pinned").app_version == "1.4"
    assert store.get_run("open").app_version is None
    app = Registry(_chain(store), version="1.5")
    stop_after = time.monotonic() + 30

    def done() -> bool:
        return store.get_run("open").status == "completed" or time.monotonic() > stop_after

    stats = tether.run_worker(app, store, poll_interval_seconds=0.01, stop=done)
    assert stats.claimed == 1
    run = store.get_run("open")
    assert run.status == "completed" and run.app_version == "1.5"
    assert store.get_run("pinned").status == "queued"  # a 1.4 run: not this worker's


def test_bad_versions_are_refused_with_the_reason() -> None:
    with pytest.raises(ConfigurationError, match="comma"):
        Registry(version="1.4,1.5")
    with pytest.raises(ConfigurationError, match="non-empty string"):
        Registry(version=" 1.5")
    with pytest.raises(ConfigurationError, match="needs a version of this code"):
        Registry(compatible_versions=["1.4"])
    with pytest.raises(ConfigurationError, match="list of versions"):
        Registry(version="1.5", compatible_versions="1.4")
    assert Registry(version="1.5", compatible_versions=["1.4"]).served_versions() == ["1.5", "1.4"]


def test_a_worker_leaves_an_old_versions_paused_run_to_a_worker_that_serves_it(
    store: Any, db_url: str, tmp_path: Path
) -> None:
    steps = str(tmp_path / "steps.txt")
    new = {"TETHER_TEST_STEPS": steps, "TETHER_APP_VERSION": "1.5"}
    _paused(db_url, "old", TETHER_TEST_STEPS=steps, TETHER_APP_VERSION="1.4")
    assert store.get_run("old").app_version == "1.4"
    assert tether_cli(db_url, "approve", "old").returncode == 0  # answer stored, not applied
    shown = json.loads(tether_cli(db_url, "runs", "show", "old", "--json").stdout)
    assert shown["run"]["app_version"] == "1.4"

    worker = _worker(db_url, tmp_path / "new.log", **new)
    try:
        # The worker is alive and claiming: a 1.5 run queued now is driven to its pause.
        tether.enqueue(store, "desk", "Please refund order A-1", execution_id="fresh")
        wait_for(lambda: store.get_run("fresh").status == "paused", "the 1.5 worker", 60)
        assert store.get_run("fresh").app_version == "1.5"
        deadline = time.monotonic() + 3  # several poll intervals and leases of 1 s
        while time.monotonic() < deadline:
            run = store.get_run("old")
            assert run.status == "paused" and run.owner is None and run.error is None, run
            time.sleep(0.2)
    finally:
        _stop(worker)
    pending = store.get_pending_interrupt("old")
    assert pending.resume_value["approved"] is True and pending.claimed_by is None
    assert effects(steps) == []
    draining = tether_cli(
        db_url, "runs", "list", "--version", "1.4", "--status", "running,paused,queued", "--json"
    )
    assert [r["execution_id"] for r in json.loads(draining.stdout)] == ["old"]

    serving = _worker(db_url, tmp_path / "serving.log", "--versions", "1.4", **new)
    try:
        wait_for(lambda: store.get_run("old").status == "completed", "the 1.4-serving worker", 60)
    finally:
        _stop(serving)
    assert effects(steps) == ["tool A-1 900"]
    assert store.get_run("old").app_version == "1.4"  # continued, still the version it began in
    drained = tether_cli(
        db_url, "runs", "list", "--version", "1.4", "--status", "running,paused,queued", "--json"
    )
    assert json.loads(drained.stdout) == []
