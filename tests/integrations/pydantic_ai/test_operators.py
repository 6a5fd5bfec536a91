"""What operators do with durable pydantic-ai runs, through tether's own tools: ``tether pending
list`` and ``tether approve``/``reject``, the approvals page in Chromium, a ``tether worker``
taking over a run whose process died, ``tether fork``, prune and OpenTelemetry spans."""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
import tether.otel
from tests.integrations.pydantic_ai.agents import durable
from tests.integrations.pydantic_ai.conftest import Logs, call, tool_messages
from tests.integrations.pydantic_ai.test_crash import kill, start_child
from tests.llm.stub_server import StubServer
from tests.support.proc import ROOT, child_env
from tests.support.waiting import wait_for

APP = "tests.integrations.pydantic_ai.app:app"


def tether_cli(db_url: str, stub: StubServer, logs: Logs, *args: str) -> Any:
    """``tether <args> --db <db_url> --json`` in a subprocess; returns the parsed output."""
    proc = subprocess.run(
        [sys.executable, "-m", "tether.cli", *args, "--db", db_url, "--json"],
        env=child_env(STUB_URL=stub.url, **logs.env()),
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def refund_calls(order: str, amount: int) -> dict[str, Any]:
    """A stub answer asking to look an order up and refund it (the refund needs approval)."""
    return {
        "tool_calls": [
            call("lookup", order_id=order),
            call("refund", order_id=order, amount=amount),
        ]
    }


def refund_script(stub: StubServer, order: str, amount: int, answer: str) -> None:
    stub.script([refund_calls(order, amount), {"text": answer}])


def test_cli_lists_the_approval_with_tool_and_arguments_and_approve_or_reject_resumes_it(
    store, db_url: str, stub: StubServer, logs: Logs
) -> None:
    agent = durable(stub.url, store)
    stub.script(
        [
            refund_calls("A-1", 40),
            refund_calls("B-2", 900),
            {"text": "Refunded A-1."},
            {"text": "Not refunded."},
        ]
    )
    assert agent.run("Refund A-1", execution_id="c1").status == "paused"
    assert agent.run("Refund B-2", execution_id="c2").status == "paused"

    listed = {p["execution_id"]: p for p in tether_cli(db_url, stub, logs, "pending", "list")}
    assert listed["c1"]["runner_name"] == "support"
    assert listed["c1"]["reason"] == "tool_approval"
    assert listed["c1"]["node_id"] == "turn:0/tool:refund"
    assert listed["c1"]["context"]["tool_name"] == "refund"
    assert listed["c1"]["context"]["args"] == {"order_id": "A-1", "amount": 40}
    assert listed["c2"]["context"]["args"] == {"order_id": "B-2", "amount": 900}

    approved = tether_cli(db_url, stub, logs, "approve", "c1", "--app", APP)
    assert approved["status"] == "completed" and approved["output"] == "Refunded A-1."
    rejected = tether_cli(db_url, stub, logs, "reject", "c2", "--note", "too much", "--app", APP)
    assert rejected["status"] == "completed" and rejected["output"] == "Not refunded."
    assert tether_cli(db_url, stub, logs, "pending", "list") == []
    # Four model requests in all, each once; only the approved refund ran and charged.
    assert len(stub.requests) == 4
    assert [r["order_id"] for r in logs.ran("refund")] == ["A-1"]
    assert logs.charges() == [{"order_id": "A-1", "amount": -40}]
    assert [m["content"] for m in tool_messages(stub.requests[3])][-1] == "too much"


def test_a_worker_takes_over_a_run_whose_process_died_in_a_tool_and_finishes_it_once(
    store, db_url: str, stub: StubServer, logs: Logs, tmp_path: Path
) -> None:
    from tests.workers.procs import stop_all

    stub.script(
        [
            {"tool_calls": [call("lookup", order_id="W-1")]},
            {"tool_calls": [call("pack", order_id="W-1")]},
            {"text": "Packed W-1."},
        ]
    )
    gate = tmp_path / "gate"
    proc = start_child(
        db_url, stub, logs, "run", "w1", "Pack W-1", PACK_GATE=str(gate), LEASE_SECONDS="1"
    )
    # Killed once the charge is cached: a kill between the charge and its cache commit is the
    # documented at-least-once window of @idempotent, not what this test is about.
    wait_for(lambda: store.list_idempotent("w1"), "the pack tool's charge to be cached", 60)
    kill(proc)
    gate.touch()
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "tether.cli", "worker", "--app", APP, "--db", db_url),
                *("--lease-seconds", "1", "--poll-interval", "0.05"),
            ],
            env=child_env(STUB_URL=stub.url, PACK_GATE=str(gate), **logs.env()),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        # Finished, and given back by the worker (which releases its leases after the drive).
        wait_for(
            lambda: (
                (r := store.get_run("w1")) is not None
                and r.status == "completed"
                and r.owner is None
            ),
            "the worker to finish the run and give it back",
            90,
        )
        # A run queued for the same worker starts from its prompt.
        stub.script([{"text": "Hello from the queue."}])
        tether.enqueue(store, "support", "Hi", execution_id="q1")
        wait_for(
            lambda: (r := store.get_run("q1")) is not None and r.status == "completed",
            "the worker to run the queued run",
            90,
        )
    finally:
        stop_all([worker])
    assert store.list("q1")[-1].node_output["output"] == "Hello from the queue."
    assert len(stub.requests) == 4
    assert len(logs.ran("lookup")) == 1 and len(logs.ran("pack")) == 2
    assert logs.charges() == [{"order_id": "W-1", "amount": 100}]
    assert store.list("w1")[-1].node_output["output"] == "Packed W-1."


