"""flash_attn_func, forward and gradients, against the float64 reference by the error rule."""
import pytest
import torch

from conftest import CUDA_OK, CUDA_SKIP_REASON, DEVICE_DTYPES, DEVICES, DEFAULT_DTYPE
import flashattn
from flashattn import flash_attn_func
import reference

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, hdim_qk, hdim_v): square, seqlen_q < / > seqlen_k
# (bottom-right causal, fully masked rows), GQA and MQA, a single query row, head dims that are not
# multiples of 8 (zero-padded by the wrapper), hdim_v != hdim_qk (CPU).
CPU_SHAPES = [
    (2, 17, 17, 4, 4, 32, 32),
    (1, 33, 65, 4, 2, 64, 64),
    (2, 48, 21, 6, 1, 40, 40),
    (1, 1, 37, 2, 2, 36, 36),
    (1, 24, 24, 2, 2, 64, 32),
]
CUDA_SHAPES = [
    (2, 128, 128, 8, 8, 64, 64),
    (1, 257, 513, 8, 2, 128, 128),
    (2, 300, 133, 4, 1, 96, 96),
    (1, 1, 300, 4, 4, 256, 256),
    (2, 113, 203, 4, 4, 192, 192),
    (1, 77, 77, 2, 2, 60, 60),
]
OPTIONS = [
    pytest.param({}, id="full"),
    pytest.param({"causal": True}, id="causal"),
    pytest.param({"window_size": (8, 0)}, id="window8-0"),
    pytest.param({"window_size": (5, 3)}, id="window5-3"),
    pytest.param({"softcap": 2.0}, id="softcap"),
    pytest.param({"causal": True, "softmax_scale": 0.3, "window_size": (16, 16)}, id="causal-scale-window"),
]


def reference_options(opts):
    return dict(softmax_scale=opts.get("softmax_scale"), causal=opts.get("causal", False),
                window=opts.get("window_size", (-1, -1)), softcap=opts.get("softcap", 0.0))


def make_qkv(shape, device, dtype, requires_grad=True):
    b, sq, sk, h, hk, d, dv = shape
    q = torch.randn(b, sq, h, d, device=device, dtype=dtype)
    k = torch.randn(b, sk, hk, d, device=device, dtype=dtype)
    v = torch.randn(b, sk, hk, dv, device=device, dtype=dtype)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def check_forward_backward(q, k, v, out, lse, grads, dout, dtype, ref_opts, varlen=None):
    """Compares out, lse and (dq, dk, dv) with the reference and the same-precision naive run."""
    ref_fn = reference.attention if varlen is None else (
        lambda *a, **kw: reference.attention_varlen(*a, *varlen, **kw))
    out_ref, lse_ref = ref_fn(q, k, v, upcast=True, **ref_opts)
    out_pt, lse_pt = ref_fn(q, k, v, upcast=False, **ref_opts)
    reference.assert_by_rule("out", out, out_ref, out_pt, dtype)
    reference.assert_by_rule("lse", lse, lse_ref, lse_pt, dtype)
    if grads is None:
        return
    grads_ref = torch.autograd.grad(out_ref, (q, k, v), dout.double())
    grads_pt = torch.autograd.grad(out_pt, (q, k, v), dout)
    for name, g, g_ref, g_pt in zip(("dq", "dk", "dv"), grads, grads_ref, grads_pt):
        reference.assert_by_rule(name, g, g_ref, g_pt, dtype)


def device_dtype_shapes():
    """(device, dtype, shape) cases: each device's dtypes crossed with that device's shapes."""
    for p in DEVICE_DTYPES:
        device, dtype = p.values
        for shape in CPU_SHAPES if device == "cpu" else CUDA_SHAPES:
            yield pytest.param(device, dtype, shape, marks=p.marks, id=f"{p.id}-{'x'.join(map(str, shape))}")


@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("device,dtype,shape", list(device_dtype_shapes()))
def test_forward_backward(device, dtype, shape, opts):
    q, k, v = make_qkv(shape, device, dtype)
    out, lse, probs = flash_attn_func(q, k, v, return_attn_probs=True, **opts)
    assert probs is None
    assert out.dtype == dtype and out.device == q.device and lse.dtype == torch.float32
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    check_forward_backward(q, k, v, out, lse, grads, dout, dtype, reference_options(opts))


def cuda_families():
    """The CUDA kernel families this GPU runs attention on: "sm80", and "sm90" on compute capability 9.0."""
    if not CUDA_OK:
        return []
    hopper = torch.cuda.get_device_capability() == (9, 0)
    return [f for f in ("sm90", "sm80") if f in flashattn.families() and (f != "sm90" or hopper)]


