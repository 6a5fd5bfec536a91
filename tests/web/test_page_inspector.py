"""The run inspector and the audit trail in real headless Chromium, against ``tether serve
--users``: a named user approves a refund and finds their name in the run's audit trail, opens
a checkpoint to see its values and diff, and reads an agent's conversation before answering it.

Screenshots go to ``tests/artifacts/``; with ``TETHER_UPDATE_SCREENSHOTS=1`` to
``docs/screenshots/``, which docs/web.md shows.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.chains import orders_chain
from tests.support.proc import ROOT
from tests.web.conftest import paused_run, start_server, stop_server
from tests.web.inspector_app import support_agent
from tests.web.test_page import ARTIFACTS, CHROMIUM_ARGS, chromium  # noqa: F401 - fixture
from tether.web import add_user

SHOTS = ROOT / "docs" / "screenshots" if os.environ.get("TETHER_UPDATE_SCREENSHOTS") else ARTIFACTS


def _shoot(page, name: str, selector: str | None = None) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    target = page.locator(selector) if selector else page
    if selector:
        target.screenshot(path=str(SHOTS / name))
    else:
        page.screenshot(path=str(SHOTS / name), full_page=True)


def test_a_named_user_approves_inspects_a_checkpoint_and_reads_an_agents_conversation(
    chromium,  # noqa: F811 - the fixture
    store,
    db_url,
    backend,
    tmp_path: Path,
):
    from playwright.sync_api import expect, sync_playwright

    users = tmp_path / "users.json"
    alice = add_user(users, "alice")
    refund = paused_run(store, amount=640, order_id="R-2291")
    agent = support_agent(store)
    asked = agent.run("Order A-17 arrived broken, I want my money back.")
    assert asked.status == "paused"
    store.setup()
    server = start_server(
        db_url,
        tmp_path / "serve.log",
        "--app",
        "tests.web.inspector_app:app",
        "--users",
        str(users),
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(
                    base_url=server.url, viewport={"width": 1280, "height": 900}
                )
                page = context.new_page()
                page.goto(f"/login?next=/runs/{refund}")
                page.fill("input[name=token]", alice)
                page.click("button[type=submit]")
                page.wait_for_url(f"{server.url}/runs/{refund}")
                expect(page.locator("header .whoami")).to_have_text("alice")

                # alice approves; the audit trail names her, the surface, note and data.
                page.fill("#pending input[name=note]", "customer since 2019, within policy")
                page.fill("#pending textarea[name=data]", '{"refund_cap": 640}')
                page.click("#pending button.approve")
                page.wait_for_url(f"{server.url}/runs/{refund}?notice=resumed")
                row = page.locator("table.audit tbody tr")
                expect(row).to_have_count(1)
                expect(row.locator("td.actor")).to_have_text("alice")
                expect(row.locator("td.action")).to_have_text("approved")
                expect(row).to_contain_text("web")
                expect(row).to_contain_text("manager_approval")
                expect(row.locator("td.note")).to_have_text("customer since 2019, within policy")
                expect(page.locator("#result pre.output")).to_contain_text('"notified": true')
                _shoot(page, "web_audit_trail.png")
                [entry] = store.list_audit(refund)
                assert (entry.actor, entry.via, entry.data) == ("alice", "web", {"refund_cap": 640})

                # The chain inspector: the charge step's values and what it changed.
                page.locator("table.timeline a", has_text="charge").click()
                expect(page.locator("#inspect h2")).to_contain_text("Checkpoint 2: charge")
                expect(page.locator("#inspect tr.change-added")).to_contain_text("receipt")
                expect(page.locator("#inspect tr.change-changed")).to_contain_text("log")
                expect(page.locator("#inspect button.fork")).to_be_visible()
                _shoot(page, "web_inspector_chain.png")

                # The agent inspector: why the agent asks, before answering it.
                page.goto(f"/runs/{asked.execution_id}")
                messages = page.locator("ol.conversation li")
                expect(messages).to_have_count(5)
                expect(messages.nth(2)).to_contain_text("calls lookup")
                expect(messages.nth(3)).to_contain_text("result of lookup")
                expect(messages.nth(3)).to_contain_text('"status": "delivered"')
                expect(messages.nth(4)).to_contain_text("calls refund")
                expect(page.locator("#pending")).to_contain_text("refund_approval")
                _shoot(page, "web_inspector_agent.png")
                page.fill("#pending input[name=note]", "ok")
                page.click("#pending button.approve")
                page.wait_for_url(f"{server.url}/runs/{asked.execution_id}?notice=resumed")
                expect(page.locator("#result pre.output")).to_contain_text("on its way")
                expect(page.locator("table.audit td.actor")).to_have_text("alice")

                # Every run's decisions on one page, newest first.
                page.click("header nav a[href='/audit']")
                rows = page.locator("table.audit tbody tr")
                expect(rows).to_have_count(2)
                expect(rows.first).to_contain_text(asked.execution_id)
                expect(rows.nth(1)).to_contain_text(refund)
                expect(rows.nth(1).locator("td.actor")).to_have_text("alice")
                _shoot(page, "web_audit_page.png")
            finally:
                browser.close()
    finally:
        stop_server(server)
    assert orders_chain(store) is not None
