"""Where each column sits in the rows the SQL backends select, read by name.

The statements select :data:`~._codec.CHECKPOINT_COLUMNS` in that order; a plan reads a
checkpoint row's fields as ``row[CP.seq]``, never ``row[2]``. :data:`STEP_FIELDS` names the
parameters of a checkpoint insert: the columns but ``created_at``, which each backend stamps
with its own clock.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from . import _codec

__all__ = ["CP", "STEP_FIELDS", "named"]


class _CheckpointColumns(NamedTuple):
    checkpoint_id: int
    execution_id: int
    seq: int
    node_id: int
    node_index: int
    step_type: int
    status: int
    state_kind: int
    state: int
    base_seq: int
    node_input: int
    node_output: int
    iteration_counters: int
    interrupt_reason: int
    interrupt_context: int
    agent_path: int
    parent_checkpoint_id: int
    next_node_id: int
    created_at: int


CP: Final = _CheckpointColumns(*range(len(_CheckpointColumns._fields)))
"""The position of each column in a selected checkpoint row."""
if ", ".join(CP._fields) != _codec.CHECKPOINT_COLUMNS:  # pragma: no cover - a bug, at import
    raise RuntimeError("_rows.CP is out of step with _codec.CHECKPOINT_COLUMNS")

STEP_FIELDS: Final = CP._fields[:-1]


def named(placeholder: str, names: tuple[str, ...] = STEP_FIELDS) -> str:
    """``names`` as a list of named placeholders: ``named(":{}")`` is ``:checkpoint_id, …``
    (SQLite), ``named("%({})s")`` is ``%(checkpoint_id)s, …`` (Postgres)."""
    return ", ".join(placeholder.format(n) for n in names)
