"""Chunk files on disk: ``<root>/<2 hex>/<64 hex chunk key>.kvc``, written atomically and durably.

A chunk is written to a temporary name, fsynced and renamed; the caller fsyncs the directories
(:func:`fsync_directory`) before anything names the chunk. Reads validate everything
(:func:`kvgate.core.cache.chunk_format.read_chunk`) and may run on any thread.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional

from kvgate.core.cache.chunk_format import BadChunk, chunk_file_size, read_chunk
from kvgate.core.cache.namespace import chain_root
from kvgate.core.cache.ssd_records import SnapshotRecord


class ChunkFiles:
    def __init__(self, root: Path, bytes_per_token: Optional[int]):
        self.root, self.bytes_per_token = Path(root), bytes_per_token
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: bytes) -> Path:
        text = key.hex()
        return self.root / text[:2] / f"{text}.kvc"

    def expected_size(self, token_count: int) -> Optional[int]:
        if self.bytes_per_token is None:
            return None
        return chunk_file_size(token_count, token_count * self.bytes_per_token)

    def size_problem(self, key: bytes, token_count: int) -> str:
        """Why the chunk file is unusable (missing, wrong size), or ``""``."""
        try:
            size = self.path(key).stat().st_size
        except OSError:
            return "missing"
        expected = self.expected_size(token_count)
        return f"{size} bytes, expected {expected}" if expected is not None and size != expected else ""

    def write(self, key: bytes, data: bytes) -> Path:
        path = self.path(key)
        write_durably(path, data)
        return path.parent

    def remove(self, key: bytes) -> None:
        self.path(key).unlink(missing_ok=True)

    def strays(self, keep: Iterable[bytes]) -> list[Path]:
        """Temporary files and chunk files whose key is not in ``keep``."""
        wanted = set(keep)
        return [p for p in self.root.glob("*/*") if chunk_key_of(p.name) not in wanted]

    def read(self, record: SnapshotRecord, chunk_count: int) -> list[tuple[list[int], bytes]]:
        """Validated ``(tokens, payload)`` of the first ``chunk_count`` chunks; raises BadChunk."""
        namespace_digest = previous = chain_root(record.namespace)
        out = []
        for index in range(chunk_count):
            key = record.chunks[index]
            start, end = record.chunk_span(index)
            try:
                with open(self.path(key), "rb") as handle:
                    out.append(read_chunk(
                        handle, os.fstat(handle.fileno()).st_size, namespace_digest=namespace_digest, key=key,
                        previous_key=previous, expected_tokens=record.tokens[start:end],
                        bytes_per_token=self.bytes_per_token, max_tokens=record.chunk_tokens))
            except OSError as exc:
                error = BadChunk(f"chunk {index} unreadable: {exc}")
                error.key = key
                raise error from None
            except BadChunk as exc:
                exc.key = key
                raise
            previous = key
        return out


def chunk_key_of(name: str) -> Optional[bytes]:
    if not (name.endswith(".kvc") and len(name) == 68):
        return None
    try:
        return bytes.fromhex(name[:64])
    except ValueError:
        return None


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temporary file, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.tmp{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(temporary, path)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
