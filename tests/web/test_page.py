"""The approvals page in real headless Chromium, against a real ``tether serve`` subprocess.

Needs Debian's ``chromium`` (``/usr/bin/chromium``; ``make test`` installs it) driven by
Playwright for Python; Playwright's own browser download is never used. Without the binary the
test skips with the reason, except in CI (``CI=true``) where it fails.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import IN_CI
from tests.web.conftest import (
    TOKEN,
    bearer,
    chromium_path,
    paused_run,
    stale_run_and_orphan_fork,
)

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def chromium() -> str:
    path = chromium_path()
    if path is None:
        reason = (
            "Debian's chromium is not installed at /usr/bin/chromium (apt-get install chromium)"
        )
        if IN_CI:
            pytest.fail(f"CI requires Chromium: {reason}")
        pytest.skip(reason)
    return path


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_operator_logs_in_approves_a_paused_run_and_sees_it_complete(
    chromium, store, server, backend
):
    from playwright.sync_api import expect, sync_playwright

    eid = paused_run(store, amount=750, order_id="R-<7>")
    other = paused_run(store, amount=300, order_id="R-8")
    ARTIFACTS.mkdir(exist_ok=True)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(
                base_url=server.url, viewport={"width": 1280, "height": 900}
            )
            page = context.new_page()

            # Not logged in: the page sends the operator to the login form.
            page.goto("/pending")
            assert page.url.startswith(f"{server.url}/login")
            page.fill("input[name=token]", TOKEN)
            page.click("button[type=submit]")
            page.wait_for_url(f"{server.url}/pending")

            card = page.locator(f"tr.pending[data-execution-id='{eid}']")
            expect(card).to_be_visible()
            expect(card.locator("pre.context")).to_contain_text('"amount": 750')
            expect(card).to_contain_text("manager_approval")
            expect(page.locator("tr.pending")).to_have_count(2)
            page.screenshot(path=str(ARTIFACTS / "web_pending.png"), full_page=True)

            # Open the run: its timeline and the pending interrupt.
            card.locator(f"a[href='/runs/{eid}']").click()
            page.wait_for_url(f"{server.url}/runs/{eid}")
            expect(page.locator("table.timeline tbody tr")).to_have_count(3)
            expect(page.locator("table.timeline")).to_contain_text("+receipt")
            expect(page.locator("h1")).to_contain_text("paused")

            page.fill("#pending input[name=note]", "within budget")
            page.click("#pending button.approve")
            page.wait_for_url(f"{server.url}/runs/{eid}?notice=resumed")
            expect(page.locator("h1 .status")).to_have_text("completed")
            expect(page.locator("p.notice")).to_contain_text("resumed")
            expect(page.locator("table.timeline tbody tr")).to_have_count(6)
            expect(page.locator("#pending")).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "web_run_completed.png"), full_page=True)

            run = store.get_run(eid)
            assert run is not None and run.status == "completed"
            last = store.list(eid)[-2]
            assert last.node_id == "notify"

            # A second approval of the same interrupt: 409, nothing changes.
            csrf = page.locator("form.logout input[name=csrf_token]").get_attribute("value")
            rows = len(store.list(eid))
            again = page.request.post(
                f"/runs/{eid}/approve", form={"csrf_token": csrf or "", "note": "again"}
            )
            assert again.status == 409
            api_again = httpx.post(
                f"{server.url}/api/runs/{eid}/approve", json={}, headers=bearer(), timeout=30
            )
            assert api_again.status_code == 409
            assert len(store.list(eid)) == rows

            # A post without the CSRF token is refused, and the other run stays unanswered.
            no_csrf = page.request.post(f"/runs/{other}/approve", form={"note": "sneaky"})
            assert no_csrf.status == 403
            pending = store.get_pending_interrupt(other)
            assert pending is not None and pending.resume_value is None

            # Without the token: the API answers 401 and the pages send you to log in.
            stranger = browser.new_context(base_url=server.url)
            assert stranger.request.get("/api/runs").status == 401
            assert stranger.request.post(f"/api/runs/{other}/approve", data={}).status == 401
            lost = stranger.new_page()
            lost.goto(f"/runs/{other}")
            assert lost.url.startswith(f"{server.url}/login")
            stranger.close()
        finally:
            browser.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_operator_sees_a_stale_run_and_a_fork_whose_parent_was_pruned(
    chromium, store, db_url, server, backend, tmp_path
):
    from playwright.sync_api import expect, sync_playwright

    stale, fork, parent = stale_run_and_orphan_fork(store, db_url, tmp_path)
    ARTIFACTS.mkdir(exist_ok=True)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(
                base_url=server.url, viewport={"width": 1280, "height": 900}
            )
            page = context.new_page()
            page.goto("/login?next=/runs")
            page.fill("input[name=token]", TOKEN)
            page.click("button[type=submit]")
            page.wait_for_url(f"{server.url}/runs")

            stale_row = page.locator("table.runs tr", has_text=stale)
            expect(stale_row.locator(".status")).to_have_text("stale")
            expect(stale_row.locator("td.note")).to_contain_text("stale (its process is gone")
            fork_row = page.locator("table.runs tr", has_text=fork)
            expect(fork_row.locator("td.note")).to_contain_text(f"fork of {parent} (parent pruned)")
            expect(fork_row.locator(f"a[href='/runs/{parent}']")).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "web_runs_stale.png"), full_page=True)

            stale_row.locator(f"a[href='/runs/{stale}']").click()
            page.wait_for_url(f"{server.url}/runs/{stale}")
            expect(page.locator("h1 .status-stale")).to_have_text("stale")
            expect(page.locator("dl.facts")).to_contain_text("nothing executes it")
            expect(page.locator("table.timeline td.label").first).to_have_text("node completed")
            page.screenshot(path=str(ARTIFACTS / "web_run_stale.png"), full_page=True)

            page.goto(f"/runs/{fork}")
            expect(page.locator("dl.facts")).to_contain_text(f"{parent} (parent pruned)")
            labels = page.locator("table.timeline td.label")
            expect(labels.first).to_have_text("branch start")
            expect(labels.last).to_contain_text("paused for a human")
        finally:
            browser.close()
