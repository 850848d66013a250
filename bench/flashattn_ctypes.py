"""Minimal ctypes binding of flashattn's C ABI (include/flashattn/flashattn_c.h) for torch tensors.

Used by the benchmark and the GPU check script; the Python package proper lives in python/.
"""
import ctypes
import os

import torch

DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int32: 3}


class FaTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("device", ctypes.c_int32),
                ("rank", ctypes.c_int32), ("pad_", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]


class FaOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("softmax_scale", ctypes.c_float),
                ("has_softmax_scale", ctypes.c_int32), ("causal", ctypes.c_int32), ("pad_", ctypes.c_int32),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64), ("softcap", ctypes.c_float)]


class FaArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + [
        (n, FaTensor) for n in ("q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv",
                                "cu_seqlens_q", "cu_seqlens_k")] + [
        ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64),
        ("options", ctypes.POINTER(FaOptions)), ("deterministic", ctypes.c_int32), ("pad_", ctypes.c_int32),
        ("stream", ctypes.c_void_p), ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
        ("path", ctypes.c_char_p), ("block_table", FaTensor),
        ("zero_rows_outside_sequences", ctypes.c_int32), ("pad2_", ctypes.c_int32)]
    # fa_args_init fills all of flashattn_c.h's layout: these fields must be all of it


class FaKVCacheArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + [
        (n, FaTensor) for n in ("q", "k_cache", "v_cache", "cache_seqlens", "block_table", "cache_batch_idx",
                                "k_new", "v_new", "rotary_cos", "rotary_sin", "out", "lse")] + [
        ("options", ctypes.POINTER(FaOptions)), ("rotary_interleaved", ctypes.c_int32), ("num_splits", ctypes.c_int32),
        ("path", ctypes.c_char_p), ("stream", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t), ("cache_leftpad", FaTensor)]
    # fa_kvcache_args_init fills all of flashattn_c.h's layout: these fields must be all of it


def _view(t):
    v = FaTensor()
    if t is None:
        return v
    v.data = t.data_ptr()
    v.dtype = DTYPES[t.dtype]
    v.device = 1 if t.is_cuda else 0
    v.rank = t.dim()
    for i in range(t.dim()):
        v.shape[i] = t.shape[i]
        v.stride[i] = t.stride(i)
    return v


def _attach_workspace(a, n, device):
    """n bytes of workspace (fa_args or fa_kvcache_args a points at it); the tensor, to keep alive."""
    ws = torch.empty(max(n, 1), dtype=torch.uint8, device=device)
    a.workspace, a.workspace_bytes = ws.data_ptr(), n
    return ws


