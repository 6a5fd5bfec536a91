"""Rename maps: carry paused and crashed runs across a deploy that renamed a step
(docs/design.md §12, "Deploys").

A stored row names its step by the name the code had when it ran: a chain node id, a tool
name. ``Chain(renamed={"old": "new"})`` and ``Agent(renamed_tools={"old": "new"})`` tell the
new code which of its steps an old name means, so resume, fork and workers continue such a run
at the renamed step instead of refusing it with ``MissingStepError``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .errors import ConfigurationError

__all__ = ["check_renames"]


def check_renames(renamed: Any, known: Collection[str], owner: str, what: str) -> dict[str, str]:
    """``renamed`` as a checked ``{old: new}`` dict (``{}`` for ``None``).

    Checked when steps are added later too: only the shape here (str to str, no old name
    that is still a current name, no chains of renames).

    Raises:
        ConfigurationError: not a mapping of non-empty str to str, an old name that is still
            one of ``known``, or a new name that is itself renamed.
    """
    if renamed is None:
        return {}
    if not isinstance(renamed, Mapping) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in renamed.items()
    ):
        raise ConfigurationError(f"{owner}: renames must map old {what} names to new ones (str)")
    out = dict(renamed)
    for old, new in out.items():
        if old in known:
            raise ConfigurationError(f"{owner}: {what} {old!r} is renamed but still exists")
        if new in out:
            raise ConfigurationError(
                f"{owner}: {what} {old!r} is renamed to {new!r}, which is renamed too; map "
                "each old name to the current one"
            )
    return out
