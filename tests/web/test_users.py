"""Named users of the approvals page (tether users, serve --users): each answers under their
own name in the audit trail, tokens are stored hashed, failed logins are throttled, and a
shared token must be long enough."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from starlette.testclient import TestClient

from tests.support.chains import orders_chain
from tests.support.proc import ROOT, child_env
from tests.web.conftest import TOKEN, bearer, login, paused_run
from tether.errors import ConfigurationError
from tether.registry import Registry
from tether.web import add_user, create_app, remove_user
from tether.web._users import Users


def _app(store, users_file, token=None):
    app = create_app(store, registry=Registry(orders_chain(store)), token=token, users=users_file)
    return TestClient(app, base_url="http://127.0.0.1")


def test_a_named_users_approvals_are_recorded_under_their_name_page_and_api(store, tmp_path):
    users = tmp_path / "users.json"
    alice, bob = add_user(users, "alice"), add_user(users, "bob")
    assert alice.startswith("alice.") and len(alice) > 30
    stored = users.read_text()
    assert alice.split(".", 1)[1] not in stored and "scrypt" in stored
    assert oct(users.stat().st_mode & 0o777) == "0o600"

    by_page, by_api, by_shared = paused_run(store), paused_run(store), paused_run(store)
    with _app(store, users, token=TOKEN) as client:
        assert login(client, alice).status_code == 303
        page = client.get(f"/runs/{by_page}")
        assert "alice" in page.text  # the page says who is logged in
        csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        done = client.post(f"/runs/{by_page}/approve", data={"csrf_token": csrf, "note": "ok"})
        assert done.status_code == 200
        assert (
            client.post(
                f"/api/runs/{by_api}/reject", json={"note": "no"}, headers=bearer(bob)
            ).status_code
            == 200
        )
        assert (
            client.post(
                f"/api/runs/{by_shared}/approve", json={}, headers=bearer(TOKEN)
            ).status_code
            == 200
        )
        trail = {
            eid: client.get(f"/api/runs/{eid}", headers=bearer(bob)).json()["audit"]
            for eid in (by_page, by_api, by_shared)
        }
    assert [(e["actor"], e["via"], e["action"]) for e in trail[by_page]] == [
        ("alice", "web", "approved")
    ]
    assert [(e["actor"], e["via"], e["action"]) for e in trail[by_api]] == [
        ("bob", "api", "rejected")
    ]
    assert [(e["actor"], e["via"]) for e in trail[by_shared]] == [(None, "api")]


def test_a_removed_users_token_and_session_stop_working_without_a_restart(store, tmp_path):
    users = tmp_path / "users.json"
    carol = add_user(users, "carol")
    with _app(store, users) as client:
        assert login(client, carol).status_code == 303
        assert client.get("/pending").status_code == 200
        assert client.get("/api/runs", headers=bearer(carol)).status_code == 200
        assert remove_user(users, "carol")
        assert client.get("/pending", follow_redirects=False).status_code == 303
        assert client.get("/api/runs", headers=bearer(carol)).status_code == 401
        dave = add_user(users, "dave")  # added while serving: no restart
        assert client.get("/api/runs", headers=bearer(dave)).status_code == 200
        # Another user's name with a valid secret is not a login.
        assert (
            client.get("/api/runs", headers=bearer("eve." + dave.split(".", 1)[1])).status_code
            == 401
        )


def test_failed_logins_are_throttled_per_address_even_for_the_right_token(store, tmp_path):
    with _app(store, None, token=TOKEN) as client:
        for _ in range(5):
            assert login(client, "wrong-token-but-long").status_code == 401
        throttled = login(client)
        assert throttled.status_code == 429 and "Too many failed logins" in throttled.text
        api = client.get("/api/runs", headers=bearer())
        assert api.status_code == 429 and int(api.headers["retry-after"]) >= 1


def test_a_short_shared_token_is_refused_naming_the_minimum(store):
    with pytest.raises(ConfigurationError, match="at least 16"):
        create_app(store, token="short-token")


def test_tether_users_add_list_remove_through_the_cli(tmp_path):
    users = tmp_path / "team.json"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether.cli", "users", *args, "--file", str(users)],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )

    added = cli("add", "alice", "--json")
    assert added.returncode == 0, added.stderr
    token = json.loads(added.stdout)["token"]
    assert token.startswith("alice.") and token not in users.read_text()
    again = cli("add", "alice")
    assert again.returncode == 4 and "--replace" in again.stderr
    bad = cli("add", "Alice Smith")
    assert bad.returncode == 4 and "a-z" in bad.stderr
    listed = cli("list", "--json")
    assert [u["name"] for u in json.loads(listed.stdout)] == ["alice"]
    assert cli("remove", "alice").returncode == 0
    assert cli("remove", "alice").returncode == 3


def test_the_audit_page_and_api_list_every_runs_decisions_newest_first(store, tmp_path):
    users = tmp_path / "users.json"
    alice = add_user(users, "alice")
    first, second = paused_run(store), paused_run(store)
    with _app(store, users, token=TOKEN) as client:
        client.post(f"/api/runs/{first}/approve", json={"note": "a"}, headers=bearer(alice))
        client.post(f"/api/runs/{second}/reject", json={"note": "b"}, headers=bearer())
        listed = client.get("/api/audit?since=1h", headers=bearer()).json()
        assert [(e["execution_id"], e["actor"], e["action"]) for e in listed] == [
            (second, None, "rejected"),
            (first, "alice", "approved"),
        ]
        assert client.get("/api/audit?since=2999-01-01", headers=bearer()).json() == []
        bad = client.get("/api/audit?since=soon", headers=bearer())
        assert bad.status_code == 400 and "neither an age" in bad.json()["error"]
        assert client.get("/api/audit").status_code == 401
        assert login(client, alice).status_code == 303
        page = client.get("/audit").text
    assert '<td class="actor">alice</td>' in page and "not named" in page
    assert page.index(second) < page.index(first)


def test_users_list_shows_a_damaged_entry_and_the_others(tmp_path):
    # An entry that is not an object (a hand edit) made `tether users list` exit 1 with
    # AttributeError; the server already admits nobody with it.
    users = tmp_path / "team.json"
    add_user(users, "alice")
    data = json.loads(users.read_text())
    data["users"]["bob"] = 5
    users.write_text(json.dumps(data))
    listed = subprocess.run(
        [sys.executable, "-m", "tether.cli", "users", "list", "--json", "--file", str(users)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert listed.returncode == 0, listed.stderr
    found = {u["name"]: u for u in json.loads(listed.stdout)}
    assert found["alice"]["created_at"] and found["alice"]["damaged"] is False
    assert found["bob"] == {"name": "bob", "created_at": None, "damaged": True}
    assert Users(users).verify("bob.anything") is None
