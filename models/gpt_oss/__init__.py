"""The gpt-oss runtime (``gpt_oss`` / ``GptOssForCausalLM``): GQA attention with q/k/v/o biases,
a learned sink logit per head, sliding-window layers alternating with full-attention ones, YaRN
rope, and a mixture of experts with biased router and experts and a clamped SwiGLU. Its own
forward (:mod:`.forward`) is built from the shared layers; MXFP4 experts are dequantized at load
(:mod:`kvgate.models.mxfp4`). Its plugin, the ``gpt_oss`` entry point, is :mod:`.plugin`.
"""
