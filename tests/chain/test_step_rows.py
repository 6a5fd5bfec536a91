"""The step row the executors build for each node, field by field."""

from __future__ import annotations

import dataclasses

from tether import Checkpoint
from tether.engine import rows


def test_a_step_row_holds_each_value_in_its_own_field():
    state = {"n": 1}
    cp = rows.step(
        "run-1",
        "node-a",
        "tool_call",
        state,
        node_index=3,
        node_input={"in": 1},
        node_output={"out": 2},
        agent_path="outer/inner",
        counters={"a->b": 2},
        next_node_id="node-b",
    )
    assert dataclasses.asdict(cp) == {
        "execution_id": "run-1",
        "node_id": "node-a",
        "step_type": "tool_call",
        "status": "completed",
        "state_snapshot": {"n": 1},
        "node_index": 3,
        "node_input": {"in": 1},
        "node_output": {"out": 2},
        "iteration_counters": {"a->b": 2},
        "interrupt_reason": None,
        "interrupt_context": None,
        "agent_path": "outer/inner",
        "parent_checkpoint_id": None,
        "next_node_id": "node-b",
        "checkpoint_id": "",
        "seq": 0,
        "created_at": None,
    }
    assert cp.state_snapshot is state
    assert rows.step("r", "n", "node", {}, node_index=0).iteration_counters == {}


def test_checkpoint_fields_keep_the_order_step_rows_are_built_in():
    assert [f.name for f in dataclasses.fields(Checkpoint)][:14] == [
        "execution_id",
        "node_id",
        "step_type",
        "status",
        "state_snapshot",
        "node_index",
        "node_input",
        "node_output",
        "iteration_counters",
        "interrupt_reason",
        "interrupt_context",
        "agent_path",
        "parent_checkpoint_id",
        "next_node_id",
    ]
