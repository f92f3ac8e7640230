"""Chunk files on disk: ``<root>/<2 hex>/<64 hex chunk key>.kvc``, written atomically and durably.

A chunk is written to a temporary name, fsynced and renamed; the caller fsyncs the directories
(:func:`fsync_directory`) before anything names the chunk. Reads validate everything
(:func:`kvgate.plugins.cache_ssd.chunk_format.read_chunk`) and may run on any thread.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Iterable, Optional

from kvgate.core.cache.namespace import chain_root
from kvgate.core.cache.snapshot import BadChunk
from kvgate.plugins.cache_ssd.chunk_format import format_digest, read_chunk, read_header
from kvgate.plugins.cache_ssd.records import SnapshotRecord


class ChunkFiles:
    def __init__(self, root: Path, state_format: Optional[str]):
        self.root, self.state_format = Path(root), state_format
        self.digest = format_digest(state_format) if state_format is not None else None
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: bytes) -> Path:
        text = key.hex()
        return self.root / text[:2] / f"{text}.kvc"

    def header_problem(self, key: bytes, token_count: int) -> str:
        """Why the chunk file is unusable (missing, stale, wrong size or count), or ``""``;
        reads the header only."""
        try:
            with open(self.path(key), "rb") as handle:
                read_header(handle, os.fstat(handle.fileno()).st_size, expected_count=token_count,
                            digest=self.digest, max_tokens=token_count)
        except OSError:
            return "missing"
        except BadChunk as exc:
            return str(exc)
        return ""

    def write(self, key: bytes, data: bytes) -> Path:
        path = self.path(key)
        write_durably(path, data)
        return path.parent

    def remove(self, key: bytes) -> None:
        remove_path(self.path(key))

    def strays(self, keep: Iterable[bytes], older_than: float = float("inf")) -> list[Path]:
        """Temporary files and chunk files whose key is not in ``keep``, last modified before
        ``older_than`` (a time: another worker's files being written are younger)."""
        wanted, found = set(keep), []
        for path in self.root.glob("*/*"):
            try:
                young = path.stat().st_mtime >= older_than
            except OSError:  # gone meanwhile
                continue
            if not young and chunk_key_of(path.name) not in wanted:
                found.append(path)
        return found

    def size(self, key: bytes) -> int:
        try:
            return self.path(key).stat().st_size
        except OSError:
            return 0

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
                        digest=self.digest, max_tokens=record.chunk_tokens))
            except OSError as exc:
                error = BadChunk(f"chunk {index} unreadable: {exc}")
                # a missing file is no damage to remove: on a shared store, another worker's drop
                error.key = None if isinstance(exc, FileNotFoundError) else key
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


def remove_path(path: Path) -> None:
    """Delete what is at ``path``: a file, or a directory that damage left where a file belongs."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temporary file, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.tmp{os.getpid()}-{secrets.token_hex(4)}")  # unique across hosts
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
