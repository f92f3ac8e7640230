"""Model conversion at first start logs how far it is (issue 36): converting the embedded GGUF logs
its stages and, in the long one, the tensors dequantized at each quarter."""

from __future__ import annotations

import re

import pytest

from kvgate.models.embedded import embedded_gguf_path
from kvgate.models.gguf_loader import convert_gguf
from kvgate.models.progress import Progress

pytestmark = pytest.mark.slow


def test_converting_a_gguf_logs_its_tensors_at_each_quarter(tmp_path, caplog):
    import torch

    caplog.set_level("INFO", logger="kvgate.models")
    convert_gguf(embedded_gguf_path(), tmp_path, torch.bfloat16, Progress("smollm2"))
    assert (tmp_path / "model.safetensors").stat().st_size > 0
    counts = re.findall(r"loading smollm2: tensors dequantized: (\d+)/(\d+) \(", caplog.text)
    total = int(counts[0][1])
    assert [int(done) for done, _ in counts] == [total * quarter // 4 + (total * quarter % 4 > 0)
                                                 for quarter in (1, 2, 3)]
    stages = re.findall(r"loading smollm2: (reading GGUF metadata|dequantizing \d+ tensors|writing converted weights)",
                        caplog.text)
    assert stages == ["reading GGUF metadata", f"dequantizing {total} tensors", "writing converted weights"]
