"""Hand-written CPU kernels, compiled at first use (:mod:`.build`). The matmuls stand in for torch's
and are checked bit for bit against them before use (:mod:`.int4`, :mod:`.int8`); the RMSNorm is
kvgate's own row-invariant arithmetic, named in the state fingerprint (:mod:`.rms_norm`), as is the
matmul over GGUF blocks kept packed, the same bits on every CPU in each instruction-set variant
(:mod:`.kquant`)."""
