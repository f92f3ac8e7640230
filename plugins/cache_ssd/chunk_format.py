"""The on-disk format of one SSD chunk (the state of up to ``chunk_tokens`` tokens), version 2.

All integers little-endian::

    offset  size  field
    0       4     magic b"KVGC"
    4       2     version (2)
    6       2     flags (0)
    8       4     token_count            (1 .. chunk_tokens)
    12      8     state format digest    (format_digest(runtime.state_format))
    20      8     payload_len
    28      32    namespace digest       (chain_root(namespace))
    60      32    chunk key              (hash chain up to and including this chunk)
    92      4*n   tokens (uint32)
    ..      p     payload (the runtime's export_chunk bytes: per-token and auxiliary state)
    end-4   4     crc32 of every byte before it

Version 1 (``bytes_per_token`` at offset 12, payload a whole number of tokens) is not read: a
chunk of another version, or of another runtime state format, raises :class:`StaleChunk`. A
reader checks magic and version first, then flags, counts and lengths against the file size and
the caller's expectations *before* reading the body, then the exact size (no trailing bytes),
the checksum, the tokens and the chunk key. Any failure raises :class:`BadChunk`.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from typing import BinaryIO, Optional, Sequence

from kvgate.core.cache.namespace import chain_next, pack_tokens, unpack_tokens
from kvgate.core.cache.snapshot import BadChunk, StaleChunk

MAGIC = b"KVGC"
VERSION = 2
PREAMBLE = struct.Struct("<4sHH")
HEADER = struct.Struct("<4sHHI8sQ32s32s")
TRAILER = 4
__all__ = ["BadChunk", "StaleChunk", "encode_chunk", "read_chunk", "read_header", "format_digest"]


def format_digest(state_format: str) -> bytes:
    return hashlib.blake2b(state_format.encode("utf-8"), digest_size=8).digest()


def encode_chunk(namespace_digest: bytes, key: bytes, tokens: Sequence[int], payload: bytes,
                 state_format: str) -> bytes:
    if not tokens:
        raise ValueError("a chunk holds at least one token")
    head = HEADER.pack(MAGIC, VERSION, 0, len(tokens), format_digest(state_format), len(payload),
                       namespace_digest, key)
    body = head + pack_tokens(tokens) + payload
    return body + struct.pack("<I", zlib.crc32(body))


def chunk_file_size(token_count: int, payload_len: int) -> int:
    return HEADER.size + 4 * token_count + payload_len + TRAILER


def read_header(handle: BinaryIO, file_size: int, *, expected_count: Optional[int], digest: Optional[bytes],
                max_tokens: int) -> tuple[bytes, tuple]:
    """Validate the header against the file size and the caller's expectations; returns
    ``(raw header, fields)``. ``digest`` is the expected state format digest (None: any)."""
    if file_size < PREAMBLE.size:
        raise BadChunk(f"file of {file_size} bytes is shorter than a header")
    preamble = handle.read(PREAMBLE.size)
    magic, version, flags = PREAMBLE.unpack(preamble)
    if magic != MAGIC:
        raise BadChunk("bad magic")
    if version != VERSION:
        raise StaleChunk(f"stale chunk format version {version}, this build reads version {VERSION}")
    if flags != 0:
        raise BadChunk(f"unsupported flags {flags}")
    if file_size < HEADER.size + TRAILER:
        raise BadChunk(f"file of {file_size} bytes is shorter than a header")
    head = preamble + handle.read(HEADER.size - PREAMBLE.size)
    fields = HEADER.unpack(head)
    count, fmt, payload_len = fields[3], fields[4], fields[5]
    if not 0 < count <= max_tokens:
        raise BadChunk(f"token count {count} outside 1..{max_tokens}")
    if expected_count is not None and count != expected_count:
        raise BadChunk(f"token count {count}, manifest says {expected_count}")
    if digest is not None and fmt != digest:
        raise StaleChunk("stale chunk: written for another runtime state format")
    if file_size != chunk_file_size(count, payload_len):
        raise BadChunk(f"file is {file_size} bytes, its header describes {chunk_file_size(count, payload_len)}")
    return head, fields


def read_chunk(handle: BinaryIO, file_size: int, *, namespace_digest: bytes, key: bytes, previous_key: bytes,
               expected_tokens: Optional[Sequence[int]], digest: Optional[bytes],
               max_tokens: int) -> tuple[list[int], bytes]:
    """Validate and read one chunk; returns ``(tokens, payload)``."""
    expected_count = len(expected_tokens) if expected_tokens is not None else None
    head, fields = read_header(handle, file_size, expected_count=expected_count, digest=digest, max_tokens=max_tokens)
    count, ns, file_key = fields[3], fields[6], fields[7]
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
