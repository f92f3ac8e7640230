"""The on-disk format of one SSD chunk (the state of up to ``chunk_tokens`` tokens).

All integers little-endian::

    offset  size  field
    0       4     magic b"KVGC"
    4       2     version (1)
    6       2     flags (0)
    8       4     token_count            (1 .. chunk_tokens)
    12      4     bytes_per_token        (the runtime's state_bytes_per_token)
    16      8     payload_len            (= token_count * bytes_per_token)
    24      32    namespace digest       (chain_root(namespace))
    56      32    chunk key              (hash chain up to and including this chunk)
    88      4*n   tokens (uint32)
    ..      p     payload (runtime-private state bytes of the tokens)
    end-4   4     crc32 of every byte before it

A reader checks magic, version, flags, counts and lengths against the file size and the caller's
expectations *before* reading the body, then the exact size (no trailing bytes), the checksum, the
tokens and the chunk key. Any failure raises :class:`BadChunk`.
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO, Optional, Sequence

from kvgate.core.cache.namespace import chain_next, pack_tokens, unpack_tokens

MAGIC = b"KVGC"
VERSION = 1
HEADER = struct.Struct("<4sHHIIQ32s32s")
TRAILER = 4


class BadChunk(ValueError):
    """A chunk file that fails validation (damaged, truncated, foreign or stale); ``key`` names it."""

    key: bytes | None = None


def encode_chunk(namespace_digest: bytes, key: bytes, tokens: Sequence[int], payload: bytes) -> bytes:
    if not tokens or len(payload) % len(tokens):
        raise ValueError(f"payload of {len(payload)} bytes does not split over {len(tokens)} tokens")
    head = HEADER.pack(MAGIC, VERSION, 0, len(tokens), len(payload) // len(tokens), len(payload),
                       namespace_digest, key)
    body = head + pack_tokens(tokens) + payload
    return body + struct.pack("<I", zlib.crc32(body))


def chunk_file_size(token_count: int, payload_len: int) -> int:
    return HEADER.size + 4 * token_count + payload_len + TRAILER


def read_chunk(handle: BinaryIO, file_size: int, *, namespace_digest: bytes, key: bytes, previous_key: bytes,
               expected_tokens: Optional[Sequence[int]], bytes_per_token: Optional[int],
               max_tokens: int) -> tuple[list[int], bytes]:
    """Validate and read one chunk; returns ``(tokens, payload)``."""
    if file_size < HEADER.size + TRAILER:
        raise BadChunk(f"file of {file_size} bytes is shorter than a header")
    head = handle.read(HEADER.size)
    magic, version, flags, count, per_token, payload_len, ns, file_key = HEADER.unpack(head)
    if magic != MAGIC:
        raise BadChunk("bad magic")
    if version != VERSION or flags != 0:
        raise BadChunk(f"unsupported version {version} / flags {flags}")
    if not 0 < count <= max_tokens:
        raise BadChunk(f"token count {count} outside 1..{max_tokens}")
    if expected_tokens is not None and count != len(expected_tokens):
        raise BadChunk(f"token count {count}, manifest says {len(expected_tokens)}")
    if bytes_per_token is not None and per_token != bytes_per_token:
        raise BadChunk(f"{per_token} bytes per token, the runtime uses {bytes_per_token}")
    if payload_len != count * per_token:
        raise BadChunk(f"payload length {payload_len} != {count} tokens x {per_token} bytes")
    if file_size != chunk_file_size(count, payload_len):
        raise BadChunk(f"file is {file_size} bytes, its header describes {chunk_file_size(count, payload_len)}")
    if ns != namespace_digest or file_key != key:
        raise BadChunk("chunk belongs to another namespace or key")
    rest = handle.read(file_size - HEADER.size)
    if len(rest) != file_size - HEADER.size or handle.read(1):
        raise BadChunk("file changed size while being read")
    (crc,) = struct.unpack_from("<I", rest, len(rest) - TRAILER)
    crc_now = zlib.crc32(rest[:-TRAILER], zlib.crc32(head))
    if crc != crc_now:
        raise BadChunk("checksum mismatch")
    tokens = unpack_tokens(rest[:4 * count])
    if expected_tokens is not None and tokens != list(expected_tokens):
        raise BadChunk("tokens differ from the manifest")
    if chain_next(previous_key, tokens) != key:
        raise BadChunk("chunk key does not match its tokens")
    return tokens, rest[4 * count:-TRAILER]