# Head dims of every sm90 backward kernel (64, 128 with GQA and seqlen_q < seqlen_k, 256), odd lengths.
FAMILY_SHAPES = [
    (2, 200, 200, 4, 2, 64, 64),
    (1, 257, 513, 8, 2, 128, 128),
    (1, 300, 190, 4, 4, 256, 256),
]
FAMILY_OPTIONS = [
    pytest.param({}, id="full"),
    pytest.param({"causal": True}, id="causal"),
    pytest.param({"softcap": 2.0, "window_size": (40, 8)}, id="softcap-window"),
    pytest.param({"causal": True, "deterministic": True}, id="causal-deterministic"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("opts", FAMILY_OPTIONS)
@pytest.mark.parametrize("shape", FAMILY_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("family", ["sm90", "sm80"])
def test_forward_backward_on_each_cuda_family(family, shape, opts):
    """flash_attn_func(path=family), forward and gradients, on every CUDA family the GPU has, not only
    the one "auto" picks: a family run only when named (the sm90 backward before its switch into
    "auto") is checked through the Python path too (the operator's workspace from PyTorch's allocator,
    its stream)."""
    if family not in cuda_families():
        pytest.skip(CUDA_SKIP_REASON or f"GPU test: this GPU has no {family} family")
    dtype = torch.bfloat16
    q, k, v = make_qkv(shape, "cuda", dtype)
    out, lse, _ = flash_attn_func(q, k, v, return_attn_probs=True, path=family, **opts)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    check_forward_backward(q, k, v, out, lse, grads, dout, dtype, reference_options(opts))


@pytest.mark.parametrize("device", DEVICES)
def test_output_only_call(device):
    """The plain call returns just `out` (no tuple), with autograd off too."""
    dtype = DEFAULT_DTYPE[device]
    q, k, v = make_qkv((1, 9, 9, 2, 2, 64, 64), device, dtype, requires_grad=False)
    with torch.no_grad():
        out = flash_attn_func(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 9, 2, 64) and not out.requires_grad
    out_ref, _ = reference.attention(q, k, v, causal=True)
    out_pt, _ = reference.attention(q, k, v, causal=True, upcast=False)
    reference.assert_by_rule("out", out, out_ref, out_pt, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_lse_only_when_needed(device):
    """Inference without return_attn_probs computes no LSE (the op returns an empty one) and the same
    out bitwise; asked for, or needed by autograd, the LSE is there and by the rule."""
    from flashattn import _ops
    dtype = DEFAULT_DTYPE[device]
    q, k, v = make_qkv((2, 37, 37, 4, 2, 64, 64), device, dtype, requires_grad=False)
    args = (None, None, 0, 0, 0.125, True, -1, 0, 0.0, False, "auto", None)
    with torch.no_grad():
        out_no, lse_no = _ops.attention(q, k, v, *args, False)
        out_yes, lse_yes = _ops.attention(q, k, v, *args, True)
        out_api = flash_attn_func(q, k, v, softmax_scale=0.125, causal=True)
    assert lse_no.numel() == 0 and lse_yes.shape == (2, 4, 37)
    assert torch.equal(out_no, out_yes) and torch.equal(out_api, out_yes)
    _, lse_ref = reference.attention(q, k, v, causal=True, softmax_scale=0.125)
    torch.testing.assert_close(lse_yes.double().cpu(), lse_ref.double().cpu(), atol=1e-3, rtol=0)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    out_g, lse_g = _ops.attention(qg, kg, vg, *args, False)  # the backward needs it: computed anyway
    assert lse_g.shape == (2, 4, 37) and torch.equal(lse_g, lse_yes)
    out_g.float().sum().backward()
    assert qg.grad is not None and torch.isfinite(qg.grad).all()


@pytest.mark.parametrize("device", DEVICES)
def test_fully_masked_rows(device):
    """Causal with seqlen_q > seqlen_k: the first rows see no key: out 0, lse +inf, zero dq, no NaN."""
    dtype = DEFAULT_DTYPE[device]
    q, k, v = make_qkv((2, 40, 8, 2, 2, 64, 64), device, dtype)
    out, lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    masked = 40 - 8  # rows 0 .. 31 see nothing
    assert torch.equal(out[:, :masked], torch.zeros_like(out[:, :masked]))
    assert torch.isinf(lse[:, :, :masked]).all() and (lse[:, :, :masked] > 0).all()
    assert torch.equal(dq[:, :masked], torch.zeros_like(dq[:, :masked]))
    for t in (out, lse[:, :, masked:], dq, dk, dv):
        assert not torch.isnan(t).any()


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_backward(device):
    dtype = DEFAULT_DTYPE[device]
    q, k, v = make_qkv((2, 70, 90, 4, 2, 64, 64), device, dtype)
    dout = torch.randn(2, 70, 4, 64, device=device, dtype=dtype)
    runs = [torch.autograd.grad(flash_attn_func(q, k, v, causal=True, deterministic=True), (q, k, v), dout)
            for _ in range(2)]
    for a, b in zip(*runs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_allocated_late_or_early_agree(device):
    """The backward's gradients allocated after its first launch (the default) or before the library
    call (_C.set_late_gradients(False)): the same deterministic gradients, contiguous, of q, k, v's shapes."""
    dtype = DEFAULT_DTYPE[device]
    q, k, v = make_qkv((2, 70, 90, 4, 2, 64, 64), device, dtype)
    dout = torch.randn(2, 70, 4, 64, device=device, dtype=dtype)
    runs = []
    for late in (True, False):
        flashattn._C.set_late_gradients(late)
        try:
            runs.append(torch.autograd.grad(flash_attn_func(q, k, v, deterministic=True), (q, k, v), dout))
        finally:
            flashattn._C.set_late_gradients(True)
    for a, b, t in zip(*runs, (q, k, v)):
        assert a.shape == t.shape and a.is_contiguous() and a.device == t.device
        assert not torch.isnan(a).any()
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_grad_of_some_inputs_only(device):
    """Only v requires grad: the backward still runs and gives the reference dv."""
    dtype = DEFAULT_DTYPE[device]
    q, k, v = make_qkv((1, 16, 16, 2, 2, 64, 64), device, dtype, requires_grad=False)
    v.requires_grad_(True)
    out = flash_attn_func(q, k, v)
    dout = torch.randn_like(out)
    (dv,) = torch.autograd.grad(out, (v,), dout)
    out_ref, _ = reference.attention(q, k, v)
    out_pt, _ = reference.attention(q, k, v, upcast=False)
    (dv_ref,) = torch.autograd.grad(out_ref, (v,), dout.double())
    (dv_pt,) = torch.autograd.grad(out_pt, (v,), dout)
    reference.assert_by_rule("dv", dv, dv_ref, dv_pt, dtype)
