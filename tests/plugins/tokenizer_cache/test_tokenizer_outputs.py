"""Resent outputs keep their sampled ids (plugins/tokenizer_cache/outputs.py), with the real SmolLM2 tokenizer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig
from kvgate.plugins.tokenizer_cache.outputs import OutputIdsRegistry

from tests.plugins.tokenizer_cache.services import cached_service

REUSE = TokenizerCacheConfig(reuse_output_ids=True)
HISTORY = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nName a road.<|im_end|>\n<|im_start|>assistant\n"
FOLLOW_UP = "<|im_end|>\n<|im_start|>user\nAnother one.<|im_end|>\n<|im_start|>assistant\n"


def sampled_winding(tokenizer) -> list[int]:
    """' Wind' + 'ing' + ' road', then <|im_end|>: the canonical split of ' Winding' is ' W' + 'inding'."""
    return [tokenizer.token_to_id(piece) for piece in ("ĠWind", "ing", "Ġroad", "<|im_end|>")]


def metric(registry: CollectorRegistry, name: str) -> float:
    return registry.get_sample_value(name) or 0.0


def test_a_resent_output_is_tokenized_as_sampled(smollm2_tokenizer):
    registry = CollectorRegistry()
    service = cached_service(smollm2_tokenizer, REUSE, registry=registry)
    prompt = service.encode(HISTORY)
    output = sampled_winding(smollm2_tokenizer)
    resent = HISTORY + " Winding road" + FOLLOW_UP
    canonical = service.encode(resent)
    assert canonical[: len(prompt) + len(output) - 1] != prompt + output[:-1]  # the fork being fixed
    assert service.register_output("ns-a", prompt, output)
    ids = service.encode_prompt(resent, "ns-a")
    assert ids[: len(prompt) + len(output)] == prompt + output
    assert ids[len(prompt) + len(output):] == service.encode(FOLLOW_UP)[1:]
    assert service.decode(ids) == resent
    assert metric(registry, "kvgate_tokenizer_output_ids_reused_total") == 1
    header = len(prompt) - prompt.index(smollm2_tokenizer.token_to_id("<|im_start|>"), len(prompt) - 4) - 1
    assert metric(registry, "kvgate_tokenizer_output_ids_reused_tokens_total") == header + 3  # 'assistant\n' + body


def test_other_namespaces_and_edited_text_are_tokenized_canonically(smollm2_tokenizer):
    registry = CollectorRegistry()
    service = cached_service(smollm2_tokenizer, REUSE, registry=registry)
    service.register_output("tenant-a", service.encode(HISTORY), sampled_winding(smollm2_tokenizer))
    resent = HISTORY + " Winding road" + FOLLOW_UP
    assert service.encode_prompt(resent, "tenant-b") == service.encode_uncached(resent)
    edited = HISTORY + " Winding roads" + FOLLOW_UP
    assert service.encode_prompt(edited, "tenant-a") == service.encode_uncached(edited)
    assert metric(registry, "kvgate_tokenizer_output_ids_reused_total") == 0


def test_outputs_that_cannot_be_one_run_are_not_registered(smollm2_tokenizer):
    service = cached_service(smollm2_tokenizer, REUSE)
    prompt = service.encode(HISTORY)
    im_start = smollm2_tokenizer.token_to_id("<|im_start|>")
    assert not service.register_output("ns", prompt, [im_start])  # nothing but a boundary token
    assert not service.register_output("ns", prompt, [6234, im_start, 274])  # a boundary inside
    assert service.cache_stats()["outputs"]["entries"] == 0


def test_registry_is_bounded_by_entries_and_bytes():
    registry = OutputIdsRegistry(max_entries=2, max_bytes=1000)
    for n in range(3):
        registry.add("ns", f"text {n}", [n])
    assert len(registry) == 2 and registry.get("ns", "text 0") is None and registry.get("ns", "text 2") == [2]
    registry.add("other", "x" * 990, [1, 2])  # 998 bytes: the older entries go
    assert len(registry) == 1 and not registry.holds("ns") and registry.holds("other")
    registry.add("ns", "y" * 2000, [1])  # larger than the whole budget: not kept
    assert not registry.holds("ns") and registry.used_bytes == 998


def test_one_namespace_cannot_push_out_the_others():
    registry = OutputIdsRegistry(max_entries=10, max_per_namespace=2)
    registry.add("quiet", "mine", [7])
    for n in range(5):
        registry.add("busy", f"text {n}", [n])
    assert registry.get("quiet", "mine") == [7] and len(registry) == 3
    assert registry.get("busy", "text 2") is None and registry.get("busy", "text 4") == [4]


def test_outputs_are_not_reused_unless_the_config_asks(smollm2_tokenizer):
    service = cached_service(smollm2_tokenizer, TokenizerCacheConfig(reuse_output_ids=False))
    prompt = service.encode(HISTORY)
    assert not service.register_output("ns", prompt, service.encode("Winding road"))
