"""The DeepSeek V4 forward pass over *segments*: each the new tokens of one session (a prefill is
one segment, a batched decode one segment of one token per session). Everything but attention --
projections, hyper-connections, experts -- runs over all segments' rows at once; attention runs per
segment, over that session's window keys and compressed entries (:mod:`.attention`).

Each layer writes its tokens' K=V vectors into the pool before attending, so a segment's queries
read their window keys from the pool, whatever mix of earlier prefills, decodes and imports filled
it; a compressed layer takes its tokens' raw projections into the session's raw tail and pools the
windows they complete into entries (:mod:`.advance`). A *replay* (:mod:`.replay`) runs tokens whose
K=V vectors and entries are already stored, writing neither (the blocks may be shared), to rebuild
the raw tail only.

With ``deterministic`` every step runs with the invariant :class:`~.arithmetic.Arithmetic`: a row
gets the same bits in a prefill, a chunk, a decode batch or a replay.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional, Sequence

import attrs
import torch

from kvgate.core.runtime import PrefillInterrupted, Session
from kvgate.models.deepseek_v4.advance import advance
from kvgate.models.deepseek_v4.arithmetic import Arithmetic
from kvgate.models.deepseek_v4.arch import CSA, SLIDING
from kvgate.models.deepseek_v4.attention import key_values, norm, output, queries, segment_attention
from kvgate.models.deepseek_v4.compressor import compress
from kvgate.models.deepseek_v4.hyper import collapse_head, expand, mix
from kvgate.models.deepseek_v4.moe import moe_mlp
from kvgate.models.deepseek_v4.rotary import InterleavedRotary, rotate


@attrs.define
class Segment:
    session: Session
    start: int  # the position of its first new token (the session's length before)
    count: int
    rows: slice = slice(0)  # its rows in the batch


class DeepseekV4Forward:
    keep_hidden = False  # keep the final residual streams of every row (an MTP head drafts from them)
    hidden: Optional[torch.Tensor] = None

    def __init__(self, arch, weights, pool, layout, raw_layout, deterministic: bool = False):
        self.arch, self.weights, self.pool, self.layout, self.raw_layout = arch, weights, pool, layout, raw_layout
        self.ops = Arithmetic(deterministic)
        device = weights.embed.device
        self.main_rope = InterleavedRotary(arch.rope_dim, arch.rope_theta, None, device)
        self.compress_rope = InterleavedRotary(arch.rope_dim, arch.compress_rope_theta, arch.rope_scaling, device)

    @property
    def rows(self) -> torch.Tensor:
        """The pool's token rows [slots, 1, width]."""
        return self.pool.layer_views[0][0]

    def run(self, segments: Sequence[Segment], ids: torch.Tensor, all_logits: bool,
            interrupted: Optional[Callable[[], bool]] = None, replay: bool = False) -> torch.Tensor:
        """Logits [rows, vocab] (fp32) of every new row, or of each segment's last row (``replay``: of
        rows already stored, whose K=V vectors are not written again)."""
        arch, device, offset, ops = self.arch, ids.device, 0, self.ops
        for segment in segments:
            segment.rows, offset = slice(offset, offset + segment.count), offset + segment.count
        positions = torch.cat([torch.arange(s.start, s.start + s.count, device=device) for s in segments])
        slots = torch.cat([self.pool.slots(s.session.block_table, s.start, s.start + s.count) for s in segments])
        streams = self.weights.embed[ids][:, None].expand(-1, arch.hc_mult, -1).contiguous()
        for index, layer in enumerate(self.weights.layers):
            if interrupted is not None and interrupted():
                raise PrefillInterrupted(f"prefill of {len(ids)} tokens interrupted before layer {index}")
            x, post, comb = mix(streams, layer.attn_mixer, arch.hc_iters, arch.hc_eps, arch.rms_eps, ops)
            out = self._attention(norm(x, layer.attn_norm, arch.rms_eps), index, segments, positions,
                                  None if replay else slots)
            streams = expand(streams, out, post, comb)
            x, post, comb = mix(streams, layer.mlp_mixer, arch.hc_iters, arch.hc_eps, arch.rms_eps, ops)
            mlp = moe_mlp(norm(x, layer.mlp_norm, arch.rms_eps), ids, layer.moe, arch, ops)
            streams = expand(streams, mlp, post, comb)
        if self.keep_hidden:
            self.hidden = streams
        if not all_logits:
            streams = streams[torch.tensor([s.rows.stop - 1 for s in segments], device=device)]
        hidden = collapse_head(streams, self.weights.head_mixer, arch.hc_eps, arch.rms_eps, ops)
        return ops.linear(norm(hidden, self.weights.norm, arch.rms_eps), self.weights.lm_head).float()

    def take_hidden(self) -> torch.Tensor:
        hidden, self.hidden = self.hidden, None
        return hidden

    def _write(self, slots: torch.Tensor, field: slice, values: torch.Tensor) -> None:
        self.rows[slots, 0, field] = values.to(self.rows.dtype)

    def _attention(self, x, index: int, segments, positions, slots) -> torch.Tensor:
        arch, attention, kv_field = self.arch, self.weights.layers[index].attention, self.layout.fields[index]["kv"]
        ops = self.ops
        kind, rate = arch.kinds[index], arch.rate(index)
        cos, sin = (self.main_rope if kind == SLIDING else self.compress_rope).angles(positions)
        q, residual = queries(x, attention, arch, cos, sin, ops)
        if slots is not None:
            self._write(slots, kv_field, key_values(x, attention, arch, cos, sin, ops))
        raw = self._raw_rows(x, attention) if kind != SLIDING else None
        if kind == CSA:
            indexer = attention.indexer
            index_q = rotate(ops.linear(residual, indexer.q_up).view(-1, arch.index_heads, arch.index_dim), cos, sin)
            head_weights = ops.linear(x, indexer.head_weights).float() * arch.index_heads ** -0.5
        out = []
        for segment in segments:
            table, rows = segment.session.block_table, segment.rows

            def keys_of(first: int, end: int, table=table) -> torch.Tensor:
                return self.rows[self.pool.slots(table, first, end), 0, kv_field]

            compressed, indexer_inputs = None, None
            if kind != SLIDING:
                entries = advance(segment.session, index, self.raw_layout, raw[rows],
                                  segment.start + segment.count, functools.partial(self._pool_windows, index))
                compressed = entries["kv"]
                if kind == CSA:
                    indexer_inputs = (index_q[rows], head_weights[rows], entries["index"])
            out.append(segment_attention(q[rows], positions[rows], keys_of, compressed, indexer_inputs, attention,
                                         arch, rate, ops))
        return output(torch.cat(out), attention, arch, cos, sin, ops)

    def _raw_rows(self, x: torch.Tensor, attention) -> torch.Tensor:
        """The raw projections [n, width] of a compressed layer (:class:`~.tail.RawLayer`'s row)."""
        parts = [attention.compressor.kv, attention.compressor.gate]
        if attention.indexer is not None:
            parts += [attention.indexer.compressor.kv, attention.indexer.compressor.gate]
        return torch.cat([self.ops.linear(x, weight) for weight in parts], -1)

    def _pool_windows(self, index: int, which: str, kv, gate, first: int, previous) -> torch.Tensor:
        """Entries of layer ``index``'s compressor ``which`` ("kv" or "index") from raw rows."""
        arch, attention = self.arch, self.weights.layers[index].attention
        compressor, dims = attention.compressor, arch.head_dim
        if which == "index":
            compressor, dims = attention.indexer.compressor, arch.index_dim
        overlap = arch.kinds[index] == CSA
        return compress(kv, gate, compressor, dims, overlap, first, previous, self.compress_rope, arch.rms_eps,
                        self.ops.exact)
