"""bench/llama_quantize.py and the build it shares with bench/llama_server.py, without building
llama.cpp: which file a ``--gguf`` names, where a Q4_K_M file is cached, what one build makes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import llama_quantize  # noqa: E402: bench/ is no package
import llama_server  # noqa: E402


def test_one_build_makes_both_peers_and_its_stamp_names_them():
    assert llama_server.TARGETS == ["llama-server", "llama-quantize"]
    assert llama_server.build_stamp()["targets"] == llama_server.TARGETS
    assert "-DGGML_NATIVE=OFF" in llama_server.build_stamp()["cmake"]


def test_a_gguf_name_resolves_to_the_embedded_file_or_a_path(tmp_path):
    from models.embedded import embedded_gguf_path

    assert llama_quantize.resolve_gguf("q4_1") == llama_quantize.resolve_gguf("") == embedded_gguf_path()
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    assert llama_quantize.resolve_gguf(str(other)) == str(other)
    with pytest.raises(SystemExit, match="neither q4_1, q4_k_m nor a GGUF file"):
        llama_quantize.resolve_gguf("q5_k_s")


def test_the_q4_k_m_file_is_cached_by_the_source_files_hash(tmp_path):
    first, second = tmp_path / "a.gguf", tmp_path / "b.gguf"
    first.write_bytes(b"GGUF one")
    second.write_bytes(b"GGUF two")
    names = {llama_quantize.q4_k_m_path(path).name for path in (first, second)}
    assert len(names) == 2 and all(name.endswith(".Q4_K_M.gguf") for name in names)
    assert llama_quantize.q4_k_m_path(first) == llama_quantize.q4_k_m_path(first)
    assert llama_quantize.q4_k_m_path(first).parent == llama_quantize.QUANTIZED_DIR
    assert llama_quantize.cached_q4_k_m(first) is None  # not made: nothing is built to answer


def test_a_flag_set_again_replaces_the_default_and_its_value():
    args = llama_server.merged_args(["-np", "8", "-t", "4", "-tb", "4"])
    assert args.count("-t") == args.count("-tb") == 1 and args[args.index("-t") + 1] == "4"
    assert args[:2] == ["-c", "8192"] and "--jinja" in args and args[-6:] == ["-np", "8", "-t", "4", "-tb", "4"]
