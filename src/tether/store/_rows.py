"""Where each column sits in the rows the SQL backends select, read by name.

The statements select :data:`CHECKPOINT_COLUMNS` (the names of :data:`CP`) in that order; the
plans and the codec read a checkpoint row's fields as ``row[CP.seq]``, never ``row[2]``.
:data:`STEP_FIELDS` names the parameters of a checkpoint insert: the columns but
``created_at``, which each backend stamps with its own clock. A row of a run's state chain
(:data:`CHAIN_COLUMNS`) is read as ``row[CHAIN.seq]``.
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ["CHAIN", "CHAIN_COLUMNS", "CHECKPOINT_COLUMNS", "CP", "STEP_FIELDS", "named"]


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
CHECKPOINT_COLUMNS: Final = ", ".join(CP._fields)
"""The checkpoint columns as a select list, in :data:`CP`'s order."""

STEP_FIELDS: Final = CP._fields[:-1]


class _ChainColumns(NamedTuple):
    seq: int
    state_kind: int
    state: int


CHAIN: Final = _ChainColumns(*range(len(_ChainColumns._fields)))
"""The position of each column in a row of a run's state chain (what a resume replays)."""
CHAIN_COLUMNS: Final = ", ".join(CHAIN._fields)


def named(placeholder: str, names: tuple[str, ...] = STEP_FIELDS) -> str:
    """``names`` as a list of named placeholders: ``named(":{}")`` is ``:checkpoint_id, …``
    (SQLite), ``named("%({})s")`` is ``%(checkpoint_id)s, …`` (Postgres)."""
    return ", ".join(placeholder.format(n) for n in names)
