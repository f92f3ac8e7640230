"""The runtime registry: each runtime plugin declares the architectures it loads, and the host
chooses by those declarations alone (a third-party runtime for a new architecture included)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from kvgate.core.cli import build_cli
from kvgate.core.config import Config, ModelConfig
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_loading import load_runtime
from kvgate.core.loading.model_runtimes import RuntimeSpec, choose_runtime, collect_runtimes
from kvgate.core.loading.model_sources import default_model_path, read_model_source
from kvgate.core.plugins import DuplicateName, build_plugin_manager
from kvgate.core.runtime import ModelSource
from kvgate.models import embedded, formats
from kvgate.models.llama import plugin as llama_plugin
from tests.models.tiny_models import reference_logits

BUILT_IN = [("llama", llama_plugin), ("model_formats", formats), ("embedded_model", embedded)]
PROMPT = [5, 17, 3, 88, 42, 7, 61, 29]


def manager(*extra):
    return build_plugin_manager(load_entry_points=False, extra_plugins=[*BUILT_IN, *extra])


def plugin(hook_name, name, value):
    class Plugin:
        pass

    def impl(register):
        register(name, value)

    impl.__name__ = hook_name
    setattr(Plugin, hook_name, staticmethod(hookimpl(impl)))
    return Plugin()


def test_llama_plugin_declares_llama_and_qwen2_for_hf_and_gguf():
    runtimes = collect_runtimes(manager())
    spec = runtimes.get("llama")
    assert set(spec.hf_model_types) == {"llama", "qwen2"}
    assert set(spec.hf_architectures) == {"LlamaForCausalLM", "Qwen2ForCausalLM"}
    assert set(spec.gguf_architectures) == {"llama", "qwen2"}
    assert spec.load is llama_plugin.load
    for source in [ModelSource("m", "hf", "qwen2"), ModelSource("m", "gguf", "llama"),
                   ModelSource("m", "hf", "", ("Qwen2ForCausalLM",))]:
        assert choose_runtime(runtimes, source) == "llama"


def test_unknown_architecture_is_a_one_line_error(tiny_models, tmp_path):
    runtimes = collect_runtimes(manager())
    with pytest.raises(ConfigError, match=r"no runtime for gguf architecture 'deepseek2' \(registered: llama \[") as error:
        choose_runtime(runtimes, ModelSource("m.gguf", "gguf", "deepseek2"))
    assert "\n" not in str(error.value) and "gguf: llama, qwen2" in str(error.value)
    gguf_only = plugin("register_model_runtimes", "gguf_only", RuntimeSpec(load=llama_plugin.load,
                                                                          gguf_architectures=("llama",)))
    only = collect_runtimes(build_plugin_manager(load_entry_points=False, extra_plugins=[("gguf_only", gguf_only)]))
    with pytest.raises(ConfigError, match="no runtime for hf architecture 'llama'"):  # a GGUF name is not an HF one
        choose_runtime(only, ModelSource("m", "hf", "llama"))
    directory = renamed_tiny(tiny_models, tmp_path / "mystery", "mystery", "MysteryForCausalLM")
    with pytest.raises(ConfigError, match="no runtime for hf architecture 'mystery', 'MysteryForCausalLM'"):
        load_runtime(Config(state_dir=str(tmp_path / "state"), model=ModelConfig(path=str(directory))), manager())


def test_an_architecture_declared_by_two_runtimes_is_an_error():
    twin = plugin("register_model_runtimes", "twin", RuntimeSpec(load=llama_plugin.load, gguf_architectures=("qwen2",)))
    with pytest.raises(DuplicateName, match="gguf architecture 'qwen2' is declared by two model runtimes"):
        collect_runtimes(manager(("twin", twin)))
    other = plugin("register_model_runtimes", "other", RuntimeSpec(load=llama_plugin.load,
                                                                  hf_architectures=("OtherForCausalLM",)))
    with pytest.raises(ConfigError, match=r"loaded by several runtimes \(llama, other\)"):
        choose_runtime(collect_runtimes(manager(("other", other))), ModelSource("m", "hf", "llama", ["OtherForCausalLM"]))
    not_a_spec = plugin("register_model_runtimes", "old_style", llama_plugin.load)
    with pytest.raises(TypeError, match="not a RuntimeSpec"):
        collect_runtimes(manager(("old_style", not_a_spec)))


def renamed_tiny(tiny_models, target, model_type, class_name):
    """A copy of the tiny Llama directory whose config.json names another architecture."""
    source, _ = tiny_models["llama_gqa_tied"]
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config.update(model_type=model_type, architectures=[class_name])
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_a_third_party_runtime_is_chosen_for_its_architecture(tiny_models, tmp_path):
    seen = []

    def load_toy(source, model_config, engine_config, cache_dir):
        """A toy runtime: its format is a Llama directory under another name, loaded by the Llama loader."""
        seen.append((source.kind, source.architecture, source.architectures))
        converted = renamed_tiny(tiny_models, tmp_path / "converted", "llama", "LlamaForCausalLM")
        return llama_plugin.load(ModelSource(str(converted), "hf", "llama"), model_config, engine_config, cache_dir)

    toy = plugin("register_model_runtimes", "toy", RuntimeSpec(load=load_toy, hf_architectures=("ToyForCausalLM",)))
    directory = renamed_tiny(tiny_models, tmp_path / "toy", "toy", "ToyForCausalLM")
    config = Config(state_dir=str(tmp_path / "state"), model=ModelConfig(path=str(directory), dtype="fp32"))
    runtime = load_runtime(config, manager(("toy_runtime", toy)))
    assert seen == [("hf", "toy", ("ToyForCausalLM",))]
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    assert torch.allclose(logits, reference_logits(tiny_models["llama_gqa_tied"][1], PROMPT), atol=1e-4, rtol=0)


def test_sources_and_the_default_model_come_from_plugins(tmp_path):
    pm = manager()
    path = default_model_path(pm)
    assert path == embedded.embedded_gguf_path()
    assert read_model_source(pm, path) == ModelSource(path, "gguf", "llama")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match=r"in no registered model format \(registered: gguf \(model_formats\), hf"):
        read_model_source(pm, str(tmp_path / "notes.txt"))
    with pytest.raises(ConfigError, match="does not exist"):
        read_model_source(pm, str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="config.json is missing"):
        read_model_source(pm, str(tmp_path))
    second = plugin("register_default_models", "other", lambda: path)
    with pytest.raises(ConfigError, match="2 default models are registered"):
        default_model_path(manager(("other_default", second)))
    with pytest.raises(ConfigError, match="0 default models"):
        default_model_path(build_plugin_manager(load_entry_points=False))


def test_kvgate_plugins_lists_each_runtime_with_its_architectures():
    out = CliRunner().invoke(build_cli(), ["plugins", "--json", "--no-model"]).output
    report = json.loads(out)
    assert report["runtimes"]["llama"] == {"plugin": "llama", "architectures": {
        "hf": ["llama", "qwen2", "LlamaForCausalLM", "Qwen2ForCausalLM"], "gguf": ["llama", "qwen2"]}}
    assert report["registries"]["model format"] == {"gguf": "model_formats", "hf": "model_formats"}
