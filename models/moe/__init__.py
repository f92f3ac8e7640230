"""A mixture-of-experts MLP shared by the MoE runtimes: routers, grouped experts, shared experts.

:mod:`.config` says what a model's MoE is (read from a Hugging Face ``config.json``), :mod:`.routing`
picks each token's experts and weights, :mod:`.experts` runs them, tokens grouped by expert, and
:mod:`.weights` reads the tensors from Hugging Face names.
"""
