"""The DeepSeek V4 runtime (``deepseek_v4``): every layer attends over a sliding window of its own
keys, and a CSA layer adds compressed entries (one per ``csa_rate`` tokens, an overlapping window
each, a lightning indexer choosing the top-k per query) or an HCA layer heavily compressed ones
(one per ``hca_rate`` tokens); one shared K=V head with LoRA queries, per-head sinks and a grouped
output projection; residual streams mixed by Sinkhorn hyper-connections; sqrt-softplus MoE whose
first layers route by a token-id hash table. Hugging Face directories only (bf16 / fp32 weights, or
block-scaled FP8 ones dequantized at load).
Its plugin, the ``deepseek_v4`` entry point, is :mod:`kvgate.models.deepseek_v4.plugin`.

What a session holds (:mod:`.state`): per token every layer's K=V vector, per window the
compressed entries and indexer keys, per compressed layer the raw projections of its open window
(:mod:`.tail`); forks, truncations and chunks are exact at any token, a cut back past the raw rows
replaying the few tokens since the last window boundary (:mod:`.replay`). With
``[engine] speculative = "mtp"`` the checkpoint's MTP layer drafts (:mod:`.draft`).
"""
