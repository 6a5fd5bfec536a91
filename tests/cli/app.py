"""The test application the CLI imports with ``--app tests.cli.app:app``.

It opens its store with ``tether.connect()``, so it reaches whatever ``--db`` names (the CLI
exports it as ``TETHER_DATABASE_URL`` before importing the app).
"""

from __future__ import annotations

import tether
from tests.support.chains import loop_chain, orders_chain
from tether.registry import Registry

_store = tether.connect()

app = Registry(orders_chain(_store), loop_chain(_store))
orders = app.get("orders")
runner_list = [orders]
not_a_runner = {"name": "orders"}
