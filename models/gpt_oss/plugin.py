"""Plugin: the gpt-oss runtime (``gpt_oss`` / ``GptOssForCausalLM``; MXFP4 experts dequantized at
load). Its architecture name, ``gpt_oss``, is what the ``harmony`` dialect claims (dialect choice:
:mod:`kvgate.core.loading.dialect_choice`), and that dialect names the ``harmony`` chat format."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a gpt-oss model (:data:`~kvgate.models.gpt_oss.runtime.GPT_OSS`) from a Hugging Face directory."""
    from kvgate.models.gpt_oss.runtime import GPT_OSS
    from kvgate.models.loading import load_runtime

    return load_runtime(source, model_config, engine_config, cache_dir, GPT_OSS)


def preview(source):
    """The source's architecture and chat template, no tensors (for ``kvgate plugins``)."""
    import attrs

    from kvgate.core.loading.model_runtimes import PreviewInfo
    from kvgate.models.llama.preview import preview_source

    return attrs.evolve(preview_source(source), info=PreviewInfo("gpt_oss"))


SPEC = RuntimeSpec(load=load, hf_model_types=("gpt_oss",), hf_architectures=("GptOssForCausalLM",),
                   gguf_architectures=(), preview=preview)


@hookimpl
def register_model_runtimes(register):
    register("gpt_oss", SPEC)
