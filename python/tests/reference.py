"""The oracle: naive attention that materializes the scores, in float64 on upcast inputs (the
reference) or in the inputs' own precision (the same-precision naive run the error rule compares to).
Plain PyTorch ops, differentiable, so gradients come from autograd."""
import torch

INF = float("inf")


def visible(seqlen_q, seqlen_k, causal, window, device):
    """[seqlen_q, seqlen_k] bool: query i sees key j (flash-attn's bottom-right aligned masks)."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(seqlen_q, device=device).view(-1, 1)
    j = torch.arange(seqlen_k, device=device).view(1, -1)
    diag = seqlen_k - seqlen_q
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if right >= 0:
        ok &= j <= i + diag + right
    if left >= 0:
        ok &= j >= i + diag - left
    return ok


def attention(q, k, v, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0, upcast=True):
    """q [b, sq, h, d], k [b, sk, hk, d], v [b, sk, hk, dv] → out [b, sq, h, dv], lse [b, h, sq] (fp32 or f64).

    upcast=True computes in float64 (the reference); False in the inputs' dtype (the naive run).
    Fully masked rows give out = 0, lse = +inf and zero gradients (never NaN)."""
    dtype = torch.float64 if upcast else q.dtype
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    ok = visible(q.shape[1], k.shape[1], causal, window, q.device)
    s = s.masked_fill(~ok, -INF)
    row_ok = ok.any(-1, keepdim=True)  # [sq, 1]
    lse = torch.logsumexp(s, dim=-1)
    lse = lse.masked_fill(~row_ok.squeeze(-1), INF)
    p = torch.softmax(torch.where(row_ok, s, torch.zeros_like(s)), dim=-1)
    p = torch.where(row_ok, p, torch.zeros_like(p))
    out = torch.einsum("bhqk,bkhd->bqhd", p.to(v.dtype), v)
    return out, lse


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, **kw):
    """The same per sequence of a packed batch: q [total_q, h, d] → out [total_q, h, dv], lse [h, total_q]."""
    outs, lses = [], []
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        qb = q[cq[b]:cq[b + 1]].unsqueeze(0)
        kb, vb = k[ck[b]:ck[b + 1]].unsqueeze(0), v[ck[b]:ck[b + 1]].unsqueeze(0)
        o, l = attention(qb, kb, vb, **kw)
        outs.append(o[0])
        lses.append(l[0])
    return torch.cat(outs, 0), torch.cat(lses, 1)


# Slack added to the rule. fp16/bf16: the C++ suites' atol (docs/testing.md), 2·u·(max|ref| + 0.3) with
# u the unit roundoff, as in FlashAttention: two roundings at the output's magnitude. (A flat 3e-4
# for fp16 was under one rounding of outputs in [1, 2): fresh seeds failed a correct CPU fp16 dk of
# magnitude ~1 by one ulp, 9.8e-4 against a bound of 8.0e-4.) fp32: 1e-5·max(1, max|ref|).
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def atol_of(dtype, max_abs_ref):
    if dtype == torch.float32:
        return 1e-5 * max(1.0, max_abs_ref)
    return 2 * UNIT_ROUNDOFF[dtype] * (max_abs_ref + 0.3)


def assert_by_rule(name, got, ref, naive, dtype):
    """|got − ref| ≤ 2·|naive − ref| + atol (max abs), ref in float64. NaN anywhere fails."""
    got, ref, naive = got.double(), ref.double(), naive.double()
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    inf = torch.isinf(ref)
    if inf.any():  # +inf lse of fully masked rows must be reproduced exactly
        assert torch.equal(got[inf], ref[inf]), f"{name}: expected +inf where the row sees no key"
        got, ref, naive = got[~inf], ref[~inf], naive[~inf]
    assert not torch.isnan(got).any(), f"{name}: NaN in {int(torch.isnan(got).sum())} elements (unwritten?)"
    if got.numel() == 0:
        return
    err = (got - ref).abs().max().item()
    base = (naive - ref).abs().max().item()
    atol = atol_of(dtype, ref.abs().max().item())
    assert err <= 2 * base + atol, f"{name}: max|out − ref| = {err:.3e} > 2 × {base:.3e} + {atol:.1e}"
