"""Ways to damage a kvgate state directory on a real disk, for the disk-damage tests."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Callable, Iterator


def flip_bytes(path: Path, count: int, seed: int) -> None:
    """Invert ``count`` bytes of ``path`` at positions chosen by ``seed``."""
    data = bytearray(path.read_bytes())
    for index in random.Random(seed).sample(range(len(data)), count):
        data[index] ^= 0xFF
    path.write_bytes(bytes(data))


def first_failing_flip(database: Path, scratch: Path, raises: Callable[[Path], BaseException | None],
                       count: int = 300, seeds: int = 400) -> int:
    """The first seed whose ``count`` flipped bytes make ``raises(copy of the directory)`` return an
    exception (so the test reproduces a fault, not a lucky flip into unused pages)."""
    for seed in range(seeds):
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(database.parent, scratch)
        flip_bytes(scratch / database.name, count, seed)
        if raises(scratch) is not None:
            return seed
    raise AssertionError(f"no flip of {count} bytes in {seeds} seeds damages {database}")


def read_only_supported() -> bool:
    return os.geteuid() != 0 or shutil.which("chattr") is not None


@contextlib.contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    """Make directories unwritable: mode 0555, or, for root (whom modes do not stop), the immutable
    flag (``chattr +i``); restored afterwards so the test can clean up."""
    as_root = os.geteuid() == 0
    modes = {p: p.stat().st_mode for p in paths}
    try:
        for path in paths:
            if as_root:
                subprocess.run(["chattr", "+i", str(path)], check=True)
            else:
                path.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        yield
    finally:
        for path in paths:
            if as_root:
                subprocess.run(["chattr", "-i", str(path)], check=False)
            else:
                path.chmod(modes[path])
