"""``tether serve``'s refusals: no token, ``--no-auth`` off loopback; and a real start."""

from __future__ import annotations

import httpx
import pytest

from tests.cli.test_cli import tether_cli
from tests.web.conftest import TOKEN, bearer, paused_run, start_server, stop_server
from tether.web import is_loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "example.com", "::"])
def test_no_auth_is_refused_on_a_non_loopback_host(tmp_path, host):
    proc = tether_cli(f"sqlite:///{tmp_path / 'x.db'}", "serve", "--no-auth", "--host", host)
    assert proc.returncode == 4
    assert "--no-auth is refused" in proc.stderr


def test_serve_without_a_token_is_refused(tmp_path):
    proc = tether_cli(f"sqlite:///{tmp_path / 'x.db'}", "serve", TETHER_UI_TOKEN="")
    assert proc.returncode == 4
    assert "TETHER_UI_TOKEN" in proc.stderr


def test_loopback_hosts():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "host.local"))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_serve_no_auth_on_loopback_without_app_stores_the_answer(store, db_url, tmp_path, backend):
    eid = paused_run(store)
    server = start_server(db_url, tmp_path / "serve.log", "--no-auth", TETHER_UI_TOKEN="")
    try:
        body = httpx.post(f"{server.url}/api/runs/{eid}/approve", json={}, timeout=30).json()
        assert body["action"] == "answer_stored"
        assert store.get_run(eid).status == "paused"
        assert "(no auth)" in server.log.read_text()
    finally:
        stop_server(server)


def test_served_api_needs_the_token(store, server):
    assert httpx.get(f"{server.url}/api/runs", timeout=10).status_code == 401
    assert httpx.get(f"{server.url}/api/runs", headers=bearer(), timeout=10).status_code == 200
    assert httpx.get(f"{server.url}/api/runs", headers=bearer(TOKEN + "x")).status_code == 401
