"""The Qwen3 and Qwen3-MoE families: the Llama parts with per-head q/k RMSNorm, and for Qwen3-MoE
a softmax-routed mixture of experts (:mod:`kvgate.models.moe`) in its sparse layers.

Their plugins, the ``qwen3`` and ``qwen3_moe`` entry points, are :mod:`kvgate.models.qwen3.plugin`
and :mod:`kvgate.models.qwen3.moe_plugin`.
"""
