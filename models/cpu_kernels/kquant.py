"""kvgate's own matmul over GGUF blocks kept packed: ``y = x @ W.T``, W raw Q8_0 / Q4_0 / Q4_1 /
Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K blocks [N, row_bytes], x fp32 or bf16 [M, K], y fp32 [M, N] (``kquant.c``).

The arithmetic, the same in every variant and so the same bits on every CPU:

- each weight is dequantized to fp32 exactly as ggml and gguf-py's ``dequantize`` do it (same
  products and sums in the same order, nothing fused: ``(d * sc) * q - dmin * mn`` for Q4_K, and
  so on, see ``kquant_blocks.h``); bf16 x is widened to fp32, which is exact;
- for each output, 16 fp32 lanes start at 0 and lane l takes ``fma(x[k], w[k], lane)`` for
  k = l, l + 16, ... in order of k;
- the lanes are added as a fixed tree: l + (l + 8), then + 4, + 2, + 1.

Nothing depends on M, on a row's place in the call or on the thread count: row i of the output
depends only on x[i] and W. The variants differ only in the registers that hold the 16 lanes:
``avx512`` (one register; ``avx512vnni`` is the same built with VNNI for q8a below), ``avx2``
(two), ``scalar`` (plain floats with fmaf, the reference the tests compare against). The variant is named in :attr:`KQuantKernel.fingerprint`.

A second arithmetic, ``kquant1-q8a`` (``kquant_kernel(arithmetic="q8a")``, not a default), for every
type above, as llama.cpp's int8-activation dot products:

- each x row is quantized per 32 values, as ggml's ``quantize_row_q8_1_ref``: ``amax`` the largest
  ``|x|``, ``dx = amax / 127``, ``q = roundf(x * (dx ? 1 / dx : 0))`` (half away from zero, clamped
  to +-127), ``sx = dx * sum(q)``; each a single fp32 operation;
- a weight block of 32 (for the K-quants: a sub-block of 32 of a super-block) gives integers ``w``
  (Q8_0 ``q``, Q4_0 ``q - 8``, Q5_0 ``q - 16``, Q6_K ``q - 32``, the others ``q``), a scale ``dw``
  (Q8_0 to Q5_1: ``d``; Q4_K / Q5_K: ``d * sc``; Q6_K: ``d * scale`` of the weights' group of 16)
  and a min ``mw`` (Q4_1 / Q5_1 ``m``; Q4_K / Q5_K ``-(dmin * mn)``; else none), and 8 exact int32
  lane sums, lane j = ``sum(w[i] * q[i] for i in 4j..4j+3)``;
- 8 fp32 lanes start at 0; block by block, in order, lane j = ``fma(dw * dx, float(sum j), lane j)``
  (``dw * dx`` one fp32 product);
- y = the lanes added as a tree (l + (l + 4), + 2, + 1), then, where the type has a min, plus
  ``mins``, which starts at 0 and takes ``fma(mw, sx, mins)`` block by block.

Integer sums are exact, so ``avx512vnni`` (vpdpbusd, two outputs a register where several x rows
share the weights), ``avx2`` (maddubs) and ``scalar`` agree by construction; row i still depends
only on x[i] and W. Its error against the exact product comes from x's rounding: at most
``sum(|w| * dx / 2)`` over the weights, plus fp32 rounding (tests/models/test_kquant_q8a.py).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from typing import Optional

import torch

from kvgate.models.cpu_kernels.build import cpu_has, load

log = logging.getLogger("kvgate.kernels")
ARITHMETIC = "kquant1"
ARITHMETICS = {"fp32": (ARITHMETIC, "kquant_matmul"), "q8a": (f"{ARITHMETIC}-q8a", "kquant_q8a_matmul")}
TYPES = {"Q8_0": (0, 32, 34), "Q4_0": (1, 32, 18), "Q4_1": (2, 32, 20),
         "Q4_K": (3, 256, 144), "Q5_K": (4, 256, 176), "Q6_K": (5, 256, 210),
         "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24)}  # code, weights, bytes a block
COMMON_FLAGS = ("-O3", "-ffp-contract=off",  # contract=off: no product fused into a sum unless written as fma
                "-fopenmp", "-fPIC", "-shared")
Q8A_TYPES = tuple(TYPES)  # every type: the K-quants' 32-weight sub-blocks are taken as blocks
VARIANTS = {  # name: (CPU flags it needs, compiler flags), best first
    "avx512": (("avx512f", "avx512bw", "avx2", "fma", "f16c"),
               ("-mavx512f", "-mavx512bw", "-mavx2", "-mfma", "-mf16c", "-mprefer-vector-width=512")),
    "avx512vnni": (("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx2", "fma", "f16c"),
                   ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mavx2", "-mfma", "-mf16c",
                    "-mprefer-vector-width=512")),
    # amx: avx512vnni plus AMX tiles, for the attention (paged_attention_amx.h); its kquant bits are avx512's
    "amx": (("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "avx2", "fma",
             "f16c"),
            ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mavx512bf16", "-mamx-tile", "-mamx-bf16",
             "-mavx2", "-mfma", "-mf16c", "-mprefer-vector-width=512")),
    "avx2": (("avx2", "fma", "f16c"), ("-mavx2", "-mfma", "-mf16c")),
    "scalar": ((), ()),
}
VARIANT_ENV = "KVGATE_KQUANT_VARIANT"  # names the variant to use instead of the CPU's best
BEST_FIRST = {"fp32": ("avx512", "avx2"), "q8a": ("avx512vnni", "avx2"),  # what kquant_kernel picks from
              "attention": ("amx", "avx512vnni", "avx512", "avx2")}  # paged attention and the native layer


class KQuantKernel:
    """One compiled variant of ``kquant.c`` in one arithmetic: :attr:`variant` its name,
    :attr:`fingerprint` what state computed with it carries (``/kquant1-avx512``,
    ``/kquant1-q8a-avx2``: the arithmetic's name and version, and the variant)."""

    def __init__(self, lib: ctypes.CDLL, variant: str, arithmetic: str = "fp32"):
        self.variant, self.arithmetic = variant, arithmetic
        name, function = ARITHMETICS[arithmetic]
        self.fingerprint = f"/{name}-{variant}"
        self.types = Q8A_TYPES if arithmetic == "q8a" else tuple(TYPES)
        self.function = getattr(lib, function)
        self.function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 5
        self.function.restype = ctypes.c_int

    def takes(self, x: torch.Tensor, type_name: str) -> bool:
        """Whether :meth:`matmul` computes ``x`` against weights of ``type_name`` (else the caller's fallback)."""
        return (type_name in self.types and x.dim() == 2 and x.device.type == "cpu"
                and x.dtype in (torch.float32, torch.bfloat16) and x.shape[1] > 0
                and x.shape[1] % TYPES[type_name][1] == 0)

    def matmul(self, x: torch.Tensor, raw: torch.Tensor, type_name: str, rows_out: int) -> torch.Tensor:
        """fp32 [M, rows_out] = x @ W.T, W the ``rows_out`` rows of raw GGUF blocks in ``raw`` (uint8
        [rows_out, row_bytes], contiguous); x is copied where it is not contiguous fp32. ValueError
        for anything else. Threads: torch's count."""
        if not self.takes(x, type_name):
            raise ValueError(f"kquant {self.arithmetic} takes {'/'.join(self.types)} weights and fp32/bf16 [M, K] "
                             f"on CPU, K a multiple of the {type_name} block")
        code, weights, block_bytes = TYPES[type_name]
        row_bytes = x.shape[1] // weights * block_bytes
        if (raw.dtype != torch.uint8 or tuple(raw.shape) != (rows_out, row_bytes) or not raw.is_contiguous()
                or raw.device.type != "cpu"):
            raise ValueError(f"{type_name} weight must be contiguous uint8 [{rows_out}, {row_bytes}] on CPU, got "
                             f"{raw.dtype} {list(raw.shape)} on {raw.device.type}")
        x = x.to(torch.float32).contiguous()
        out = torch.empty(x.shape[0], rows_out, dtype=torch.float32)
        if self.function(x.data_ptr(), raw.data_ptr(), out.data_ptr(), x.shape[0], rows_out, x.shape[1],
                         code, torch.get_num_threads()):
            raise MemoryError("kquant: no memory for a working buffer")
        return out


def close_to_float(kernel: KQuantKernel) -> bool:
    """Within fp32 rounding (q8a: within 1% of ``|x| @ |W|.T``) of ``x @ W.T`` on random Q8_0 weights
    (a sanity check of the build)."""
    generator = torch.Generator().manual_seed(29)
    scales = (torch.rand(24, 2, 1, generator=generator) / 64).half()
    q = torch.randint(-127, 128, (24, 2, 32), dtype=torch.int8, generator=generator)
    raw = torch.cat([scales.view(torch.uint8).view(24, 2, 2), q.view(torch.uint8)], dim=-1).reshape(24, 68)
    x = torch.randn(3, 64, generator=generator)
    w = (q.float() * scales.float()).reshape(24, 64)
    tolerance = 1e-5 if kernel.arithmetic == "fp32" else 0.01 * (x.abs() @ w.abs().T) + 1e-5
    return bool(((kernel.matmul(x, raw, "Q8_0", 24) - x @ w.T).abs() <= tolerance).all())


def variant_library(source: str, variant: str, label: str, extra_flags: tuple[str, ...] = ()) -> Optional[ctypes.CDLL]:
    """``source`` compiled as ``variant`` (a key of :data:`VARIANTS`), or None where there is no such
    variant or the CPU, the compiler or the cache refuse it (``label`` names the kernel in the log)."""
    if variant not in VARIANTS:
        log.info("%s not built: no variant %r (known: %s)", label, variant, ", ".join(VARIANTS))
        return None
    cpu_flags, compiler_flags = VARIANTS[variant]
    if not cpu_has(cpu_flags):
        log.info("%s not built: CPU lacks %s for variant %s", label, "/".join(cpu_flags), variant)
        return None
    return load(source, (*COMMON_FLAGS, *compiler_flags, *extra_flags))


@functools.lru_cache(maxsize=None)
def kquant_variant(variant: str, arithmetic: str = "fp32") -> Optional[KQuantKernel]:
    """``variant`` compiled and checked in ``arithmetic`` (a key of :data:`ARITHMETICS`), or None where
    the CPU, the compiler or the cache refuse it."""
    lib = variant_library("kquant.c", variant, "kquant kernel")
    if lib is None:
        return None
    kernel = KQuantKernel(lib, variant, arithmetic)
    if not close_to_float(kernel):
        log.warning("kquant kernel %s gives wrong results on this CPU; not used", variant)
        return None
    return kernel


def best_variant(best_first: tuple[str, ...]) -> Optional[str]:
    """The first of ``best_first`` (keys of :data:`VARIANTS`) this CPU runs, else None."""
    best = next((name for name in best_first if cpu_has(VARIANTS[name][0])), None)
    if best is None:
        log.info("kvgate's kernels not built: CPU lacks AVX2/FMA")
    return best


def chosen_variant(arithmetic: str = "fp32") -> Optional[str]:
    """The variant named by ``$KVGATE_KQUANT_VARIANT``, else the best one this CPU runs in ``arithmetic``."""
    return os.environ.get(VARIANT_ENV) or best_variant(BEST_FIRST[arithmetic])


@functools.lru_cache(maxsize=None)
def kquant_kernel(arithmetic: str = "fp32") -> Optional[KQuantKernel]:
    """In ``arithmetic`` ("fp32", the default, or "q8a"): the variant named by
    ``$KVGATE_KQUANT_VARIANT``, else the best one this CPU runs, else None."""
    if arithmetic not in ARITHMETICS:
        raise ValueError(f"no kquant arithmetic {arithmetic!r} (known: {', '.join(ARITHMETICS)})")
    variant = chosen_variant(arithmetic)
    return None if variant is None else kquant_variant(variant, arithmetic)
