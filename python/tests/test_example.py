"""The end-to-end example: one training step of a tiny transformer, our attention against SDPA."""
import importlib.util
import pathlib

import pytest
import torch

from conftest import needs_cuda

_PATH = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_step.py"
_spec = importlib.util.spec_from_file_location("train_step", _PATH)
train_step = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_step)


@pytest.mark.parametrize("device,dtype,compile", [
    pytest.param("cpu", torch.float32, False, id="cpu-f32"),
    pytest.param("cpu", torch.bfloat16, False, id="cpu-bf16"),
    pytest.param("cuda", torch.bfloat16, False, id="cuda-bf16", marks=[needs_cuda, pytest.mark.gpu]),
    pytest.param("cuda", torch.float16, True, id="cuda-f16-compiled", marks=[needs_cuda, pytest.mark.gpu]),
])
def test_training_step_matches_sdpa(device, dtype, compile):
    torch._dynamo.reset()
    result = train_step.compare(device, dtype, compile=compile)
    assert train_step.agrees(result, dtype), result
