"""Context parallelism: exact attention over one sequence sharded along its length across the ranks of a
torch.distributed process group, by ring attention.

    import torch.distributed as dist
    from flashattn.context_parallel import ring_attention, zigzag_shard, zigzag_unshard

    rank, world = dist.get_rank(), dist.get_world_size()
    q, k, v = (zigzag_shard(t, rank, world) for t in (q_full, k_full, v_full))   # this rank's rows
    out = ring_attention(q, k, v, causal=True)                                   # this rank's rows of out

Ring attention (Liu, Zaharia, Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite
Context", 2023): every rank keeps its queries; the K/V shards travel once around the ring, each
rank attending to the block it holds while the next one is in flight, and the partial outputs are
merged exactly by their log-sum-exp. The backward sends the K/V blocks around again, each with its
dK/dV accumulator, which comes home after the full round.

Causal load balance, the "zigzag" layout (the idea of zhuzilin/ring-flash-attention; no code taken):
the sequence is cut into 2·world chunks and rank r holds chunks r and 2·world−1−r, so every rank
owns as many early (cheap) rows as late (expensive) ones, and every ring step costs every rank the
same half block (see _causal_step). The caller passes zigzag-sharded q, k, v for causal attention
(zigzag_shard) and gets out, its gradients and the LSE in the same layout (zigzag_unshard restores
the order). Non-causal attention does not care about the order: any sharding works, zigzag included.

Not done: sliding windows (window_size must be (-1, -1): NotImplementedError), varlen (packed)
batches, dropout. The per-block outputs and gradients come from the library's operators in the
inputs' dtype and are merged and summed in fp32; the final out, dq, dk, dv are rounded once more to
that dtype.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from . import _ops
from .interface import _flag, _pad_head_dims, _padded, _score_options_by_name, _with_mask

__all__ = ["ring_attention", "zigzag_shard", "zigzag_unshard"]


# ---- the zigzag layout --------------------------------------------------------------------------

def zigzag_shard(x: Tensor, rank: int, world: int, dim: int = 1) -> Tensor:
    """Rank `rank`'s shard of the full tensor x in the zigzag layout: x cut along `dim` into
    2·world equal chunks, of which this rank holds chunk `rank` followed by chunk 2·world−1−rank."""
    if not isinstance(x, Tensor):
        raise TypeError(f"flashattn: x must be a torch.Tensor, got {type(x).__name__}")
    if not (isinstance(world, int) and world >= 1):
        raise ValueError(f"flashattn: world = {world!r} must be a positive int")
    if not (isinstance(rank, int) and 0 <= rank < world):
        raise ValueError(f"flashattn: rank = {rank!r} must be an int in [0, world = {world})")
    if x.shape[dim] % (2 * world) != 0:
        raise ValueError(f"flashattn: x: length {x.shape[dim]} along dim {dim} is not divisible by "
                         f"2·world = {2 * world} (the zigzag layout cuts it into 2·world equal chunks)")
    chunks = x.chunk(2 * world, dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim)


def zigzag_unshard(shards: Sequence[Tensor], dim: int = 1) -> Tensor:
    """The full tensor from every rank's zigzag shard, given in rank order (the inverse of zigzag_shard)."""
    if len(shards) == 0:
        raise ValueError("flashattn: shards: empty, expected one shard per rank in rank order")
    for r, s in enumerate(shards):
        if s.shape[dim] % 2 != 0:
            raise ValueError(f"flashattn: shards[{r}]: odd length {s.shape[dim]} along dim {dim}, "
                             f"expected two equal chunks")
    early = [s.chunk(2, dim)[0] for s in shards]             # chunks 0 .. world−1
    late = [s.chunk(2, dim)[1] for s in reversed(shards)]    # chunks world .. 2·world−1
    return torch.cat(early + late, dim)


# ---- the ring -----------------------------------------------------------------------------------

class _InFlight:
    """Tensors on their way from the previous rank: wait() returns them once they have arrived. The
    tensors being sent are kept alive until then too."""

    def __init__(self, requests, sent: List[Tensor], received: List[Tensor]):
        self.requests, self.sent, self.received = requests, sent, received

    def wait(self) -> List[Tensor]:
        for request in self.requests:
            request.wait()
        return self.received


class _Ring:
    """The ranks of `group` in a ring: each sends to the next rank and receives from the previous one."""

    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.next = (self.rank + 1) % self.world
        self.previous = (self.rank - 1) % self.world

    def pass_on(self, tensors: Sequence[Tensor]) -> _InFlight:
        """Starts sending `tensors` to the next rank and receiving the previous rank's into fresh
        buffers of the same shapes; returns at once, so the caller computes while they travel.
        Each tensor has its own tag, so the transport cannot pair one message with another's buffer."""
        tensors = [t.contiguous() for t in tensors]
        received = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t, group=self.group, group_peer=self.next, tag=i)
               for i, t in enumerate(tensors)]
        ops += [dist.P2POp(dist.irecv, t, group=self.group, group_peer=self.previous, tag=i)
                for i, t in enumerate(received)]
        return _InFlight(dist.batch_isend_irecv(ops), tensors, received)

    def source(self, step: int) -> int:
        """The rank whose K/V block this rank holds at `step` of the round (its own at step 0)."""
        return (self.rank - step) % self.world


