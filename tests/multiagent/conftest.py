from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _tool_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tools.jsonl"
    monkeypatch.setenv("TOOL_LOG", str(path))
    return path
