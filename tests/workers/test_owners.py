"""Whose pid an owner id names: a live owner in another pid namespace of the same hostname is
never judged dead by pid (``docs/workers.md``, "Leases and heartbeats")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tether.engine import owners


def _gone_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_an_owner_of_this_host_whose_process_is_gone_is_dead():
    assert owners.process_is_dead(f"{owners.HOST}:{_gone_pid()}:abcd1234")
    assert not owners.process_is_dead(f"{owners.HOST}:{os.getpid()}:abcd1234")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pid namespaces are Linux's")
def test_an_owner_of_another_pid_namespace_or_boot_with_this_hostname_is_not_judged_by_pid():
    assert owners.HOST.startswith(owners.HOSTNAME + "/")
    gone = _gone_pid()
    boot, _, namespace = owners.HOST.partition("/")[2].partition(".")
    other_namespace = f"{owners.HOSTNAME}/{boot}.{int(namespace) + 1}"
    other_boot = f"{owners.HOSTNAME}/{'0' * 8 if boot != '0' * 8 else '1' * 8}.{namespace}"
    for host in (other_namespace, other_boot, owners.HOSTNAME):  # the last: an older tether's
        owner = f"{host}:{gone}:abcd1234"
        assert not owners.process_is_dead(owner), owner
        assert not owners.owner_is_dead(owner), owner
    assert not owners.owner_is_dead(f"{owners.HOSTNAME}:{os.getpid()}:abcd1234")


_APP = """
import os, sys, time
from tether import Chain, LeaseHeldError, SQLiteCheckpointer

db, log = sys.argv[2], sys.argv[3]

def slow(state):
    with open(log, "a") as f:
        f.write("slow started\\n")
    time.sleep(float(sys.argv[4]))
    return {"slow": True}

chain = Chain("pidns", SQLiteCheckpointer(db))
chain.add_node("first", lambda state: {"first": True})
chain.add_node("slow", slow)
chain.add_edge("first", "slow")
if sys.argv[1] == "run":
    print(chain.run({}, execution_id="shared").status, flush=True)
else:
    try:
        print(chain.resume("shared").status, flush=True)
    except LeaseHeldError as exc:
        print("LeaseHeldError", exc.owner, flush=True)
"""


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _unshare_works(),
    reason="needs `unshare --pid --fork --mount-proc` (Linux, CAP_SYS_ADMIN)",
)
def test_a_resume_from_another_pid_namespace_does_not_take_a_live_run_over(tmp_path: Path):
    app, log, db = tmp_path / "app.py", tmp_path / "steps.log", tmp_path / "t.db"
    app.write_text(textwrap.dedent(_APP))
    args = [str(db), str(log)]
    holder = subprocess.Popen(
        [sys.executable, str(app), "run", *args, "6"], stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not (log.exists() and log.read_text()):  # the holder is inside its slow step
            assert holder.poll() is None and time.monotonic() < deadline, "holder never started"
            time.sleep(0.05)
        in_new_namespace = ["unshare", "--pid", "--fork", "--mount-proc"]
        resumer = subprocess.run(
            [*in_new_namespace, sys.executable, str(app), "resume", *args, "0"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert resumer.stdout.startswith("LeaseHeldError"), resumer.stdout + resumer.stderr
        assert holder.poll() is None  # the holder was still running when it was refused
        out, _ = holder.communicate(timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert out.strip() == "completed"
    assert log.read_text() == "slow started\n"  # the step ran once, in its owner only
