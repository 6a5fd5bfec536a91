"""Bad input found by a review pass, in subprocesses on both backends: each is refused with a
line naming the problem (exit 4), and nothing is written."""

from __future__ import annotations

import pytest

from tests.cli.test_cli import paused_run, tether_cli


@pytest.mark.parametrize(
    "args",
    [
        ("prune", "--older-than", "99999999999d"),
        ("prune", "--older-than", "999999d"),
        ("audit", "--since", "999999d"),
        ("pending", "list", "--waiting", "999999999d"),
    ],
)
def test_a_duration_too_long_for_a_date_is_bad_input_not_a_crash(store, db_url, args):
    eid = paused_run(store)
    proc = tether_cli(db_url, *args)
    assert proc.returncode == 4, proc.stderr
    assert args[-2] in proc.stderr and repr(args[-1]) in proc.stderr
    assert "OverflowError" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert store.get_run(eid) is not None


def test_approve_data_with_nan_is_bad_input_and_leaves_the_run_paused(store, db_url):
    eid = paused_run(store)
    proc = tether_cli(db_url, "approve", eid, "--data", '{"amount": NaN}')
    assert proc.returncode == 4 and "NaN is not a JSON number" in proc.stderr, proc.stderr
    assert store.get_pending_interrupt(eid).resume_value is None
