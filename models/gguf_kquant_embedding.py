"""A token embedding kept as GGUF blocks: a lookup dequantizes only the rows it gathers.

:class:`PackedEmbedding` stands where a dense embedding tensor stands (``embed[tokens]``, ``dtype``,
``device``, ``shape``); its rows come out exactly as dequantizing the whole table and then gathering
would give them, since every row is whole blocks read on their own. Its :class:`KQuantWeight` serves a
tied output head as it is; where the native layer has taken the blocks over (repacked), rows are read
back from its copy with the same bits.
"""

from __future__ import annotations

from typing import Any

import torch

from kvgate.models.gguf_kquant_weight import KQuantWeight


class PackedEmbedding:
    def __init__(self, weight: KQuantWeight, dtype: torch.dtype):
        self.weight, self.dtype = weight, dtype
        self.shape, self.device = weight.shape, weight.raw.device

    def __getitem__(self, tokens: torch.Tensor) -> torch.Tensor:
        """The embeddings of ``tokens`` (any shape), in :attr:`dtype`."""
        return self.weight.rows(tokens.reshape(-1)).to(self.dtype).reshape(*tokens.shape, self.shape[1])

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return self.weight.dequantize(dtype)

    def tensors(self) -> list[torch.Tensor]:
        return self.weight.tensors()


def embedding(value: Any, dtype: torch.dtype) -> Any:
    """``value`` as the model's embedding: a K-quant weight wrapped as :class:`PackedEmbedding`,
    a dense tensor as it is."""
    return PackedEmbedding(value, dtype) if isinstance(value, KQuantWeight) else value


def head_weight(embed: Any) -> Any:
    """The tied output head's weight for ``embed``: the blocks of a packed one, else the tensor."""
    return embed.weight if isinstance(embed, PackedEmbedding) else embed