# ---- which part of a block is visible -----------------------------------------------------------

_ALL = slice(None)


def _causal_step(rank: int, source: int, front: slice, back: slice):
    """(query rows, key rows, causal) that rank's zigzag queries see of source's zigzag K/V block.

    Query chunks are a = rank (front half) and 2w−1−rank (back half), key chunks b = source and
    2w−1−source; under the causal mask chunk a sees chunk b entirely when a > b, its lower
    triangle when a == b, and nothing when a < b. So:
      source == rank: causal attention of the local rows on themselves (two diagonal chunks, the
                      back query chunk sees the whole front key chunk, the front query chunk nothing
                      of the back key chunk: exactly the causal mask of the local rows);
      source <  rank: every query row sees the front key chunk, no row sees the back one;
      source >  rank: the back query chunk sees both key chunks, the front query chunk neither.
    Off the diagonal every rank computes half a block at every step: that is the load balance."""
    if source == rank:
        return _ALL, _ALL, True
    if source < rank:
        return _ALL, front, False
    return back, _ALL, False


def _visible(ring: _Ring, step: int, causal: bool, seqlen: int):
    if not causal:
        return _ALL, _ALL, False
    half = seqlen // 2
    return _causal_step(ring.rank, ring.source(step), slice(0, half), slice(half, seqlen))


# ---- the forward: partial outputs merged by their log-sum-exp ------------------------------------

def _merge(out: Tensor, lse: Tensor, rows: slice, block_out: Tensor, block_lse: Tensor) -> None:
    """Merges a block's (out, lse) over some keys into the running (out, lse) of `rows`, in place:
    lse = log(exp(lse) + exp(block_lse)), out = exp(lse_old − lse)·out + exp(block_lse − lse)·block_out.
    out [b, s, h, d] fp32, lse [b, h, s] fp32. Every row of a computed block sees at least one key,
    so block_lse is finite."""
    out_rows, lse_rows = out[:, rows], lse[:, :, rows]
    merged = torch.logaddexp(lse_rows, block_lse)
    old_weight = torch.exp(lse_rows - merged).transpose(1, 2).unsqueeze(-1)    # [b, s, h, 1]
    block_weight = torch.exp(block_lse - merged).transpose(1, 2).unsqueeze(-1)
    out_rows.mul_(old_weight).add_(block_weight * block_out.float())
    lse_rows.copy_(merged)


class _RingAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, options, deterministic, path, ring):
        """options: _score_options' tuple for the whole sequence; each block's call gets it whole,
        with the block's own mask (_visible)."""
        causal, seqlen = options[1], q.shape[1]
        out = lse = None
        kv = (k, v)
        for step in range(ring.world):
            arriving = ring.pass_on(kv) if step + 1 < ring.world else None
            rows, keys, block_causal = _visible(ring, step, causal, seqlen)
            block_out, block_lse = _ops.attention(q[:, rows], kv[0][:, keys], kv[1][:, keys], None, None, 0, 0,
                                                  *_with_mask(options, block_causal), deterministic, path)
            if out is None:  # step 0 sees every row (its own block): it starts the running sums
                out, lse = block_out.float(), block_lse.float().contiguous()
            else:
                _merge(out, lse, rows, block_out, block_lse)
            if arriving is not None:
                kv = tuple(arriving.wait())
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (options, deterministic, path, ring)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        """Per block, the library's backward given the GLOBAL out and lse: it recomputes the block's
        probabilities exp(s − lse) (exact, not the block's own softmax) and D = rowsum(dout∘out)
        of the full row, so its dq, dk, dv are exactly that block's share of the gradients."""
        q, k, v, out, lse = ctx.saved_tensors
        options, deterministic, path, ring = ctx.options
        causal, seqlen = options[1], q.shape[1]
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        kv = (k, v)
        dkv = None            # the fp32 dK/dV accumulators of the block held, travelling with it
        dkv_arriving = None
        for step in range(ring.world):
            kv_arriving = ring.pass_on(kv) if step + 1 < ring.world else None
            rows, keys, block_causal = _visible(ring, step, causal, seqlen)
            block_dq, block_dk, block_dv = _ops.bwd(dout[:, rows], q[:, rows], kv[0][:, keys], kv[1][:, keys],
                                                    out[:, rows], lse[:, :, rows], None, None, 0, 0,
                                                    *_with_mask(options, block_causal), deterministic, path)
            dq[:, rows] += block_dq
            if dkv_arriving is not None:
                dkv = dkv_arriving.wait()
            else:  # step 0: this rank's own block starts its accumulators
                dkv = [torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in kv]
            dkv[0][:, keys] += block_dk
            dkv[1][:, keys] += block_dv
            if ring.world > 1:  # the last hop (after step world−1) brings them home
                dkv_arriving = ring.pass_on(dkv)
            if kv_arriving is not None:
                kv = tuple(kv_arriving.wait())
        dk, dv = dkv_arriving.wait() if ring.world > 1 else dkv
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None


