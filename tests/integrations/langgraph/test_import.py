"""The integration's public names are pinned, and it stays optional: ``import tether`` (and
tether's CLI, workers and stores) never import LangGraph."""

from __future__ import annotations

import subprocess
import sys

import tether.integrations.langgraph as integration
from tests.support.proc import ROOT, child_env


def test_the_integration_exports_exactly_its_public_names() -> None:
    assert set(integration.__all__) == {
        "LangGraphResult",
        "LangGraphRunner",
        "TetherSaver",
        "TetherSerializer",
    }
    for name in integration.__all__:
        assert getattr(integration, name) is not None


def test_import_tether_its_cli_and_stores_do_not_import_langgraph() -> None:
    code = (
        "import sys, tether, tether.cli, tether.worker, tether.integrations\n"
        "import tether.store.sqlite, tether.store.postgres\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'langchain_core'))\n"
        "print(loaded)\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
