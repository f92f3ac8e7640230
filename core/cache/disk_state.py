"""Opening on-disk state that may be damaged or unusable (a cache tier's store, the responses store).

Disk is untrusted at start as it is on every read. :func:`open_or_set_aside` runs ``open_state()``
(open, load and validate everything it needs at start) on a directory, and:

- the directory cannot be written (read-only file system, permissions, an immutable flag, a file
  where the directory should be): :class:`StateUnusable`, naming the path and the error; nothing
  on disk is touched, and the caller runs without that state (with a warning);
- anything else goes wrong while opening or validating (a corrupt database that raises from deep
  inside diskcache or SQLite, a directory where a file should be, ...): the directory is renamed
  aside to ``<name>.damaged-<time>-<pid>``, a warning names the exception, and ``open_state()``
  runs again on an empty directory. If that fails too: :class:`StateUnusable`.

Exceptions listed in ``passthrough`` (e.g. "in use by another process") are not damage: they
propagate unchanged.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Callable, TypeVar

log = logging.getLogger("kvgate.disk")
T = TypeVar("T")


class StateUnusable(RuntimeError):
    """On-disk state that can be neither used nor replaced by an empty one; run without it."""


def unwritable(root: Path) -> str:
    """Why ``root`` cannot hold writable state (``""`` when it can): creates it, then writes, syncs
    and removes a probe file in it."""
    probe = Path(root) / f".probe-{os.getpid()}"
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"kvgate")
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def set_aside(root: Path) -> Path:
    """Rename ``root`` aside (never deleted: an operator may want to look at it); returns the new path."""
    root = Path(root)
    aside = root.with_name(f"{root.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    os.replace(root, aside)
    return aside


def open_or_set_aside(root: Path, open_state: Callable[[], T], what: str,
                      passthrough: tuple[type[BaseException], ...] = ()) -> T:
    """``open_state()`` on ``root`` with the damage rules above."""
    problem = unwritable(root)
    if problem:
        raise StateUnusable(f"{what} directory {root} is not writable ({problem})")
    try:
        return open_state()
    except passthrough:
        raise
    except Exception as exc:  # any damage found while opening or validating the on-disk state
        reason = f"{type(exc).__name__}: {exc}"
    try:
        aside = set_aside(root)
        Path(root).mkdir(parents=True)
    except OSError as exc:
        raise StateUnusable(f"{what} at {root} is damaged ({reason}) and cannot be moved aside ({exc})") from None
    log.warning("%s at %s is damaged (%s); moved it to %s and started empty", what, root, reason, aside)
    try:
        return open_state()
    except passthrough:
        raise
    except Exception as exc:
        raise StateUnusable(f"{what} at {root} cannot be opened even empty ({type(exc).__name__}: {exc})") from None
