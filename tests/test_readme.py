"""The Python examples of the README and docs/observability.md run as written: each
```python block, in a fresh interpreter in an empty directory, except those marked
``<!-- readme-test: skip (why) -->`` (fragments that need the reader's own agents, graph or
API key)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.proc import child_env

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "observability.md")
BLOCK = re.compile(
    r"(<!-- readme-test: skip \((?P<why>[^)]*)\) -->\n)?```python\n(?P<code>.*?)```", re.S
)


def blocks(path: Path) -> list[tuple[str, str | None]]:
    return [(m["code"], m["why"]) for m in BLOCK.finditer(path.read_text())]


RUNNABLE = [
    pytest.param(code, id=f"{path.name}-{n}")
    for path in DOCUMENTS
    for n, (code, why) in enumerate(blocks(path), 1)
    if why is None
]


def test_the_readme_has_runnable_examples_and_says_why_the_others_are_not():
    found = blocks(DOCUMENTS[0])
    assert len([code for code, why in found if why is None]) >= 2, "the chain and the agent"
    assert all(why.strip() for _, why in found if why is not None)


@pytest.mark.parametrize("code", RUNNABLE)
def test_a_documented_python_example_runs(code: str, tmp_path: Path):
    env = child_env()
    env.pop("TETHER_DATABASE_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"this example failed:\n{code}\n{proc.stderr}"
    if "ConsoleSpanExporter" in code:  # the spans were exported, with the stored trace ids
        assert '"name": "tether.run hello"' in proc.stdout
        assert re.search(r"\['[0-9a-f]{32}'", proc.stdout), proc.stdout
