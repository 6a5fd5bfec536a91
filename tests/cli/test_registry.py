"""``Registry`` and ``load_app``: how the CLI finds the runner of a stored run."""

from __future__ import annotations

import pytest

from tests.support.chains import loop_chain, orders_chain
from tether import ConfigurationError, RunnerMismatchError, RunNotFoundError
from tether.registry import Registry, load_app
from tether.store.base import RunRecord


def test_registry_gets_runners_by_name_and_lists_names(store):
    orders, loop = orders_chain(store), loop_chain(store)
    app = Registry(orders, loop)
    assert app.get("orders") is orders and app.get("loop") is loop
    assert app.names() == ["loop", "orders"]
    assert "orders" in app and len(app) == 2 and list(app) == [orders, loop]


def test_unknown_name_is_a_configuration_error_listing_the_known_names(store):
    app = Registry(orders_chain(store))
    with pytest.raises(ConfigurationError, match=r"no runner named 'refunds'.*'orders'"):
        app.get("refunds")


def test_duplicate_names_and_non_runners_are_refused(store):
    with pytest.raises(ConfigurationError, match="unique"):
        Registry(orders_chain(store), orders_chain(store))
    with pytest.raises(ConfigurationError, match="not a runner"):
        Registry(object())  # type: ignore[arg-type]


def test_for_run_finds_the_runner_by_the_runs_recorded_name(store):
    orders, loop = orders_chain(store), loop_chain(store)
    app = Registry(loop, orders)
    eid = orders.run({"order_id": "A", "amount": 500}).execution_id
    assert app.for_run(store, eid) is orders
    with pytest.raises(RunNotFoundError):
        app.for_run(store, "missing")
    with pytest.raises(ConfigurationError, match="'orders'"):
        Registry(loop).for_run(store, eid)


async def test_afor_run_is_the_async_twin(store):
    orders = orders_chain(store)
    result = await orders.arun({"order_id": "A", "amount": 5})
    assert await Registry(orders).afor_run(store, result.execution_id) is orders


def test_for_run_refuses_a_runner_of_another_kind(store):
    store.create_run(RunRecord(execution_id="e1", runner_name="orders", runner_kind="agent"))
    with pytest.raises(RunnerMismatchError) as info:
        Registry(orders_chain(store)).for_run(store, "e1")
    assert info.value.found == "agent:orders" and info.value.expected == "chain:orders"


def test_load_app_accepts_a_registry_a_runner_or_a_list(monkeypatch, tmp_path):
    monkeypatch.setenv("TETHER_DATABASE_URL", f"sqlite:///{tmp_path / 'app.db'}")
    app = load_app("tests.cli.app:app")
    assert app.names() == ["loop", "orders"]
    assert load_app("tests.cli.app").names() == ["loop", "orders"]  # ':app' is the default
    assert load_app("tests.cli.app:orders").names() == ["orders"]
    assert load_app("tests.cli.app:runner_list").names() == ["orders"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:app", "no such module"),
        ("tests.cli.app:missing", "has no attribute 'missing'"),
        ("tests.cli.app:not_a_runner", "expected a tether.Registry"),
        (":app", "must look like"),
    ],
)
def test_load_app_errors_are_configuration_errors(monkeypatch, tmp_path, spec, message):
    monkeypatch.setenv("TETHER_DATABASE_URL", f"sqlite:///{tmp_path / 'app.db'}")
    with pytest.raises(ConfigurationError, match=message):
        load_app(spec)
