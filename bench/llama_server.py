"""llama.cpp's own ``llama-server`` as a benchmark peer: built once from source, launched on demand.

``llama_server_binary()`` returns the path of a built ``llama-server``. The first call downloads the
llama-cpp-python sdist (its ``vendor/llama.cpp`` is the source), configures it with the flags from
reference/peers.md (no native CPU detection: a native build picks AMX and dies with
``Illegal instruction``), each instruction set switched off when /proc/cpuinfo lacks it (some of
these machines are AMD EPYCs without AVX-512 or AVX-VNNI, where the full list dies the same way),
and builds the ``llama-server`` and ``llama-quantize`` targets (TARGETS) with -j2 (10-11 minutes on 2
cores). The binaries and the shared libraries they load are kept in ``bench/.peer/llama-server/bin``
with a stamp of the version, flags and targets; a changed stamp rebuilds. ``peer_binary(target)``
returns either binary (``bench/llama_quantize.py`` uses the quantizer).

``LlamaServer`` starts it on a free 127.0.0.1 port on a GGUF (the embedded SmolLM2 by default),
waits for ``GET /health`` to answer 200 and stops the process it started on exit:

    with LlamaServer(["-np", "8"]) as server:
        httpx.post(server.base_url + "/v1/chat/completions", json=...)

    python bench/llama_server.py            # build (if needed), start, send one chat request

llama-server runs with OpenMP's default wait policy, its best: its threads spin between ops.
``OMP_WAIT_POLICY=PASSIVE`` cuts its decode about 3x (issue 29: ~30 tok/s instead of ~95), so figures
taken with it flatter kvgate and are not to be reported. On a machine where other work holds a core,
``-t 2`` on 2 cores collapses instead (0.3 tok/s instead of ~45: the spinning threads wait for each
other): figures from a busy machine are not to be reported either; measure on a quiet one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Optional

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness import free_port  # noqa: E402

SDIST_VERSION = "0.3.36"
PEER_DIR = ROOT / "bench" / ".peer" / "llama-server"
BIN_DIR = PEER_DIR / "bin"
STAMP = PEER_DIR / "stamp.json"
# peers.md's instruction sets, each with the /proc/cpuinfo flags it needs
INSTRUCTION_SETS = {
    "GGML_AVX": ["avx"], "GGML_AVX2": ["avx2"], "GGML_FMA": ["fma"], "GGML_F16C": ["f16c"], "GGML_BMI2": ["bmi2"],
    "GGML_AVX_VNNI": ["avx_vnni"],
    "GGML_AVX512": ["avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"],
    "GGML_AVX512_VBMI": ["avx512vbmi"], "GGML_AVX512_VNNI": ["avx512_vnni"], "GGML_AVX512_BF16": ["avx512_bf16"],
}
BASE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
              "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF",
              "-DLLAMA_BUILD_EXAMPLES=OFF", "-DGGML_NATIVE=OFF"]
# one configure builds both peers: the server and the quantizer that makes its test files
TARGETS = ["llama-server", "llama-quantize"]
DEFAULT_ARGS = ["-c", "8192", "-t", "2", "-tb", "2", "--alias", "smollm2", "--jinja", "--no-webui"]


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {flag for needed in INSTRUCTION_SETS.values() for flag in needed}  # trust peers.md's list
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def cmake_flags() -> list[str]:
    have = cpu_flags()
    return BASE_FLAGS + [f"-D{option}={'ON' if have.issuperset(needed) else 'OFF'}"
                         for option, needed in INSTRUCTION_SETS.items()]


def build_stamp() -> dict:
    return {"llama-cpp-python": SDIST_VERSION, "cmake": cmake_flags(), "targets": TARGETS}


def llama_server_binary() -> Path:
    """The built llama-server, building it first when missing or built with other flags."""
    return peer_binary("llama-server")


def peer_binary(target: str) -> Path:
    """The built ``target`` (one of TARGETS), building all targets first when missing or stale."""
    binary = BIN_DIR / target
    built = all((BIN_DIR / name).exists() for name in TARGETS)
    if not (built and STAMP.exists() and json.loads(STAMP.read_text()) == build_stamp()):
        build()
    return binary


def peer_env(binary: Path) -> dict[str, str]:
    """The environment a built peer runs in: the build tree's rpath is gone with the build tree,
    the .so files sit beside the binary."""
    libraries = os.pathsep.join(filter(None, [str(binary.parent), os.environ.get("LD_LIBRARY_PATH")]))
    return {**os.environ, "LD_LIBRARY_PATH": libraries}


def llama_server_available() -> bool:
    """Whether llama-server is built or can be built now; says why not when it cannot."""
    try:
        llama_server_binary()
        return True
    except (OSError, subprocess.CalledProcessError, tarfile.TarError) as error:
        print(f"llama-server skipped: it could not be built ({error}); it needs cmake and a C++ compiler",
              flush=True)
        return False


def build() -> None:
    PEER_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=PEER_DIR) as tmp:
        source = unpacked_source(Path(tmp))
        build_dir = Path(tmp) / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        run(["cmake", "-S", str(source), "-B", str(build_dir), *generator, *cmake_flags()])
        run(["cmake", "--build", str(build_dir), "--target", *TARGETS, "-j2"])
        shutil.rmtree(BIN_DIR, ignore_errors=True)
        # build/bin holds the binary and, with BUILD_SHARED_LIBS, the libllama/libggml*.so it loads
        shutil.copytree(build_dir / "bin", BIN_DIR, symlinks=True)
    STAMP.write_text(json.dumps(build_stamp(), indent=1))


def downloaded_sdist() -> Path:
    """The llama-cpp-python sdist, downloaded once and kept for rebuilds."""
    folder = PEER_DIR / "sdist"
    sdist = folder / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
    if not sdist.exists():
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(folder),
             f"llama-cpp-python=={SDIST_VERSION}"])
    return sdist


def unpacked_source(tmp: Path) -> Path:
    with tarfile.open(downloaded_sdist()) as archive:
        archive.extractall(tmp, filter="data")
    return tmp / f"llama_cpp_python-{SDIST_VERSION}" / "vendor" / "llama.cpp"


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def merged_args(extra_args: list[str]) -> list[str]:
    """DEFAULT_ARGS less each flag (and its value) that ``extra_args`` sets again, then ``extra_args``."""
    kept, index = [], 0
    while index < len(DEFAULT_ARGS):
        has_value = index + 1 < len(DEFAULT_ARGS) and not DEFAULT_ARGS[index + 1].startswith("-")
        width = 2 if has_value else 1
        if DEFAULT_ARGS[index] not in extra_args:
            kept += DEFAULT_ARGS[index:index + width]
        index += width
    return kept + list(extra_args)


class LlamaServer:
    """One llama-server process on a free port; ``extra_args`` follow the peers.md defaults."""

    def __init__(self, extra_args: Optional[list[str]] = None, gguf: Optional[str] = None,
                 log_path: Optional[Path] = None, timeout: float = 300):
        from models.embedded import embedded_gguf_path

        self.args = merged_args(extra_args or [])
        self.gguf = gguf or embedded_gguf_path()
        self.log_path = Path(log_path or PEER_DIR / "server.log")
        self.timeout = timeout
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "LlamaServer":
        binary = llama_server_binary()
        env = peer_env(binary)
        cmd = [str(binary), "-m", self.gguf, "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.wait_healthy()
        return self

    def wait_healthy(self) -> None:
        deadline = time.time() + self.timeout
        while time.time() < deadline and self.proc.poll() is None:
            try:
                # /health answers 503 while the model loads
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        exited = self.proc.poll()
        self.stop()
        state = f"exited with {exited}" if exited is not None else f"not healthy after {self.timeout:.0f} s"
        raise RuntimeError(f"llama-server {state}; see {self.log_path}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def smoke() -> None:
    with LlamaServer(["-np", "1"]) as server:
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16,
                "temperature": 0}
        reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120).json()
        print(json.dumps({"content": reply["choices"][0]["message"]["content"], "usage": reply["usage"]}))


if __name__ == "__main__":
    smoke()
