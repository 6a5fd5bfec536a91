"""How the store encodes state, for an integration that keeps rows in the same form.

A row's state is a full snapshot or a delta against the rows before it (set, deleted and
appended keys; a list that only grew stores its new items), and a large payload is compressed
with Zstandard. The LangGraph saver (:mod:`tether.integrations.langgraph`) stores its
checkpoints this way. Defined in the store's ``_delta``, ``_replay`` and ``_compression``
modules; this module is their public name.
"""

from __future__ import annotations

from ._compression import COMPRESS_MIN_BYTES, compress_state, decompress_state
from ._delta import Encoded, Head, ListMark, encode_state, grow_list
from ._delta import _scalars_only as scalars_only
from ._replay import apply_row_of, check_state_chain, head_from_raw, replay_state

__all__ = [
    "COMPRESS_MIN_BYTES",
    "Encoded",
    "Head",
    "ListMark",
    "apply_row_of",
    "check_state_chain",
    "compress_state",
    "decompress_state",
    "encode_state",
    "grow_list",
    "head_from_raw",
    "replay_state",
    "scalars_only",
]