def test_cli_fork_branches_a_finished_run_from_a_checkpoint_and_leaves_it_as_it_was(
    store, db_url: str, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {"tool_calls": [call("lookup", order_id="F-1")]},
            {"tool_calls": [call("pack", order_id="F-1")]},
            {"text": "Packed F-1."},
        ]
    )
    agent = durable(stub.url, store)
    assert agent.run("Pack F-1", execution_id="f1").status == "completed"
    before = [(cp.checkpoint_id, cp.node_id) for cp in store.list("f1")]
    lookup = next(cp for cp in store.list("f1") if cp.node_id == "turn:0/tool:lookup")
    stub.script([{"text": "Branch: not packed."}])
    forked = tether_cli(
        db_url, stub, logs, "fork", "f1", "--checkpoint", lookup.checkpoint_id, "--app", APP
    )
    assert forked["status"] == "completed" and forked["output"] == "Branch: not packed."
    assert forked["parent_execution_id"] == "f1"
    branch = store.get_run(forked["execution_id"])
    assert branch is not None and branch.parent_checkpoint_id == lookup.checkpoint_id
    assert [(cp.checkpoint_id, cp.node_id) for cp in store.list("f1")] == before
    assert len(stub.requests) == 4 and len(logs.ran("pack")) == 1


def test_prune_deletes_finished_pydantic_ai_runs_and_keeps_a_paused_one(
    store, stub: StubServer, logs: Logs
) -> None:
    agent = durable(stub.url, store)
    stub.script([{"text": "Hello."}])
    assert agent.run("Hi", execution_id="done").status == "completed"
    refund_script(stub, "P-1", 5, "unused")
    assert agent.run("Refund P-1", execution_id="waiting").status == "paused"
    pruned = store.prune(_dt.datetime.now(_dt.UTC) + _dt.timedelta(minutes=1))
    assert pruned.execution_ids == ["done"]
    assert store.get_run("done") is None and store.list("done") == []
    assert store.get_pending_interrupt("waiting") is not None


def test_otel_spans_cover_the_drive_and_each_live_model_request_and_tool_call(
    store, stub: StubServer, logs: Logs
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tether.otel.instrument(provider)
    try:
        refund_script(stub, "O-1", 5, "Refunded.")
        agent = durable(stub.url, store)
        assert agent.run("Refund O-1", execution_id="o1").status == "paused"
        first = [s.name for s in exporter.get_finished_spans()]
        assert first.count("tether.llm support") == 1
        assert first.count("tether.tool lookup") == 1
        assert first.count("tether.run support") == 1
        exporter.clear()
        assert agent.resume("o1", tether.Resume(approved=True)).status == "completed"
        # The resume replays turn 0 without spans of its own: only what it ran is traced.
        again = [s.name for s in exporter.get_finished_spans()]
        assert again.count("tether.llm support") == 1
        assert again.count("tether.tool refund") == 1
        assert "tether.tool lookup" not in again
        llm = next(s for s in exporter.get_finished_spans() if s.name == "tether.llm support")
        assert dict(llm.attributes or {})["tether.node_id"] == "turn:1"
    finally:
        tether.otel.uninstrument()
        provider.shutdown()
    traced = [tether._trace.trace_id_of(cp) for cp in store.list("o1")]
    assert all(traced), traced


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_approvals_page_shows_the_tool_and_its_arguments_and_approving_completes_the_run(
    store, db_url: str, stub: StubServer, logs: Logs, tmp_path: Path, backend: str
) -> None:
    from playwright.sync_api import expect, sync_playwright

    from tests.web.conftest import TOKEN, start_server, stop_server
    from tests.web.test_page import CHROMIUM_ARGS

    chromium = _chromium()
    refund_script(stub, "Q-1", 70, "Refunded Q-1.")
    agent = durable(stub.url, store)
    assert agent.run("Refund Q-1", execution_id="q1").status == "paused"
    server = start_server(
        db_url, tmp_path / "serve.log", "--app", APP, STUB_URL=stub.url, **logs.env()
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
                card = page.locator("tr.pending[data-execution-id='q1']")
                expect(card).to_contain_text("tool_approval")
                expect(card.locator("pre.context")).to_contain_text('"tool_name": "refund"')
                expect(card.locator("pre.context")).to_contain_text('"amount": 70')
                card.locator("a[href='/runs/q1']").click()
                page.wait_for_url(f"{server.url}/runs/q1")
                page.fill("#pending input[name=note]", "fine")
                page.click("#pending button.approve")
                page.wait_for_url(f"{server.url}/runs/q1?notice=resumed")
                expect(page.locator("h1 .status")).to_have_text("completed")
            finally:
                browser.close()
    finally:
        stop_server(server)
    run = store.get_run("q1")
    assert run is not None and run.status == "completed"
    assert logs.charges() == [{"order_id": "Q-1", "amount": -70}]
    assert len(stub.requests) == 2


def _chromium() -> str:
    from tests.conftest import IN_CI
    from tests.web.conftest import chromium_path

    path = chromium_path()
    if path is None:
        reason = (
            "Debian's chromium is not installed at /usr/bin/chromium (apt-get install chromium)"
        )
        if IN_CI:
            pytest.fail(f"CI requires Chromium: {reason}")
        pytest.skip(reason)
    return path
