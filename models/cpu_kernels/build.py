"""Compile a kernel's C source with the machine's C compiler, once, and load it with ctypes.

The shared object is cached under ``$KVGATE_KERNEL_CACHE`` (default ``~/.cache/kvgate/kernels``),
named by a hash of the source, the flags and the compiler's version, and written to a temporary
name first so that processes building at once never load half a file. Loaded after torch, the
object's OpenMP calls run on torch's own OpenMP runtime (the process already holds a
``libgomp.so.1``), so its threads are torch's threads. Anything that fails (no compiler, a CPU
without the instructions, a read-only home) gives None and the caller keeps torch's kernels.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Optional, TypeVar

log = logging.getLogger("kvgate.kernels")
Kernel = TypeVar("Kernel")
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-fPIC", "-shared")
REQUIRED_CPU_FLAGS = ("avx2", "fma")
AVX512_FLAGS = (*FLAGS, "-mavx512f")  # for a source with an AVX-512 path beside its AVX2 one


def cache_dir() -> Path:
    return Path(os.environ.get("KVGATE_KERNEL_CACHE") or Path.home() / ".cache" / "kvgate" / "kernels")


def cpu_has(flags: tuple[str, ...]) -> bool:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    line = next((line for line in info.splitlines() if line.startswith("flags")), "")
    return set(flags) <= set(line.split(":", 1)[-1].split())


def _compiler_version(compiler: str) -> str:
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.lru_cache(maxsize=None)
def load(source_name: str, flags: tuple[str, ...] = FLAGS) -> Optional[ctypes.CDLL]:
    """The compiled ``source_name`` (a C file beside this module, built with ``flags``), or None
    where it cannot be had."""
    import torch  # noqa: F401  (torch's OpenMP runtime must be loaded before the object)

    compiler = shutil.which(os.environ.get("CC", "gcc"))
    if compiler is None or not cpu_has(REQUIRED_CPU_FLAGS):
        log.info("kernel %s not built: %s", source_name, "no C compiler" if compiler is None else "CPU lacks AVX2/FMA")
        return None
    here = Path(__file__).parent
    sources = [here / source_name, *sorted(here.glob("*.h"))]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources) + " ".join(flags).encode()
                            + _compiler_version(compiler).encode()).hexdigest()[:16]
    try:
        target = cache_dir() / f"{Path(source_name).stem}-{digest}.so"
        if not target.exists():
            _compile(compiler, here / source_name, target, flags)
        return ctypes.CDLL(str(target))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:  # RuntimeError: no home directory
        log.warning("kernel %s not built (%s); torch's kernels are used", source_name, exc)
        return None


def _compile(compiler: str, source: Path, target: Path, flags: tuple[str, ...]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([compiler, *flags, "-o", partial, str(source)], check=True, capture_output=True, timeout=300)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def checked_kernel(source_name: str, make: Callable[[ctypes.CDLL], Kernel],
                   same_as_torch: Callable[[Kernel], bool], flags: tuple[str, ...] = FLAGS) -> Optional[Kernel]:
    """``make(source compiled with flags)`` where it computes what torch computes bit for bit here, else None."""
    lib = load(source_name, flags)
    if lib is None:
        return None
    kernel = make(lib)
    if not same_as_torch(kernel):
        log.info("kernel %s differs from torch's on this CPU; torch's kernel is used", source_name)
        return None
    return kernel
