"""The DeepSeek V3.2 runtime (``deepseek_v32``): DeepSeek V3's MLA and experts
(:mod:`kvgate.models.deepseek_v3`) plus the lightning indexer of DeepSeek Sparse Attention, which
caches one more key per token and layer and lets each query attend only to the ``index_topk``
cached tokens it scores highest. Hugging Face directories only: the gguf package has no indexer
tensors for the ``deepseek2`` architecture. Its plugin, the ``deepseek_v32`` entry point, is
:mod:`kvgate.models.deepseek_v32.plugin`.
"""
