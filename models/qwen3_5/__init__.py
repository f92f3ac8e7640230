"""The Qwen3.5 runtime: a hybrid of Gated DeltaNet (linear attention) layers and gated full-attention
layers, exact at any token.

The full-attention layers keep per-token K/V in the shared block pool; each linear-attention layer
keeps a fixed-size recurrent state and the last few convolution inputs (:mod:`.linear_state`),
which cannot be cut at a token. Prefill runs the chunked gated delta rule (:mod:`.delta_rule`) on
chunks aligned to absolute positions, so where a prompt was split never changes a bit; decode runs
the recurrent update (or, in the deterministic mode, the same aligned chunk). Forks, truncations
and exports restore the nearest recurrent-state snapshot at or before the cut and replay the tokens
in between (:mod:`.runtime`). Qwen3.5-MoE is the same runtime with routed experts and a gated shared
expert as every layer's MLP; Qwen3-Next is Qwen3.5-MoE with its linear layers' fused projections
split as they load (:func:`.weights.split_fused_projections`) and a dense MLP in the layers its config
names. Their plugins, the ``qwen3_5``, ``qwen3_5_moe`` and ``qwen3_next`` entry points, are
:mod:`.plugin`, :mod:`.moe_plugin` and :mod:`.next_plugin`. A checkpoint's MTP layer drafts with
``[engine] speculative = "mtp"`` (:mod:`.mtp_weights`, :mod:`.mtp_layer`).
"""
