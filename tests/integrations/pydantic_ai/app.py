"""The application ``--app tests.integrations.pydantic_ai.app:app`` names in the CLI, web and
worker tests: the durable support agent on ``tether.connect()`` (whatever ``--db`` names),
talking to the stub at ``STUB_URL``."""

from __future__ import annotations

import os

import tether
from tests.integrations.pydantic_ai.agents import durable
from tether.registry import Registry

app = Registry(durable(os.environ["STUB_URL"], tether.connect()))
