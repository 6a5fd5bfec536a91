"""The assembled ``tether`` command: the group and error boundary of :mod:`._app` with every
command module's commands added (the command modules import ``_app``, never this module)."""

from __future__ import annotations

from . import answer, audit, control, lists, maintenance, runs, serve, users, worker
from ._app import cli, invoke

__all__ = ["cli", "invoke"]

for _command in (
    *runs.COMMANDS,
    *lists.COMMANDS,
    *answer.COMMANDS,
    *control.COMMANDS,
    *audit.COMMANDS,
    *maintenance.COMMANDS,
    *serve.COMMANDS,
    *users.COMMANDS,
    *worker.COMMANDS,
):
    cli.add_command(_command)
runs.runs_group.add_command(control.runs_delete)
