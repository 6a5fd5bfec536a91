"""A named user's new token ends the sessions logged in with the old one: `tether users add
NAME --replace` is how a leaked token is rotated, and a session opened with the leaked token
must not outlive it. Through Starlette's TestClient, on both backends."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.support.chains import orders_chain
from tests.web.conftest import bearer, login, paused_run
from tether.registry import Registry
from tether.web import add_user, create_app, remove_user


def _client(store, users_file) -> TestClient:
    app = create_app(store, registry=Registry(orders_chain(store)), users=users_file)
    return TestClient(app, base_url="http://127.0.0.1")


def test_replacing_a_users_token_ends_the_sessions_of_the_old_one(store, tmp_path):
    users = tmp_path / "users.json"
    leaked = add_user(users, "alice")
    paused_run(store)
    with _client(store, users) as thief, _client(store, users) as owner:
        assert login(thief, leaked).status_code == 303
        assert thief.get("/pending").status_code == 200
        rotated = add_user(users, "alice", replace=True)
        assert thief.get("/pending", follow_redirects=False).status_code == 303
        assert thief.get("/api/runs", headers=bearer(leaked)).status_code == 401
        assert login(owner, rotated).status_code == 303
        assert owner.get("/pending").status_code == 200


def test_a_user_removed_and_added_again_does_not_revive_old_sessions(store, tmp_path):
    users = tmp_path / "users.json"
    old = add_user(users, "bob")
    with _client(store, users) as client:
        assert login(client, old).status_code == 303
        assert remove_user(users, "bob")
        add_user(users, "bob")
        assert client.get("/pending", follow_redirects=False).status_code == 303
