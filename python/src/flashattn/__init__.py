"""flashattn: exact attention computed the IO-aware way (FlashAttention), for PyTorch.

Drop-in for flash-attn's functions (same names, arguments, defaults and return values):

    from flashattn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)   # q, k, v: (batch, seqlen, heads, headdim)

The functions are differentiable: they call two PyTorch operators registered in C++ with their
autograd kernel (torch.ops.flashattn.fwd and torch.ops.flashattn.bwd), which torch.compile traces
without graph breaks. `path=` picks a kernel family (flashattn.families()).
"""
import torch  # first: the extension links PyTorch's libraries and registers operators with it

from . import _C
from ._ops import CudaError, FlashAttnError, InvalidArgumentError, NotSupportedError, families, forward_path
from .interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = "0.1.0"


def cuda_available() -> bool:
    """True when this build has the CUDA backend and a CUDA device is visible."""
    return bool(_C.cuda_available())


__all__ = [
    "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache", "FlashAttnError",
    "InvalidArgumentError", "NotSupportedError", "CudaError", "cuda_available", "families", "forward_path", "__version__",
]
