"""The MiniMax M2 / M2.5 / M2.7 family (``minimax_m2``): the Llama parts with q/k RMSNorm over the
whole q and k projections (not per head), RoPE on the first ``rotary_dim`` dims of each head, and in
every layer sigmoid-routed experts chosen with a correction bias and no shared expert
(:mod:`kvgate.models.moe`). Its plugin, the ``minimax_m2`` entry point, is
:mod:`kvgate.models.minimax_m2.plugin`; its tool calls are the ``minimax_m2`` dialect's.
"""
