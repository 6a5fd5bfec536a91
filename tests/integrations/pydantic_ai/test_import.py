"""The integration's public names are pinned, and it stays optional: ``import tether`` (and
tether's CLI) never import pydantic-ai."""

from __future__ import annotations

import subprocess
import sys

import tether.integrations.pydantic_ai as integration
from tests.support.proc import ROOT, child_env


def test_the_integration_exports_exactly_its_public_names() -> None:
    assert set(integration.__all__) == {
        "SUPPORTED_VERSIONS",
        "ReplayDivergedError",
        "TetherAgent",
        "TetherRunResult",
    }
    for name in integration.__all__:
        assert getattr(integration, name) is not None


def test_import_tether_and_its_cli_do_not_import_pydantic_ai() -> None:
    code = (
        "import sys, tether, tether.cli, tether.worker_process, tether.integrations\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic_ai', 'pydantic_graph', 'openai'))\n"
        "print(loaded)\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_installed_pydantic_ai_is_within_the_supported_range() -> None:
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    installed = version("pydantic-ai-slim")
    assert installed in SpecifierSet(integration.SUPPORTED_VERSIONS), installed


def test_the_extras_pin_the_supported_range() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = f"pydantic-ai-slim[openai]{integration.SUPPORTED_VERSIONS}"
    assert project["optional-dependencies"]["pydantic-ai"] == [wanted]
    assert wanted in project["optional-dependencies"]["test"]
