"""Hand-written CPU kernels, compiled at first use (:mod:`.build`), each checked bit for bit
against the torch kernel it stands in for before it is used (:mod:`.int4`)."""
