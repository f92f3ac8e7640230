"""A schema worker process starts without importing torch (issue 31): it imports the worker's
module and unpickles its preparer with the real llguidance backend, none of which needs torch, so a
spawn costs about a second less (``import torch`` alone took ~1.5 s here)."""

from __future__ import annotations

import functools
import subprocess
import sys

from kvgate.plugins.grammar_llguidance.backend import LlgBackend
from kvgate.plugins.json_schema.prepare import JsonSchemaPreparer
from kvgate.plugins.json_schema.worker import SchemaWorkers

NO_TORCH = "import sys; assert 'torch' not in sys.modules, 'torch was imported'; print('no torch')"


def fresh_python(code: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, timeout=300)


def test_importing_the_worker_module_does_not_import_torch():
    done = fresh_python("import kvgate.plugins.json_schema.worker_process; " + NO_TORCH)
    assert done.returncode == 0 and b"no torch" in done.stdout, done.stderr.decode()[-2000:]


def test_a_worker_builds_its_preparer_without_torch(smol_info):
    """What ``serve`` does first, in a fresh interpreter: unpickle the setup and build the preparer."""
    setup = SchemaWorkers(functools.partial(JsonSchemaPreparer, LlgBackend(smol_info), workers=False)).setup
    assert setup is not None
    code = ("import pickle, sys; from kvgate.plugins.json_schema.worker_process import serve; "
            "preparer = pickle.loads(sys.stdin.buffer.read())(); "
            "assert preparer.prepare_here({'type': 'string'}, 'response_format', 'response_format'); " + NO_TORCH)
    done = fresh_python(code, setup)
    assert done.returncode == 0 and b"no torch" in done.stdout, done.stderr.decode()[-2000:]


def test_the_fence_package_still_exports_its_api_on_demand():
    done = fresh_python("import kvgate.core.fence as f; assert f.FenceRequestError and f.tokenizer_info; "
                        "import sys; assert 'torch' not in sys.modules; f.build_request_fence; "
                        "assert 'torch' in sys.modules; "
                        "print(sorted(n for n in f.__all__ if not hasattr(f, n)) or 'all')")
    assert done.returncode == 0 and done.stdout.strip() == b"all", done.stderr.decode()[-2000:]
