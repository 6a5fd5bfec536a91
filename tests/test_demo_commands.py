"""What `make demo` tells the reader to type works: the approvals page it points at starts with
the token it prints (tether serve refuses a shared token under 16 characters)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "examples" / "refunds" / "demo.py"


def test_the_serve_command_the_demo_prints_is_accepted_with_its_token(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("refunds_demo", DEMO)
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    assert demo.DEMO_TOKEN in DEMO.read_text()
    # The printed command, against a store of its own: the token is checked before the
    # server binds, so a refused one exits at once (code 4).
    env = {**os.environ, "TETHER_UI_TOKEN": demo.DEMO_TOKEN}
    db = f"sqlite:///{tmp_path / 'refunds.db'}"
    code = f"import tether; tether.connect({db!r}).close()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli", "serve", "--db", db, "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return  # still serving after 5 s: the token was accepted
    raise AssertionError(f"tether serve exited {proc.returncode}: {err or out}")
