"""Compression of state payloads.

A row's state payload of at least ``compress_min_bytes`` (:data:`COMPRESS_MIN_BYTES` unless the
store says otherwise) is stored as a Zstandard frame (RFC 8878, level 1) when that saves at least
a tenth of it; a delta only from :data:`DELTA_COMPRESS_MIN_BYTES` (see there why). Readers
tell the two apart by the first byte: a JSON payload is an object (``{``), a Zstandard frame
starts with its magic number ``28 B5 2F FD`` (``(``), so rows written under either rule, by
this tether or an earlier one (which compressed deltas from 512 bytes), mix in one run.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import zstandard

from ..errors import ConfigurationError, CorruptRecordError

COMPRESS_MIN_BYTES: Final = 512  # state payloads this long or longer are stored compressed
# Zstandard level 1: ~4 us a KB of messages to compress, ~2-5 us to read (zlib level 1: ~18 us,
# within 2% of the same size); level 3 gains under 1% on messages.
COMPRESS_LEVEL: Final = 1

# A delta (one step's change: an appended message, a set key) is read again by every resume of
# its run until the next full snapshot, which for a history that only grows never comes: a
# resume after 10,000 steps replays 10,000 deltas. Reading a Zstandard frame costs ~1.2 us plus
# ~0.8 us a KB; parsing the same JSON ~0.4 us a KB, and the plain database reads a whole 1 KB
# row in about that. A frame of a 1 KB delta saves ~250 bytes and costs the replay 4x its
# parse (W6: 40% of a resume). So deltas below this stay plain JSON, which keeps the bytes at
# rest at about the plain log's; from here one frame costs little beside its bytes.
DELTA_COMPRESS_MIN_BYTES: Final = 16 * 1024

ZSTD_MARK: Final = b"\x28"  # first byte of a Zstandard frame (magic number 0xFD2FB528, LE)

_ZSTD: Final = threading.local()  # a compressor and a decompressor per thread (not shareable)


def compress_state(payload: bytes, min_bytes: int | None, *, delta: bool = False) -> bytes:
    """``payload`` as stored: a Zstandard frame when it is at least ``min_bytes`` long
    (``None``: never; for a ``delta``, at least :data:`DELTA_COMPRESS_MIN_BYTES` too) and that
    saves at least a tenth of it, else as it is."""
    if min_bytes is None or len(payload) < min_bytes:
        return payload
    if delta and len(payload) < DELTA_COMPRESS_MIN_BYTES:
        return payload
    try:
        compressor = _ZSTD.compressor
    except AttributeError:
        compressor = _ZSTD.compressor = zstandard.ZstdCompressor(level=COMPRESS_LEVEL)
    packed: bytes = compressor.compress(payload)
    return packed if len(packed) * 10 <= len(payload) * 9 else payload


def decompress_state(payload: bytes) -> bytes:
    try:
        decompressor = _ZSTD.decompressor
    except AttributeError:
        decompressor = _ZSTD.decompressor = zstandard.ZstdDecompressor()
    stream = decompressor.decompressobj()
    try:
        data: bytes = stream.decompress(payload)
    except zstandard.ZstdError as exc:
        raise CorruptRecordError(f"stored state is not a valid Zstandard frame: {exc}") from exc
    if not stream.eof or stream.unused_data:
        raise CorruptRecordError(
            "stored state is not a valid Zstandard frame: "
            + ("it is cut short" if not stream.eof else "bytes follow its end")
        )
    return data


def check_compress_min_bytes(value: Any) -> int | None:
    """Validate a store's ``compress_state_min_bytes`` option.

    Raises:
        ConfigurationError: not ``None`` nor a positive integer.
    """
    if value is None or (type(value) is int and value >= 1):
        return value
    raise ConfigurationError(
        f"compress_state_min_bytes must be a positive integer or None, got {value!r}"
    )
