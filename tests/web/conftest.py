"""Fixtures for the web tests: a test client over ``create_app``, and a real ``tether serve``
subprocess on a free loopback port."""

from __future__ import annotations

import datetime
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from starlette.testclient import TestClient

from tests.support.chains import orders_chain
from tests.support.proc import ROOT, child_env
from tests.support.stale_child import start_stuck
from tether import Checkpointer
from tether.registry import Registry
from tether.web import create_app

if TYPE_CHECKING:
    import httpx2  # starlette's TestClient answers with httpx2 responses when it is installed

TOKEN = "test-token-3f2a-9c1d"
APP = "tests.web.app:app"
CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


def paused_run(store: Checkpointer, amount: int = 500, order_id: str = "A-1") -> str:
    result = orders_chain(store).run({"order_id": order_id, "amount": amount})
    assert result.status == "paused"
    return result.execution_id


def completed_run(store: Checkpointer, amount: int = 50) -> str:
    result = orders_chain(store).run({"order_id": "B-2", "amount": amount})
    assert result.status == "completed"
    return result.execution_id


def stale_run_and_orphan_fork(
    store: Checkpointer, db_url: str, tmp_path: Path
) -> tuple[str, str, str]:
    """A run whose process was SIGKILLed mid-node, and a paused fork whose parent was pruned:
    ``(stale_eid, fork_eid, pruned_parent_eid)``."""
    proc = start_stuck(db_url, "stuck-web", 30, tmp_path)
    proc.kill()
    proc.wait()
    parent = completed_run(store)
    validate = store.list(parent)[0].checkpoint_id
    branch = orders_chain(store).fork(parent, validate, state_updates={"amount": 900})
    assert branch.status == "paused"
    assert store.prune(datetime.datetime.now(datetime.UTC)).execution_ids == [parent]
    return "stuck-web", branch.execution_id, parent


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def client(store: Checkpointer) -> Iterator[TestClient]:
    """A client for the app over ``store`` with the orders chain registered."""
    app = create_app(store, registry=Registry(orders_chain(store)), token=TOKEN)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


def login(client: TestClient, token: str = TOKEN) -> httpx2.Response:
    page = client.get("/login")
    return client.post(
        "/login",
        data={"csrf_token": csrf_of(page.text), "token": token, "next": "/pending"},
        follow_redirects=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path


def start_server(db_url: str, log: Path, *args: str, **env: str) -> Server:
    """``tether serve`` in a subprocess; returns once it answers HTTP."""
    port = free_port()
    argv = [sys.executable, "-m", "tether.cli", "serve", "--db", db_url, "--port", str(port)]
    argv += list(args) or ["--app", APP]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            env=child_env(**{"TETHER_UI_TOKEN": TOKEN, **env}),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"tether serve exited {proc.returncode}: {log.read_text()}")
        try:
            httpx.get(f"{url}/login", timeout=1)
            return Server(url, proc, log)
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"tether serve did not answer within 30 s: {log.read_text()}")


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture
def server(db_url: str, store: Checkpointer, tmp_path: Path) -> Iterator[Server]:
    """A real ``tether serve --app tests.web.app:app`` over the test store."""
    store.setup()  # the server refuses a SQLite file that does not exist yet
    running = start_server(db_url, tmp_path / "serve.log")
    try:
        yield running
    finally:
        stop_server(running)


def chromium_path() -> str | None:
    path = os.environ.get("TETHER_TEST_CHROMIUM", "/usr/bin/chromium")
    return path if os.path.exists(path) else None
