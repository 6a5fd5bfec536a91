"""Rename maps: how a deploy that renamed a chain node or an agent's tool carries paused and
crashed runs across (docs/design.md §13, rule 5).

A run's rows name steps as the code that wrote them did (``node_id``, the tool in a
``turn:N/tool:<name>`` row and in the model's history). ``Chain(..., renamed={"old": "new"})``
and ``Agent(..., renamed={"old_tool": "new_tool"})`` tell the new code which of its steps an
old name stands for; a resume maps the stored name through the map before it checks that
the step exists (``MissingStepError``) and re-enters it. Rows already written keep their old
names: the timeline shows what ran under which name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ConfigurationError

__all__ = ["check_renamed", "current_name"]


def check_renamed(renamed: Mapping[str, str] | None, owner: str) -> dict[str, str]:
    """A copy of a rename map, checked.

    Args:
        renamed: ``{old_name: new_name}`` (``None``: no renames).
        owner: who declares it, for the error (``chain 'refunds'``).

    Raises:
        ConfigurationError: not a mapping of non-empty strings, a name mapped to itself, or
            a chain of renames (``a -> b`` and ``b -> c``: map ``a`` to ``c``).
    """
    if renamed is None:
        return {}
    if not isinstance(renamed, Mapping):
        raise ConfigurationError(
            f"{owner}: renamed must be a dict of old name -> new name, got {type(renamed).__name__}"
        )
    out: dict[str, str] = {}
    for old, new in renamed.items():
        if not (isinstance(old, str) and old and isinstance(new, str) and new):
            raise ConfigurationError(
                f"{owner}: renamed maps non-empty names to names, got {old!r} -> {new!r}"
            )
        if old == new:
            raise ConfigurationError(f"{owner}: renamed maps {old!r} to itself")
        out[old] = new
    chained = [old for old, new in out.items() if new in out]
    if chained:
        first = chained[0]
        raise ConfigurationError(
            f"{owner}: renamed maps {first!r} to {out[first]!r}, which is renamed again to "
            f"{out[out[first]]!r}; map {first!r} to the name the code has now"
        )
    return out


def current_name(renamed: Mapping[str, str], name: Any) -> Any:
    """The name the code has now for a stored ``name`` (unchanged when it was not renamed;
    non-strings, e.g. ``None``, pass through)."""
    return renamed.get(name, name) if isinstance(name, str) else name