# ---- the public function ------------------------------------------------------------------------

def _process_group(group):
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("flashattn: group: torch.distributed is not initialized (call "
                         "torch.distributed.init_process_group first)")
    if dist.get_rank(group) < 0:
        raise ValueError(f"flashattn: group: this process (global rank {dist.get_rank()}) is not a member of it")
    return group


def _check_shards(q, k, v, causal: bool) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"flashattn: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"flashattn: {name}: rank {t.dim()} (shape {list(t.shape)}), expected 4: "
                             f"[batch, seqlen/world, heads, headdim]")
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(f"flashattn: k, v: batch {k.shape[0]}, {v.shape[0]}, expected q's batch {q.shape[0]}")
    if k.shape[1:3] != v.shape[1:3]:
        raise ValueError(f"flashattn: v: shape {list(v.shape)}, expected k's seqlen and heads {list(k.shape[1:3])}")
    if q.shape[1] == 0 or k.shape[1] == 0:
        raise ValueError(f"flashattn: q, k: empty shards (seqlen {q.shape[1]}, {k.shape[1]}); every rank needs rows")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2] != 0:
        raise ValueError(f"flashattn: k: {k.shape[2]} heads do not divide q's {q.shape[2]} (GQA/MQA groups)")
    if causal:
        if q.shape[1] != k.shape[1]:
            raise ValueError(f"flashattn: k: seqlen {k.shape[1]} per rank, expected q's {q.shape[1]} (causal: one "
                             f"sequence, sharded alike)")
        if q.shape[1] % 2 != 0:
            raise ValueError(f"flashattn: q: seqlen {q.shape[1]} per rank is odd; causal needs the zigzag layout, two "
                             f"equal chunks per rank (the full seqlen divisible by 2·world: zigzag_shard)")


def ring_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, *, deterministic: bool = False,
                   return_lse: bool = False, group=None, path: str = "auto", **score_options):
    """Exact attention softmax(q kᵀ · softmax_scale) v over one sequence sharded across the ranks of
    `group` (default: the default process group), by ring attention. Every rank of the group calls it
    with its shards, all of the same shape; differentiable in q, k, v.

    Arguments:
        q: (batch, seqlen_q / world, heads, headdim), this rank's query rows.
        k, v: (batch, seqlen_k / world, heads_kv, headdim(_v)), this rank's key/value rows; heads a
            multiple of heads_kv (GQA/MQA).
        causal: the causal mask over the whole sequence. q, k, v must then be sharded in the zigzag
            layout (zigzag_shard; seqlen divisible by 2·world), and seqlen_q = seqlen_k.
        deterministic: the per-block backward's deterministic mode (the ring's order is fixed).
        return_lse: also return the log-sum-exp (batch, heads, seqlen_q / world), fp32.
        group: the torch.distributed process group over which the sequence is sharded.
        path: the kernel family of the per-block calls (flashattn.families()).
        score_options: flash_attn_func's score options by name, with its defaults, passed on whole to
            every block's call; window_size must be (-1, -1) (sliding windows across shards are not
            supported: NotImplementedError).
    Returns:
        out (batch, seqlen_q / world, heads, headdim_v), this rank's rows, in q's layout; with
        return_lse, (out, lse).
    """
    causal = _flag("causal", causal)
    _check_shards(q, k, v, causal)
    group = _process_group(group)
    window_size = score_options.get("window_size", (-1, -1))
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError(f"flashattn: window_size = {tuple(window_size)} is not supported by ring_attention "
                                  f"(sliding windows across shards); pass (-1, -1)")
    # Padding the head dims to the kernels' multiple outside the Function: autograd slices the gradients.
    q, k, v, hdim_qk, hdim_v = _pad_head_dims(q, k, v)
    options = _score_options_by_name(hdim_qk, causal=causal, **score_options)
    deterministic = _flag("deterministic", deterministic)
    if type(path) is not str:
        raise TypeError(f"flashattn: path must be a str, got {type(path).__name__} {path!r}")
    out, lse = _RingAttention.apply(q, k, v, options, deterministic, path, _Ring(group))
    if _padded(hdim_v):
        out = out[..., :hdim_v]
    return (out, lse) if return_lse else out
