"""The application ``tether serve --app tests.web.app:app`` imports in the web tests.

It opens its store with ``tether.connect()``, so it reaches whatever ``--db`` names.
"""

from __future__ import annotations

import tether
from tests.support.chains import orders_chain
from tether.registry import Registry

app = Registry(orders_chain(tether.connect()))
