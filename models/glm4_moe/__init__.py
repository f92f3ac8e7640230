"""The GLM-4.5 / 4.6 / 4.7 family (``glm4_moe``): the Llama parts with q/k/v biases, partial
rotary, optional per-head q/k RMSNorm, dense first layers and sigmoid-routed experts with shared
experts (:mod:`kvgate.models.moe`), and its MTP layer as a draft head (:mod:`kvgate.models.mtp`).
Its plugin, the ``glm4_moe`` entry point, is :mod:`kvgate.models.glm4_moe.plugin`.
"""
