"""The inbox and the page's edges in real headless Chromium against a real ``tether serve``:
a 500-approval inbox paged, sorted and filtered; a damaged row among good ones; an id built
to reach another run; a DNS-rebinding page under ``--no-auth``.

Screenshots go to ``tests/artifacts/``; with ``TETHER_UPDATE_SCREENSHOTS=1`` to
``docs/screenshots/``, which docs/web.md shows.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.chains import orders_chain
from tests.support.damage import damage, paused
from tests.web.conftest import APP, TOKEN, start_server, stop_server
from tests.web.test_page import ARTIFACTS, CHROMIUM_ARGS, chromium  # noqa: F401 - fixture
from tether.web._paths import run_url

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "screenshots" if os.environ.get("TETHER_UPDATE_SCREENSHOTS") else ARTIFACTS


def _login(page, server_url: str, target: str = "/pending") -> None:
    page.goto(f"/login?next={target}")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server_url}{target}")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_500_approval_inbox_pages_sorts_filters_and_answers_in_place(
    chromium,  # noqa: F811 - the fixture
    store,
    server,
    backend,
):
    from playwright.sync_api import expect, sync_playwright

    chain = orders_chain(store)
    for i in range(500):
        order = f"R-{i:03d}"
        result = chain.run({"order_id": order, "amount": 150 + i}, execution_id=f"refund-{i:03d}")
        assert result.status == "paused"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(base_url=server.url, viewport={"width": 1280, "height": 900})
            _login(page, server.url)
            expect(page.locator("#pending-count")).to_have_text("500")
            rows = page.locator("table.inbox tbody tr")
            expect(rows).to_have_count(100)
            expect(page.locator("nav.pages .shown").first).to_have_text(
                "1\u2013100 of 500 pending approvals"
            )
            expect(rows.first).to_have_attribute("data-execution-id", "refund-000")
            page.screenshot(path=str(SHOTS / "web_inbox.png"))

            # Keyset pages to the end: every approval once, in order.
            seen = []
            for _ in range(5):
                seen += [
                    rows.nth(i).get_attribute("data-execution-id") for i in range(rows.count())
                ]
                following = page.locator("nav.pages a.next-page").first
                if following.count() == 0:
                    break
                following.click()
                page.wait_for_load_state()
            assert seen == [f"refund-{i:03d}" for i in range(500)]
            expect(page.locator("nav.pages .shown").first).to_have_text(
                "401\u2013500 of 500 pending approvals"
            )

            # Oldest first is the default order: its heading, clicked, turns it around.
            page.goto("/pending")
            page.click("th.sortable >> text=waiting since")
            expect(rows.first).to_have_attribute("data-execution-id", "refund-499")
            page.fill("input[name=q]", "refund-04")
            page.click("form.filters button[type=submit]")
            expect(rows).to_have_count(10)
            expect(page.locator("nav.pages .shown").first).to_contain_text(
                "of 10 pending approvals matching (of 500)"
            )

            # The full context and the form are one click away, on the row itself.
            row = page.locator("tr.pending[data-execution-id='refund-042']")
            row.locator("summary").click()
            expect(row.locator("pre.context")).to_contain_text('"amount": 192')
            page.screenshot(path=str(SHOTS / "web_inbox_open.png"))
            row.locator("input[name=note]").fill("checked the order")
            row.locator("button.approve").click()
            page.wait_for_url(f"{server.url}/runs/refund-042?notice=resumed")
            expect(page.locator("h1 .status").first).to_have_text("completed")
            page.goto("/pending")
            expect(page.locator("#pending-count")).to_have_text("499")
        finally:
            browser.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_damaged_row_among_good_ones_is_marked_and_the_rest_is_answerable(
    chromium,  # noqa: F811 - the fixture
    store,
    server,
    backend,
):
    from playwright.sync_api import expect, sync_playwright

    d = damage(store)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(base_url=server.url, viewport={"width": 1280, "height": 700})
            _login(page, server.url)
            expect(page.locator("table.inbox tbody tr")).to_have_count(len(d.good + d.damaged))
            bad = page.locator(f"tr.pending[data-execution-id='{d.bad_context}']")
            expect(bad).to_have_class("pending damaged")
            expect(bad.locator(".damaged-note")).to_contain_text("context unreadable")
            page.screenshot(path=str(SHOTS / "web_inbox_damaged_row.png"))
            good = page.locator(f"tr.pending[data-execution-id='{d.good[0]}']")
            good.locator("summary").click()
            good.locator("button.approve").click()
            page.wait_for_url(f"{server.url}/runs/{d.good[0]}?notice=resumed")
            page.goto("/runs")
            expect(page.locator("tr.damaged")).to_have_count(len(d.damaged) - 1)
            expect(page.locator("tr.damaged").first).to_contain_text("damaged row:")
        finally:
            browser.close()
    assert store.get_run(d.good[0]).status == "completed"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_approve_on_a_dot_dot_ids_row_answers_that_run_never_another(
    chromium,  # noqa: F811 - the fixture
    store,
    server,
    backend,
):
    from playwright.sync_api import expect, sync_playwright

    victim = paused(store, "victim-1")
    bait = f"x/../../runs/{victim}"
    for eid in (bait, ".."):
        paused(store, eid)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(base_url=server.url)
            _login(page, server.url)
            for eid in (bait, ".."):
                row = page.locator("tr.pending").filter(
                    has=page.locator(f"a[href='{run_url(eid)}']")
                )
                expect(row).to_have_count(1)
                row.locator("summary").click()
                row.locator("button.approve").click()
                page.wait_for_load_state()
                expect(page.locator("p.notice")).to_contain_text("resumed")
                expect(page.locator("h1")).to_contain_text(eid)
                page.goto("/pending")
        finally:
            browser.close()
    assert store.get_run(bait).status == "completed"
    assert store.get_run("..").status == "completed"
    assert store.get_run(victim).status == "paused"
    assert store.get_pending_interrupt(victim).resume_value is None


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_dns_rebinding_page_cannot_read_or_approve_under_no_auth(
    chromium,  # noqa: F811 - the fixture
    store,
    db_url,
    backend,
    tmp_path,
):
    from playwright.sync_api import sync_playwright

    eid = paused(store, "rebind-target")
    served = start_server(db_url, tmp_path / "serve.log", "--no-auth", "--app", APP)
    port = served.url.rsplit(":", 1)[1]
    try:
        with sync_playwright() as p:
            # attacker.test resolves to 127.0.0.1, as a rebinding DNS server would make it.
            args = [*CHROMIUM_ARGS, "--host-resolver-rules=MAP attacker.test 127.0.0.1"]
            browser = p.chromium.launch(executable_path=chromium, args=args)
            try:
                page = browser.new_page()
                evil = f"http://attacker.test:{port}"
                response = page.goto(f"{evil}/pending")
                assert response is not None and response.status == 403
                assert "refused" in page.content() and "attacker.test" in page.content()
                api = page.goto(f"{evil}/api/runs")
                assert api is not None and api.status == 403
                # A form on the attacker's page posting to the rebound name.
                page.set_content(
                    f'<form method="post" action="{evil}/runs/{eid}/approve">'
                    '<input name="note" value="x"><button>go</button></form>'
                )
                with page.expect_navigation() as sent:
                    page.click("button")
                assert sent.value is not None and sent.value.status == 403
                # The same server, reached by its own name, serves the operator.
                ok = page.goto(f"http://localhost:{port}/pending")
                assert ok is not None and ok.status == 200
                assert eid in page.content()
            finally:
                browser.close()
    finally:
        stop_server(served)
    assert store.get_pending_interrupt(eid).resume_value is None


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_refused_cross_site_post_leaves_the_operator_logged_in(
    chromium,  # noqa: F811 - the fixture
    store,
    server,
    backend,
):
    from playwright.sync_api import expect, sync_playwright

    eid = paused(store, "cross-site-target")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(base_url=server.url)
            _login(page, server.url)
            # Another site's page posts a form at the operator's server.
            page.set_content(
                f'<form method="post" action="{server.url}{run_url(eid, "approve")}">'
                '<input name="note" value="sneaky"><button>win a prize</button></form>'
            )
            with page.expect_navigation() as sent:
                page.click("button")
            assert sent.value is not None and sent.value.status == 403
            assert "set-cookie" not in sent.value.headers
            page.goto("/pending")
            assert page.url == f"{server.url}/pending"  # not sent to the login form
            expect(page.locator(f"tr.pending[data-execution-id='{eid}']")).to_have_count(1)
        finally:
            browser.close()
    assert store.get_pending_interrupt(eid).resume_value is None
