"""The run inspector's reads: an agent run's conversation, and one checkpoint's state with a
value-level diff against the row before it (docs/web.md, "The run inspector").

Pure functions over the checkpoints a store returned (seq order, full state each), so the page
and ``GET /api/runs/{id}`` show the same thing.
"""

from __future__ import annotations

from typing import Any

from ..checkpoint import Checkpoint

__all__ = ["conversation", "inspect_checkpoint"]


def _messages(cp: Checkpoint) -> list[Any] | None:
    state = cp.state_snapshot
    found = state.get("messages") if isinstance(state, dict) else None
    return found if isinstance(found, list) else None


def conversation(rows: list[Checkpoint]) -> dict[str, Any] | None:
    """The conversation of the newest row that holds one (an agent's ``messages``), or
    ``None`` for a run without one (a chain of plain steps).

    Returns:
        ``{"checkpoint_id", "agent_path", "messages": [{"role", "content", "name",
        "tool_calls": [{"id", "name", "arguments"}], "tool_call_id", "tool_name"}]}``:
        ``tool_name`` names the tool a ``tool`` message answers (from the call with its
        ``tool_call_id``). A message that is not a dict is shown as ``{"role": "?",
        "content": <its JSON>}``, never dropped.
    """
    for cp in reversed(rows):
        found = _messages(cp)
        if found is None:
            continue
        calls: dict[str, str] = {}
        shown: list[dict[str, Any]] = []
        for m in found:
            if not isinstance(m, dict):
                shown.append({"role": "?", "content": repr(m), "tool_calls": []})
                continue
            tool_calls = [c for c in m.get("tool_calls") or () if isinstance(c, dict)]
            for call in tool_calls:
                calls[str(call.get("id"))] = str(call.get("name"))
            shown.append(
                {
                    "role": m.get("role"),
                    "content": m.get("content"),
                    "name": m.get("name"),
                    "tool_calls": tool_calls,
                    "tool_call_id": m.get("tool_call_id"),
                    "tool_name": calls.get(str(m.get("tool_call_id"))),
                }
            )
        return {"checkpoint_id": cp.checkpoint_id, "agent_path": cp.agent_path, "messages": shown}
    return None


def _changes(before: Any, after: Any) -> list[dict[str, Any]]:
    if not (isinstance(before, dict) and isinstance(after, dict)):
        if before == after:
            return []
        return [{"key": None, "change": "changed", "before": before, "after": after}]
    out = []
    for key in after:
        if key not in before:
            out.append({"key": key, "change": "added", "before": None, "after": after[key]})
        elif before[key] != after[key]:
            out.append(
                {"key": key, "change": "changed", "before": before[key], "after": after[key]}
            )
    for key in before:
        if key not in after:
            out.append({"key": key, "change": "removed", "before": before[key], "after": None})
    return out


def inspect_checkpoint(
    rows: list[Checkpoint], checkpoint_id: str, run_input: Any
) -> dict[str, Any] | None:
    """One checkpoint of the run as the inspector shows it, or ``None`` if the run has no
    such checkpoint.

    Returns:
        ``{"checkpoint_id", "seq", "node_id", "label", "step_type", "status", "agent_path",
        "state", "node_input", "node_output", "previous_checkpoint_id", "changes": [{"key",
        "change": "added"|"changed"|"removed", "before", "after"}]}``: ``changes`` compares
        the row's state with the row before it (the run's input for the first row), key by
        key with both values.
    """
    for i, cp in enumerate(rows):
        if cp.checkpoint_id != checkpoint_id:
            continue
        previous = rows[i - 1] if i else None
        before = previous.state_snapshot if previous is not None else run_input
        return {
            "checkpoint_id": cp.checkpoint_id,
            "seq": cp.seq,
            "node_id": cp.node_id,
            "label": cp.label,
            "step_type": cp.step_type,
            "status": cp.status,
            "agent_path": cp.agent_path,
            "state": cp.state_snapshot,
            "node_input": cp.node_input,
            "node_output": cp.node_output,
            "previous_checkpoint_id": None if previous is None else previous.checkpoint_id,
            "changes": _changes(before, cp.state_snapshot),
        }
    return None
