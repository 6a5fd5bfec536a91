"""A throwaway PostgreSQL cluster for fault tests: ``initdb`` + ``pg_ctl`` on a free port
under a temporary directory, never the shared test server.

PostgreSQL refuses to run as root; when the tests run as root the server's commands run as
the ``postgres`` system user (``runuser``), and the directory is handed to that user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BIN_DIRS = tuple(f"/usr/lib/postgresql/{v}/bin" for v in (15, 16, 17))
SUPERUSER_PASSWORD = "throwaway-superuser"


def find_bindir() -> str | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or ``None``."""
    for d in BIN_DIRS:
        if os.access(os.path.join(d, "initdb"), os.X_OK):
            return d
    found = shutil.which("pg_ctl")
    return os.path.dirname(found) if found else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One private server. ``dsn`` connects as the superuser over TCP (scram password).
    ``max_connections`` sizes it for the processes a test runs against it (each tether process
    keeps a pool per store and event loop)."""

    def __init__(self, bindir: str, *, max_connections: int = 60) -> None:
        self.bindir = bindir
        self.max_connections = max_connections
        self.root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.dsn = f"postgresql://postgres:{SUPERUSER_PASSWORD}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60) -> None:
        proc = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=timeout, cwd=self.root
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{args[0]} failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
                f"\n--- server log ---\n{self.server_log()}"
            )

    def server_log(self) -> str:
        try:
            return self.log.read_text()[-3000:]
        except OSError:
            return ""

    def init(self) -> None:
        pwfile = self.root / "pw"
        pwfile.write_text(SUPERUSER_PASSWORD + "\n")
        if self._as:
            shutil.chown(pwfile, "postgres")
        self._run(
            f"{self.bindir}/initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            f"--pwfile={pwfile}",
        )

    def start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c max_connections={self.max_connections}"
        )
        self._run(
            f"{self.bindir}/pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            opts,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def crash(self) -> None:
        """Stop like a crash: ``pg_ctl stop -m immediate`` (backends get SIGQUIT, no shutdown
        checkpoint). Should the postmaster not be gone within 20 s (seen once on a loaded
        machine), SIGKILL it and its children, which is a crash all the same."""
        try:
            self._run(
                f"{self.bindir}/pg_ctl",
                "-D",
                str(self.data),
                "-m",
                "immediate",
                "-w",
                "-t",
                "20",
                "stop",
                timeout=30,
            )
        except (RuntimeError, subprocess.TimeoutExpired):
            self._kill_all()

    def _kill_all(self) -> None:
        try:
            postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True
        ).stdout.split()
        pids = [postmaster, *map(int, children)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.05)
        with contextlib.suppress(FileNotFoundError):
            (self.data / "postmaster.pid").unlink()

    def is_running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = (
                subprocess.run(
                    [f"{self.bindir}/pg_isready", "-h", "127.0.0.1", "-p", str(self.port)],
                    capture_output=True,
                ).returncode
                == 0
            )
            if ok:
                return
            time.sleep(0.1)
        raise RuntimeError(f"throwaway server not ready:\n{self.server_log()}")

    def destroy(self) -> None:
        if self.is_running():
            self.crash()
        shutil.rmtree(self.root, ignore_errors=True)
