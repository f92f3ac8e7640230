"""The Qwen3.5 runtime: a hybrid of Gated DeltaNet (linear attention) layers and gated full-attention
layers, exact at any token.

The full-attention layers keep per-token K/V in the shared block pool; each linear-attention layer
keeps a fixed-size recurrent state and the last few convolution inputs (:mod:`.linear_state`),
which cannot be cut at a token. Prefill runs the chunked gated delta rule (:mod:`.delta_rule`) on
chunks aligned to absolute positions, so where a prompt was split never changes a bit; decode runs
the recurrent update (or, in the deterministic mode, the same aligned chunk). Forks, truncations
and exports restore the nearest recurrent-state snapshot at or before the cut and replay the tokens
in between (:mod:`.runtime`). Qwen3.5-MoE is the same runtime with routed experts and a gated shared
expert as every layer's MLP. Their plugins, the ``qwen3_5`` and ``qwen3_5_moe`` entry points, are
:mod:`.plugin` and :mod:`.moe_plugin`.
"""
