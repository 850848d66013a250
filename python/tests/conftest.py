"""Shared fixtures: devices and dtypes to test, fresh seeds, NaN-poisoned outputs."""
import os
import random
import zlib

import pytest
import torch

os.environ.setdefault("FLASHATTN_POISON", "1")  # before flashattn is imported: outputs start as NaN

import flashattn  # noqa: E402
from flashattn import _C  # noqa: E402

_C.set_poison_outputs(True)

CUDA_OK = torch.cuda.is_available() and flashattn.cuda_available()
if not torch.cuda.is_available():
    CUDA_SKIP_REASON = "GPU test: no CUDA device visible to PyTorch"
elif not flashattn.cuda_available():
    CUDA_SKIP_REASON = "GPU test: flashattn was built without CUDA (FLASHATTN_CUDA=OFF?)"
else:
    CUDA_SKIP_REASON = ""
needs_cuda = pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP_REASON or "n/a")

# (device, dtype) pairs the library supports: fp16/bf16 on CUDA, fp32/fp16/bf16 on the CPU.
DEVICE_DTYPES = [
    pytest.param("cpu", torch.float32, id="cpu-f32"),
    pytest.param("cpu", torch.float16, id="cpu-f16"),
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cuda", torch.float16, id="cuda-f16", marks=[needs_cuda, pytest.mark.gpu]),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=[needs_cuda, pytest.mark.gpu]),
]
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=[needs_cuda, pytest.mark.gpu]),
]
# The dtype each device's tests use when only one is needed.
DEFAULT_DTYPE = {"cpu": torch.float32, "cuda": torch.bfloat16}

_BASE_SEED = int(os.environ.get("FLASHATTN_TEST_SEED", random.randrange(2**31)))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device and a CUDA build of flashattn")


def pytest_report_header(config):
    cuda = "yes" if CUDA_OK else f"no ({CUDA_SKIP_REASON})"
    return [f"flashattn: torch {torch.__version__}, CUDA tests: {cuda}, "
            f"seed base FLASHATTN_TEST_SEED={_BASE_SEED}"]


@pytest.fixture(autouse=True)
def fresh_seed(request):
    """Fresh random inputs each run, reproducible per test from the seed in the report header."""
    seed = (_BASE_SEED + zlib.crc32(request.node.nodeid.encode())) % 2**31
    torch.manual_seed(seed)
    return seed