class FlashAttn:
    def __init__(self, lib_path=None):
        lib_path = lib_path or os.environ.get("FLASHATTN_C_LIB", "build/libflashattn_c.so")
        self.lib = ctypes.CDLL(lib_path)
        for name in ("fa_forward", "fa_backward"):
            getattr(self.lib, name).argtypes = [ctypes.POINTER(FaArgs), ctypes.c_char_p, ctypes.c_size_t]
        for name in ("fa_forward_workspace_size", "fa_backward_workspace_size"):
            getattr(self.lib, name).argtypes = [ctypes.POINTER(FaArgs), ctypes.POINTER(ctypes.c_size_t),
                                                ctypes.c_char_p, ctypes.c_size_t]
        self.lib.fa_args_init.argtypes = [ctypes.POINTER(FaArgs)]
        self.lib.fa_options_init.argtypes = [ctypes.POINTER(FaOptions)]
        self.lib.fa_families.restype = ctypes.c_char_p
        self.lib.fa_kvcache_args_init.argtypes = [ctypes.POINTER(FaKVCacheArgs)]
        self.lib.fa_kvcache_forward.argtypes = [ctypes.POINTER(FaKVCacheArgs), ctypes.c_char_p, ctypes.c_size_t]
        self.lib.fa_kvcache_workspace_size.argtypes = [ctypes.POINTER(FaKVCacheArgs), ctypes.POINTER(ctypes.c_size_t),
                                                       ctypes.c_char_p, ctypes.c_size_t]
        self.lib.fa_kvcache_path.argtypes = [ctypes.POINTER(FaKVCacheArgs)]
        self.lib.fa_kvcache_path.restype = ctypes.c_char_p
        for name in ("fa_forward_path", "fa_backward_path"):
            getattr(self.lib, name).argtypes = [ctypes.POINTER(FaArgs)]
            getattr(self.lib, name).restype = ctypes.c_char_p

    def args(self, q, k, v, out=None, lse=None, dout=None, dq=None, dk=None, dv=None, causal=False,
             softmax_scale=None, window=(-1, -1), softcap=0.0, deterministic=False,
             cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, path="auto"):
        a = FaArgs()
        self.lib.fa_args_init(ctypes.byref(a))
        o = FaOptions()
        self.lib.fa_options_init(ctypes.byref(o))
        for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("dout", dout),
                        ("dq", dq), ("dk", dk), ("dv", dv), ("cu_seqlens_q", cu_seqlens_q),
                        ("cu_seqlens_k", cu_seqlens_k)):
            setattr(a, name, _view(t))
        a.max_seqlen_q, a.max_seqlen_k = max_seqlen_q, max_seqlen_k
        if softmax_scale is not None:
            o.softmax_scale, o.has_softmax_scale = softmax_scale, 1
        o.causal, a.deterministic = int(causal), int(deterministic)
        o.window_left, o.window_right = window
        o.softcap = softcap
        a._options = o  # keep the options alive as long as the args
        a.options = ctypes.pointer(o)
        a._path = path.encode()
        a.path = a._path
        a.stream = torch.cuda.current_stream().cuda_stream if q.is_cuda else None
        return a

    def _check(self, code, msg):
        if code != 0:
            raise RuntimeError(f"flashattn error {code}: {msg.value.decode()}")

    def workspace(self, a, backward):
        n = ctypes.c_size_t(0)
        msg = ctypes.create_string_buffer(512)
        fn = self.lib.fa_backward_workspace_size if backward else self.lib.fa_forward_workspace_size
        self._check(fn(ctypes.byref(a), ctypes.byref(n), msg, 512), msg)
        return n.value

    def with_workspace(self, a, backward, device):
        return _attach_workspace(a, self.workspace(a, backward), device)

    def forward(self, a):
        msg = ctypes.create_string_buffer(512)
        self._check(self.lib.fa_forward(ctypes.byref(a), msg, 512), msg)

    def backward(self, a):
        msg = ctypes.create_string_buffer(512)
        self._check(self.lib.fa_backward(ctypes.byref(a), msg, 512), msg)

    def path(self, a, backward=False):
        fn = self.lib.fa_backward_path if backward else self.lib.fa_forward_path
        return fn(ctypes.byref(a)).decode()

    # ---- the KV-cache call (fa_kvcache_forward): q against a contiguous or paged cache, nothing appended
    def kvcache_args(self, q, k_cache, v_cache, cache_seqlens, out, block_table=None, path="auto", num_splits=0):
        a = FaKVCacheArgs()
        self.lib.fa_kvcache_args_init(ctypes.byref(a))
        for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("cache_seqlens", cache_seqlens),
                        ("block_table", block_table), ("out", out)):
            setattr(a, name, _view(t))
        a._path = path.encode()
        a.path = a._path
        a.num_splits = num_splits
        a.stream = torch.cuda.current_stream().cuda_stream if q.is_cuda else None
        return a

    def kvcache_with_workspace(self, a, device):
        n = ctypes.c_size_t(0)
        msg = ctypes.create_string_buffer(512)
        self._check(self.lib.fa_kvcache_workspace_size(ctypes.byref(a), ctypes.byref(n), msg, 512), msg)
        return _attach_workspace(a, n.value, device)

    def kvcache_forward(self, a):
        msg = ctypes.create_string_buffer(512)
        self._check(self.lib.fa_kvcache_forward(ctypes.byref(a), msg, 512), msg)

    def kvcache_path(self, a):
        return self.lib.fa_kvcache_path(ctypes.byref(a)).decode()
