"""A whole Llama layer in one native call (``llama_layer.c``): the layouts it reads, and its loader.

The arithmetic is kvgate's own from end to end (the file's docstring lists it): an fp32 residual
stream, int8-activation matmuls on the GGUF blocks repacked at load (``q8i.h``, whose docstring
defines the arithmetic; the head's too), RoPE and SiLU in fp32, K/V rounded to
bf16 into the pool, and the paged attention of ``paged_attention.h`` with fixed key tiles. Each row
is computed from itself and the keys it sees, so a prefill, a split prefill, an append and a decode
step in any batch give the same bits. :attr:`LlamaLayerKernel.fingerprint` names it in the state's
fingerprint, so state written by torch's arithmetic is never served to it, nor the reverse.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

import torch

from kvgate.models.cpu_kernels.kquant import chosen_variant
from kvgate.models.cpu_kernels.paged_attention import ready_library

ARITHMETIC = "llama-native2"  # 2: q8i matmuls
MAX_PARTS = 4


class MatrixPart(ctypes.Structure):
    _fields_ = [("packed", ctypes.c_void_p), ("type", ctypes.c_int), ("rows", ctypes.c_int)]


class Matrix(ctypes.Structure):
    _fields_ = [("parts", MatrixPart * MAX_PARTS), ("count", ctypes.c_int), ("cols", ctypes.c_int)]


class LayerSpec(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in
                ("hidden", "heads", "kv_heads", "head_dim", "rotary_dim", "intermediate")] + [
        ("eps", ctypes.c_float), ("scale", ctypes.c_float),
        ("attn_norm", ctypes.c_void_p), ("mlp_norm", ctypes.c_void_p),
        ("qkv_bias", ctypes.c_void_p), ("o_bias", ctypes.c_void_p),
        ("qkv", Matrix), ("o", Matrix), ("gate_up", Matrix), ("down", Matrix),
        ("k_pool", ctypes.c_void_p), ("v_pool", ctypes.c_void_p)]


class StepRows(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_int), ("width", ctypes.c_int), ("threads", ctypes.c_int),
                ("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p), ("new_slots", ctypes.c_void_p),
                ("tables", ctypes.c_void_p), ("row_seq", ctypes.c_void_p), ("row_keys", ctypes.c_void_p)]


class LlamaLayerKernel:
    """One compiled variant: :meth:`layers` runs layer specs over rows, :meth:`final_norm` the last norm."""

    def __init__(self, lib: ctypes.CDLL, variant: str):
        self.variant = variant
        self.fingerprint = f"/{ARITHMETIC}-{variant}"
        self.layers = lib.llama_layers
        self.layers.argtypes = [ctypes.POINTER(LayerSpec), ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(StepRows)]
        self.layers.restype = ctypes.c_int
        self.final_norm = lib.llama_final_norm
        self.final_norm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_float]
        self.final_norm.restype = None
        self.q8i_bytes = lib.q8i_bytes  # (type code, rows, cols): the bytes of a matrix's packed copy
        self.q8i_bytes.argtypes, self.q8i_bytes.restype = [ctypes.c_int] * 3, ctypes.c_size_t
        self._q8i_repack = lib.q8i_repack
        self._q8i_repack.argtypes, self._q8i_repack.restype = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 3, None
        self._q8i_rows = lib.q8i_rows
        self._q8i_rows.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                   ctypes.c_void_p]
        self._q8i_rows.restype = None
        self._q8i_matmul = lib.q8i_matmul
        self._q8i_matmul.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 5
        self._q8i_matmul.restype = ctypes.c_int

    def q8i_repack(self, raw: torch.Tensor, type_code: int, rows: int, cols: int) -> torch.Tensor:
        """uint8 raw GGUF blocks [rows, row_bytes] of a kquant type (its code) -> q8i's packed layout."""
        out = torch.empty(self.q8i_bytes(type_code, rows, cols), dtype=torch.uint8)
        self._q8i_repack(raw.contiguous().data_ptr(), out.data_ptr(), rows, cols, type_code)
        return out

    def q8i_rows(self, packed: torch.Tensor, type_code: int, shape: torch.Size, ids: torch.Tensor) -> torch.Tensor:
        """fp32 [len(ids), K]: rows ``ids`` of a packed ``shape`` [N, K] matrix, as ggml dequantizes them.
        IndexError for an id outside 0..N-1."""
        ids = ids.reshape(-1).to(torch.int64).contiguous()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= shape[0]):
            raise IndexError(f"row ids must lie in 0..{shape[0] - 1}")
        out = torch.empty(ids.numel(), shape[1], dtype=torch.float32)
        self._q8i_rows(packed.data_ptr(), type_code, shape[1], ids.data_ptr(), ids.numel(), out.data_ptr())
        return out

    def q8i_matmul(self, x: torch.Tensor, packed: torch.Tensor, type_code: int, rows: int) -> torch.Tensor:
        """fp32 [M, rows] = x fp32 [M, K] times the packed weights, in q8i's arithmetic."""
        x = x.float().contiguous()
        out = torch.empty(x.shape[0], rows, dtype=torch.float32)
        if self._q8i_matmul(x.data_ptr(), packed.data_ptr(), out.data_ptr(), x.shape[0], rows, x.shape[1], type_code,
                            torch.get_num_threads()):
            raise MemoryError("q8i: no memory for the quantized rows")
        return out


@functools.lru_cache(maxsize=None)
def llama_layer_variant(variant: str) -> Optional[LlamaLayerKernel]:
    """``variant`` (a key of kquant's VARIANTS) compiled, or None where the CPU or compiler refuse it."""
    lib = ready_library("llama_layer.c", variant, "llama layer kernel", ("-lm",))
    return None if lib is None else LlamaLayerKernel(lib, variant)


@functools.lru_cache(maxsize=None)
def llama_layer_kernel() -> Optional[LlamaLayerKernel]:
    """The variant named by ``$KVGATE_KQUANT_VARIANT``, else the best this CPU runs (amx first: its
    attention's tile products make prefill ~4x faster), else None."""
    variant = chosen_variant("attention")
    return None if variant is None else llama_layer_variant(variant) or llama_layer_variant(chosen_variant())
