"""CLI tests run the real ``tether`` entry point in subprocesses against both backends."""

from __future__ import annotations

import functools
import importlib.util
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _postgres_backend_present(request: pytest.FixtureRequest) -> None:
    # The shared fixtures import tether.store.postgres; skip visibly while it is absent.
    wants_postgres = (
        "backend" in request.fixturenames and request.getfixturevalue("backend") == "postgres"
    )
    if wants_postgres and importlib.util.find_spec("tether.store.postgres") is None:
        pytest.skip("tether.store.postgres is not in this tree yet")


class ReadOnlyPlace:
    """A directory that :meth:`seal` makes read-only, and the ``tether`` command run by a user
    who cannot write it (``mount``: a tmpfs remounted ``ro``; ``permissions``: 0444 files in a
    0555 directory, the command run as ``nobody`` when the tests run as root)."""

    def __init__(self, where: Path, how: str, prefix: list[str]) -> None:
        self.dir = where
        self.how = how
        self._prefix = prefix
        self.sealed = False

    def seal(self) -> None:
        if self.how == "mount":
            subprocess.run(["mount", "-o", "remount,ro", str(self.dir)], check=True)
        else:
            for path in self.dir.iterdir():
                path.chmod(0o444)
            self.dir.chmod(0o555)
        self.sealed = True

    def cli(self, db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``tether *args --db db_url``, as the user who cannot write here."""
        from tests.support.proc import ROOT, child_env

        env = child_env(COLUMNS="200", TETHER_DATABASE_URL=db_url)
        env.pop("TETHER_APP", None)
        argv = [*self._prefix, sys.executable, "-m", "tether.cli", *args, "--db", db_url]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)


@functools.cache
def _tether_unreadable_as(prefix: tuple[str, ...]) -> str:
    """Why ``tether`` cannot be imported by the user ``prefix`` runs as (a checkout under a
    0700 directory, such as ``mktemp -d``'s, is closed to ``nobody``), or ``""``."""
    from tests.support.proc import ROOT, child_env

    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import tether.cli"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        check=False,
    )
    if probe.returncode == 0:
        return ""
    last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
    return f"{last} (checkout {ROOT})"


@pytest.fixture(params=["mount", "permissions"])
def read_only_place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ReadOnlyPlace]:
    """A :class:`ReadOnlyPlace` of each kind; skipped, saying why, where this machine cannot
    make one (a mount needs root; as root, ``setpriv`` and a ``nobody`` user stand in for a
    user without write permission)."""
    is_root = os.geteuid() == 0
    prefix: list[str] = []
    if request.param == "mount":
        if not is_root:  # pragma: no cover - the tests run as root here
            pytest.skip("mounting a read-only tmpfs needs root")
        where = tmp_path / "ro"
        where.mkdir()
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or 'mount failed'}")
    else:
        if is_root:  # root writes whatever a file's mode says: run the command as nobody
            if shutil.which("setpriv") is None:
                pytest.skip("root ignores file modes, and there is no setpriv to run as nobody")
            try:
                nobody = pwd.getpwnam("nobody")
            except KeyError:
                pytest.skip("root ignores file modes, and there is no 'nobody' user to run as")
            prefix = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}"]
            prefix.append("--clear-groups")
            unreadable = _tether_unreadable_as(tuple(prefix))
            if unreadable:
                pytest.skip(f"nobody cannot import tether from this checkout: {unreadable}")
        # Outside pytest's 0700 temporary root, so that nobody may look in (and only look).
        where = Path(tempfile.mkdtemp(prefix="tether-ro-"))
        where.chmod(0o755)
    place = ReadOnlyPlace(where, request.param, prefix)
    yield place
    if request.param == "mount":
        subprocess.run(["umount", "-l", str(where)], check=False)
    else:
        where.chmod(0o755)
        shutil.rmtree(where, ignore_errors=True)
