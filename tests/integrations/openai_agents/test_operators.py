"""Operators' tools on durable OpenAI Agents SDK runs: ``tether approve`` (with and without
``--app``), ``tether worker`` taking over a run whose process was SIGKILLed mid-tool and
continuing an approval stored from anywhere, and the approvals web page in Chromium; SQLite and
Postgres."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

import tether
from tests.integrations.openai_agents.app import ledger, support
from tests.integrations.openai_agents.conftest import (
    APP,
    HANDOFF,
    call,
    counts,
    oa_env,
    spawn_child,
    tether_cli,
    text,
)
from tests.llm.stub_server import StubServer
from tests.support.waiting import wait_for
from tests.web.conftest import TOKEN, start_server, stop_server
from tests.web.test_page import CHROMIUM_ARGS
from tests.workers.procs import stop_all
from tether.integrations.openai_agents import APPROVAL_REASON


def paused_refund(store, stub: StubServer) -> str:
    stub.script([HANDOFF, call("refund", order_id="A-1", amount=900)])
    paused = support(store, stub.url).run("Refund A-1")
    assert paused.status == "paused"
    return paused.execution_id


def status_of(store, eid: str) -> str | None:
    run = store.get_run(eid)
    return None if run is None else run.status


def test_tether_approve_with_the_app_resumes_the_run_and_the_tool_runs_once(
    store, db_url: str, stub: StubServer, ledger_path: Path
):
    eid = paused_refund(store, stub)
    stub.script([text("Refunded.")])
    env = oa_env(db_url, stub, ledger_path)

    done = tether_cli(env, "approve", eid, "--app", APP, "--db", db_url, "--json")

    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert (outcome["status"], outcome["output"]) == ("completed", "Refunded.")
    assert ledger(ledger_path) == ["refund:A-1:900"]
    assert len(stub.requests) == 3
    again = tether_cli(env, "approve", eid, "--db", db_url)
    assert again.returncode != 0 and "already" in (again.stderr + again.stdout).lower()
    assert ledger(ledger_path) == ["refund:A-1:900"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_tether_fork_branches_a_finished_run_from_its_tool_row_and_runs_only_what_follows(
    store, db_url: str, stub: StubServer, ledger_path: Path, backend: str
):
    stub.script([HANDOFF, call("lookup", order_id="A-1"), text("Paid.")])
    first = support(store, stub.url).run("Where is A-1?")
    tool_row = next(c for c in store.list(first.execution_id) if c.step_type == "tool_call")
    stub.script([text("Paid; branch.")])

    forked = tether_cli(
        oa_env(db_url, stub, ledger_path),
        "fork", first.execution_id, "--checkpoint", tool_row.checkpoint_id,
        "--app", APP, "--db", db_url, "--json",
    )  # fmt: skip

    assert forked.returncode == 0, forked.stderr
    outcome = json.loads(forked.stdout)
    assert (outcome["status"], outcome["output"]) == ("completed", "Paid; branch.")
    assert outcome["parent_execution_id"] == first.execution_id
    assert ledger(ledger_path) == ["lookup:A-1"] and len(stub.requests) == 4


def test_a_worker_takes_over_a_run_killed_mid_tool_then_continues_an_approval_given_anywhere(
    store, db_url: str, stub: StubServer, ledger_path: Path, tmp_path: Path
):
    store.setup()
    hold = tmp_path / "hold"
    hold.touch()
    stub.script([HANDOFF, call("ship", order_id="A-1"), text("Shipped.")])
    env = oa_env(db_url, stub, ledger_path, TETHER_TEST_HOLD=str(hold))
    child = spawn_child(env, "run", "killed", "Ship A-1", log=tmp_path / "child.log")
    wait_for(lambda: "ship-held:A-1" in ledger(ledger_path), "the ship tool to hold")
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    hold.unlink()
    assert status_of(store, "killed") == "running"

    worker_env = oa_env(db_url, stub, ledger_path)
    with open(tmp_path / "worker.log", "ab") as log:
        import subprocess
        import sys

        from tests.support.proc import ROOT

        worker = subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "worker", "--app", APP, "--db", db_url,
             "--lease-seconds", "1", "--poll-interval", "0.05"],
            env=worker_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    try:
        wait_for(lambda: status_of(store, "killed") == "completed", "the takeover", timeout=60)
        assert counts(ledger(ledger_path)) == {
            "ship-start:A-1": 2,
            "ship-held:A-1": 1,
            "charge:A-1": 1,
            "ship-done:A-1": 1,
        }
        assert len(stub.requests) == 3

        # A queued run, started by the worker, pauses for approval; the answer is stored by
        # `tether approve` without --app and the worker continues the run.
        stub.script([HANDOFF, call("refund", order_id="B-2", amount=300)])
        queued = tether.enqueue(store, "support", "Refund B-2")
        wait_for(lambda: status_of(store, queued) == "paused", "the queued run to pause", 60)
        stub.script([text("Refunded B-2.")])
        stored = tether_cli(env, "approve", queued, "--db", db_url, "--json")
        assert stored.returncode == 0, stored.stderr
        assert json.loads(stored.stdout)["action"] == "answer_stored"
        wait_for(lambda: status_of(store, queued) == "completed", "the approved run", 60)
    finally:
        stop_all([worker])
    assert ledger(ledger_path).count("refund:B-2:300") == 1
    assert store.list(queued)[-1].node_output["output"] == "Refunded B-2."
    assert (tmp_path / "worker.log").read_text().count("Traceback") == 0


def test_the_approvals_page_shows_a_tool_approval_and_approving_it_completes_the_run(
    chromium,
    store,
    db_url: str,
    stub: StubServer,
    ledger_path: Path,
    tmp_path: Path,
):
    from playwright.sync_api import expect, sync_playwright

    eid = paused_refund(store, stub)
    stub.script([text("Refunded.")])
    server = start_server(
        db_url,
        tmp_path / "serve.log",
        "--app",
        APP,
        TETHER_TEST_STUB_URL=stub.url,
        TETHER_TEST_LEDGER=str(ledger_path),
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = browser.new_context(base_url=server.url).new_page()
                page.goto("/login")
                page.fill("input[name=token]", TOKEN)
                page.click("button[type=submit]")
                page.wait_for_url(f"{server.url}/pending")
                card = page.locator(f"tr.pending[data-execution-id='{eid}']")
                expect(card).to_contain_text(APPROVAL_REASON)
                expect(card.locator("pre.context")).to_contain_text('"tool": "refund"')
                expect(card.locator("pre.context")).to_contain_text('"amount": 900')

                card.locator(f"a[href='/runs/{eid}']").click()
                page.wait_for_url(f"{server.url}/runs/{eid}")
                expect(page.locator("table.timeline")).to_contain_text("turn:1/tool:refund")
                page.click("#pending button.approve")
                page.wait_for_url(f"{server.url}/runs/{eid}?notice=resumed")
                expect(page.locator("h1 .status")).to_have_text("completed")
            finally:
                browser.close()
    finally:
        stop_server(server)
    assert status_of(store, eid) == "completed"
    assert ledger(ledger_path) == ["refund:A-1:900"]
    assert len(stub.requests) == 3


@pytest.fixture(autouse=True)
def _no_stale_app(monkeypatch: pytest.MonkeyPatch) -> None:
    # Children import the app afresh; this process's copy is used only in-process.
    monkeypatch.delenv("TETHER_DATABASE_URL", raising=False)
