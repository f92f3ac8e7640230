"""Read one metadata value from a GGUF header without parsing the whole file.

GGUF header: magic ``GGUF``, u32 version, u64 tensor count, u64 key/value count, then key/value
pairs: key (u64 length + UTF-8), u32 value type, value. Strings are u64 length + bytes; arrays are
u32 item type + u64 count + items. Little-endian.
"""

from __future__ import annotations

import struct
from typing import Any, BinaryIO, Optional

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
MAX_STRING = 1 << 24


def read_exact(handle: BinaryIO, size: int) -> bytes:
    data = handle.read(size)
    if len(data) != size:
        raise ValueError("GGUF header is truncated")
    return data


def read_string(handle: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", read_exact(handle, 8))
    if length > MAX_STRING:
        raise ValueError(f"GGUF header string of {length} bytes is implausible")
    return read_exact(handle, length).decode("utf-8", errors="replace")


def read_value(handle: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, read_exact(handle, struct.calcsize(fmt)))[0]
    if kind == STRING:
        return read_string(handle)
    if kind == ARRAY:
        item_kind, count = struct.unpack("<IQ", read_exact(handle, 12))
        if item_kind in _SCALARS:
            handle.seek(count * struct.calcsize(_SCALARS[item_kind]), 1)
        else:
            for _ in range(count):
                read_value(handle, item_kind)
        return None  # arrays are skipped, never returned
    raise ValueError(f"unknown GGUF value type {kind}")


def read_counts(handle: BinaryIO, path: str) -> tuple[int, int]:
    """``(tensor count, key/value count)`` after checking the magic and the version."""
    if read_exact(handle, 4) != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (bad magic)")
    version, tensors, pairs = struct.unpack("<IQQ", read_exact(handle, 20))
    if version not in (2, 3):
        raise ValueError(f"{path}: unsupported GGUF version {version}")
    return tensors, pairs


def read_header_value(path: str, wanted: str) -> Optional[Any]:
    """The value of metadata key ``wanted`` (scalars and strings only), or None when absent."""
    with open(path, "rb") as handle:
        _tensors, pairs = read_counts(handle, path)
        for _ in range(pairs):
            key = read_string(handle)
            (kind,) = struct.unpack("<I", read_exact(handle, 4))
            value = read_value(handle, kind)
            if key == wanted:
                return value
    return None
