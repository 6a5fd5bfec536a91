"""The ``tether`` command at its edges, in subprocesses on both backends: options before the
command, the ``queued`` status, either spelling of a runner, enqueueing an unknown runner."""

from __future__ import annotations

from tests.cli.test_cli import APP, as_json, paused_run, tether_cli
from tether.worker import enqueue


def test_global_options_before_the_command_act_as_the_commands_own(store, db_url):
    eid = paused_run(store)
    before = tether_cli(None, "--db", db_url, "--json", "runs", "list", TETHER_DATABASE_URL="")
    assert [r["execution_id"] for r in as_json(before)] == [eid]
    # The command's own --db still wins over the one before it.
    wins = tether_cli(None, "--db", "sqlite:///nowhere.db", "runs", "list", "--db", db_url)
    assert wins.returncode == 0, wins.stderr
    assert eid in wins.stdout


def test_queued_is_a_status_filter_and_a_runner_filters_by_either_spelling(store, db_url):
    paused = paused_run(store)
    queued = enqueue(store, "orders", {"order_id": "Q-1", "amount": 5})
    only = as_json(tether_cli(db_url, "runs", "list", "--status", "queued", "--json"))
    assert [r["execution_id"] for r in only] == [queued]
    for name in ("orders", "chain:orders"):
        found = tether_cli(db_url, "runs", "list", "--status", "paused", "--name", name, "--json")
        assert [r["execution_id"] for r in as_json(found)] == [paused], name
    table = tether_cli(db_url, "runs", "list", "--status", "queued")
    assert table.returncode == 0 and " orders " in table.stdout and ":orders" not in table.stdout


def test_enqueue_refuses_a_runner_the_app_lacks_and_warns_without_an_app(store, db_url):
    paused_run(store)
    refused = tether_cli(db_url, "enqueue", "--app", APP, "unknown-runner", "{}")
    assert refused.returncode == 4
    assert "unknown-runner" in refused.stderr and "loop, orders" in refused.stderr
    assert store.list_runs(status="queued") == []
    accepted = tether_cli(db_url, "enqueue", "--app", APP, "chain:orders", "{}")
    assert accepted.returncode == 0, accepted.stderr
    assert store.get_run(accepted.stdout.strip()).runner_name == "orders"
    warned = tether_cli(db_url, "enqueue", "unknown-runner", "{}")
    assert warned.returncode == 0
    assert "no run of a runner named 'unknown-runner'" in warned.stderr
    assert "runners seen: orders" in warned.stderr
