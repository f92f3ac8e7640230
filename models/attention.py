"""Prefill attention through torch's SDPA, and when to run it in fp32."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

FP32_ATTENTION_KEYS = 2048


def fp32_attention_keys(device: torch.device, dtype: torch.dtype) -> Optional[int]:
    """From how many keys bf16 prefill attention should run in fp32, or None for never.

    Measured on AVX-512 without AMX: torch's CPU flash kernel is 4-6 % faster on fp32 inputs than
    on bf16 from ~3,000 keys on (2-3 % of a whole 8,000-token prefill), about even at 2,048 and
    slower below. With AMX the kernel runs bf16 natively, so it is left alone there.
    """
    if device.type != "cpu" or dtype != torch.bfloat16 or _cpu_has_amx():
        return None
    return FP32_ATTENTION_KEYS


def _cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            return any(line.startswith("flags") and " amx_bf16" in line for line in cpuinfo)
    except OSError:
        return False


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: Optional[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """Attention of q [n, heads, dim] over k, v [keys, kv_heads, dim], computed in ``dtype`` and
    returned in q's; causal unless ``mask`` (additive, in ``dtype``) is given."""
    heads_first = [t.transpose(0, 1)[None].to(dtype) for t in (q, k, v)]
    # 4-d inputs: 3-d ones miss the CPU flash kernel
    attn = F.scaled_dot_product_attention(*heads_first, attn_mask=mask, is_causal=mask is None,
                                          enable_gqa=True)
    return attn[0].transpose(0, 1).to(q.dtype)
