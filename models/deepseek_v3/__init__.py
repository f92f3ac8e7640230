"""The DeepSeek V3 runtime (``deepseek_v3``; Kimi K2 has the same architecture): multi-head latent
attention (MLA) whose cache holds, per token and layer, the compressed latent and the shared rope
key only -- attention runs in the absorbed form, queries projected into the latent space -- and the
sigmoid-routed grouped experts of :mod:`kvgate.models.moe` after the first dense layers.
Its plugin, the ``deepseek_v3`` entry point, is :mod:`kvgate.models.deepseek_v3.plugin`.
"""
