// The sm80 backward's plan and run: what it supports, the workspace it needs and its layout (planned
// once per call), and the run: preprocess → main (→ split tail) → postprocess, all on params.stream,
// no synchronization; nothing else is launched (the preprocess also zeroes what the main kernel
// accumulates into).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <string>

#include "backend/status_try.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/sm80/bwd_launch.hpp"
#include "cuda/sm80/bwd_split.hpp"
#include "cuda/sm80/bwd_workspace.hpp"
#include "cuda/sm80/bwd_tile.cuh"
#include "cuda/sm80/instances.hpp"

namespace flashattn::cuda::sm80 {
namespace {

// The split (bwd_params.cuh): blocks run as k parts over consecutive ranges of their loop steps, in
// a second kernel; the parts add dK·scale and dV into fp32 sums, and each part costs its own
// prologue and reduction, counted as kPartOverheadSteps steps. For tiles with split_tail and scores
// of constant slope (scores.cuh's score_slope_varies; the conditions under which bwd_tail_kernel is
// compiled). Deterministic mode keeps each part's sums apart (bwd_epilogue.cuh), parts times the
// buffer: there the parts are capped so that it stays within kMaxOrderedSums bytes.
constexpr int64_t kPartOverheadSteps = 2, kMaxParts = 64, kMaxOrderedSums = int64_t{256} << 20;
// pair_dq_applies: under a mask, the query tiles a key block must walk at least for the pair to pay.
constexpr int64_t kPairMinMaskedTiles = 32;

// The most parts `tail` split blocks may have: kMaxParts, or in deterministic mode what keeps their
// separate sums within kMaxOrderedSums.
int64_t max_parts(const BwdParams& p, const BwdTile& tile, int64_t tail) {
  if (!p.deterministic || tail == 0) return kMaxParts;
  const int64_t slot = int64_t{2} * tile.block_n * tile.head_dim * int64_t{sizeof(float)};
  return std::min(kMaxParts, kMaxOrderedSums / (tail * slot));
}

// The longest an SM works on a span split of `tail` blocks of `steps` steps each cut into spans of
// `span` (bwd_params.cuh's tail_segment, which the kernel runs): a span's steps plus the overhead of
// each of its segments (one or two). tail · steps fits an int (the caller checks).
int64_t span_cost(int64_t tail, int64_t steps, int64_t span) {
  BwdKernelParams k;  // tail_segment reads only the split's fields
  k.split_tail = static_cast<int>(tail);
  k.split_block_steps = static_cast<int>(steps);
  k.split_span = static_cast<int>(span);
  const int spans = static_cast<int>((tail * steps + span - 1) / span);
  int64_t cost = 0;
  for (int j = 0; j < spans; ++j) {
    int64_t span_cost = 0;
    for (int half = 0; half < 2; ++half) {
      const BwdStepRange r = tail_segment(k, j, half).range;
      if (r.end <= r.begin) break;  // a span within one block has no second segment
      span_cost += r.end - r.begin + kPartOverheadSteps;
    }
    cost = std::max(cost, span_cost);
  }
  return cost;
}

// Without a mask every block walks the same steps. A grid of B such blocks on P multiprocessors ends
// with a wave of B mod P blocks that leaves the other SMs idle for a whole block's time (measured on
// the H200, s 16384 against 16896, whose grids are whole waves: 3 % of the backward at hdim 64, 128
// and 256). Splitting each of those last blocks into k parts shortens that wave to about
// ceil(tail·k / P) rounds of steps/k steps plus the parts' overhead; the rounds' rounding up still
// leaves SMs idle (hdim 256 at 4k on 132 SMs: 68 blocks of 64 steps, best k = 5 in 3 rounds of 13
// steps, 45 with the overhead, where the SMs' share is 33). The span split gives every SM that share
// (its blocks' steps laid end to end, cut into P spans, two segments where a span crosses blocks:
// 37 there). The cheaper of the best k and the spans, spans only if cheaper than whole blocks too
// (`steps`, no overhead: at 512 keys, 8 steps, spans of 5 cost 9 and measured 1-2 % slower on the
// H100). split_for sends no deterministic call here (its kernel, which keeps each part's sums
// apart, cuts equal parts only).
BwdSplit split_last_wave(const BwdParams& p, const BwdTile& tile, int num_sms, int64_t blocks) {
  const int64_t steps = (p.seqlen_q + tile.block_m - 1) / tile.block_m * p.group_size();
  const int64_t tail = blocks % num_sms;
  if (steps < 2 || tail == 0 || p.is_varlen()) return BwdSplit::whole(blocks);  // varlen: unknown, unequal lengths
  int64_t best_k = 1, best_cost = steps + kPartOverheadSteps;
  for (int64_t k = 2; k <= std::min(steps, max_parts(p, tile, tail)); ++k) {
    const int64_t cost = (tail * k + num_sms - 1) / num_sms * ((steps + k - 1) / k + kPartOverheadSteps);
    if (cost < best_cost) best_k = k, best_cost = cost;
  }
  const int64_t span = (tail * steps + num_sms - 1) / num_sms;
  const int64_t spans = (tail * steps + span - 1) / span;
  if (tail * steps <= INT_MAX && 2 * spans <= kMaxTailSegments &&
      span_cost(tail, steps, span) < std::min(best_cost, steps)) {
    BwdSplit s{static_cast<int>(blocks - tail), 1, static_cast<int>(tail)};
    s.span = static_cast<int>(span);
    s.block_steps = static_cast<int>(steps);
    return s;
  }
  if (best_k == 1) return BwdSplit::whole(blocks);
  return {static_cast<int>(blocks - tail), static_cast<int>(best_k), static_cast<int>(tail)};
}

// Under a mask a block walks group · (the query blocks that see its key block) steps, which differ
// by key block. When the longest block alone is longer than a multiprocessor's share of all the
// steps, no order of whole blocks fills the GPU: with few kv heads and sequences (MQA or GQA at batch
// 1) the first blocks run long after the others finish (MQA 32/1, batch 1, causal, 8k: at most a
// quarter of the GPU busy on average). Then every block runs as k parts, k such that the longest
// block's parts are about a quarter of that share (at least 16 overheads long), and the parts are
// handed out in the grid's order (longest blocks first where the tile has that order). The model
// (blocks to the SM that frees first, bench/bwd_schedule_sim.py --split) fills 0.87-0.995 of the GPU
// there. The split sums need blocks · 2 · block_n · head_dim floats; splitting only happens when
// blocks < 2 · P · (longest / mean), about 2 P under a causal mask and P under a window. Varlen: the
// host knows only the longest lengths, so it counts every sequence at them; that overstates all the
// steps, so where it splits, the real grid is chain-bound too (it may miss grids that are).
BwdSplit split_long_blocks(const BwdParams& p, const BwdTile& tile, int num_sms, int64_t blocks) {
  const auto [steps, longest] = chain_steps(p, tile.block_n, tile.block_m);
  if (longest * num_sms <= steps) return BwdSplit::whole(blocks);
  const int64_t piece = std::max(steps / (4 * num_sms), 16 * kPartOverheadSteps);
  const int64_t k = std::min((longest + piece - 1) / piece, max_parts(p, tile, blocks));
  if (k < 2 || blocks * k > INT_MAX) return BwdSplit::whole(blocks);
  return {0, static_cast<int>(k), static_cast<int>(blocks)};
}

}  // namespace

BwdChainSteps chain_steps(const BwdParams& p, int block_n, int block_m) {
  BwdChainSteps c;
  const int64_t num_n = (p.seqlen_k + block_n - 1) / block_n;
  if (!mask_of(p.options).has_mask()) {  // every key block sees every query block
    c.longest = (p.seqlen_q + block_m - 1) / block_m * p.group_size();
    c.steps = c.longest * num_n;
  } else {
    const Mask mask{static_cast<int>(p.seqlen_q), static_cast<int>(p.seqlen_k), clamp_window(p.options.window_left),
                    clamp_window(p.options.window_right)};
    for (int64_t n = 0; n < num_n; ++n) {
      const int64_t chain =
          int64_t{mask.m_block_count(static_cast<int>(n) * block_n, block_n, block_m)} * p.group_size();
      c.steps += chain;
      c.longest = std::max(c.longest, chain);
    }
  }
  c.steps *= p.heads_kv * p.batch;
  return c;
}

int tail_order(const BwdKernelParams& p, TailOrder& order) {
  const int64_t all = int64_t{p.split_tail} * p.split_block_steps;
  const int spans = static_cast<int>((all + p.split_span - 1) / p.split_span);
  // Keys: length above, the entry below, so that one sort orders by length and then by position.
  uint64_t keys[kMaxTailSegments];
  int count = 0;
  for (int j = 0; j < spans; ++j) {
    for (int half = 0; half < 2; ++half) {
      const BwdStepRange r = tail_segment(p, j, half).range;
      if (r.end <= r.begin) break;  // a span within one block has no second segment
      keys[count++] = uint64_t(r.end - r.begin) << 32 | uint64_t(kMaxTailSegments - 1 - (2 * j + half));
    }
  }
  std::sort(keys, keys + count, std::greater<>());
  for (int i = 0; i < count; ++i) order.segment[i] = static_cast<uint16_t>(kMaxTailSegments - 1 - (keys[i] & 0xffffffffu));
  return count;
}

BwdSplit split_for(const BwdParams& p, const BwdTile& tile, int num_sms) {
  const int64_t blocks = (p.seqlen_k + tile.block_n - 1) / tile.block_n * p.heads_kv * p.batch;
  const bool slope_varies = score_slope_varies(p.options);
  if (!tile.split_tail || slope_varies || num_sms <= 1 || blocks > INT_MAX / 2) {
    return BwdSplit::whole(blocks);
  }
  const bool has_mask = mask_of(p.options).has_mask();
  // Deterministic mode: every part takes its dQ turns (bwd_dq.cuh) in the key blocks' order, so the
  // parts of many blocks wait on each other. Measured on the H200 (MQA 32/1, causal, hdim 128):
  // split, 16 and 32 blocks ran 5-8x faster, 64-256 blocks up to 2x slower. There only grids of at
  // most a quarter of the SMs in blocks split, and only under a mask.
  if (p.deterministic && (!has_mask || blocks * 4 > num_sms)) return BwdSplit::whole(blocks);
  return has_mask ? split_long_blocks(p, tile, num_sms, blocks) : split_last_wave(p, tile, num_sms, blocks);
}

namespace {

// Whether the device takes the big-shared-memory tile (bwd_tile(.., true)).
bool use_big_tile(const DeviceInfo& dev, int head_dim) { return dev.smem_optin >= bwd_tile(head_dim, true).smem_bytes(); }

}  // namespace

// The grid's order (scheduler.cuh's bwd_block_index): key blocks outer where a mask with edges makes
// the blocks' lengths depend on their key block, so that the longest go first across the whole grid,
// on tiles made for it (BwdTile::longest_first). Deterministic mode keeps heads outer, the order its
// dQ turns (bwd_dq.cuh) were measured in. So do short MHA calls, where a head's few key blocks
// running together read its Q, dO and dQ sums from L2 and the fill gains little: measured (causal,
// path sm80, one process) on the H100 heads outer 1.03–1.04× at hdim 64 and 1.06–1.07× at 128 up
// to 2k keys, 0.96× at hdim 128 4k (bench/results/2026-12-06-h100-ceab873-variant-heads-outer-bwd.md);
// on the H200 (faster memory) 1.014–1.021× at hdim 64 512, 0.99–1.00× at 1k, and at hdim 128
// 0.99–1.00× at 512, 0.97× at 1k (docs/kernels-sm80-backward.md, "The grid order"). GQA keeps key blocks
// outer: its blocks are group-times longer, and the fill is what it needs (MQA 2k 1.5×).
constexpr int64_t kSlowHeadsOuterThroughSeqlenK = 2048;   // memory under kFastMemory, MHA, any tile
constexpr int64_t kFastHeadsOuterThroughSeqlenK64 = 512;  // kFastMemory or more, MHA, hdim 64
bool key_blocks_outer(const BwdParams& p, const BwdTile& tile, double memory_bandwidth) {
  if (!tile.longest_first || !mask_of(p.options).has_mask() || p.deterministic) return false;
  if (p.group_size() > 1) return true;
  if (memory_bandwidth < kFastMemory) return p.seqlen_k > kSlowHeadsOuterThroughSeqlenK;
  return tile.head_dim != 64 || p.seqlen_k > kFastHeadsOuterThroughSeqlenK64;
}

Status check_all_aligned(const BwdParams& p, const char* who) {
  const bool vl = p.is_varlen();
  const int64_t nb = vl ? 1 : p.batch;
  struct View {
    const char* name;
    const void* ptr;
    int64_t bs, rs, hs, rows, heads;
  };
  const View views[] = {
      {"q", p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, p.seqlen_q, p.heads_q},
      {"k", p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, p.seqlen_k, p.heads_kv},
      {"v", p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, p.seqlen_k, p.heads_kv},
      {"out", p.out, p.o_batch_stride, p.o_row_stride, p.o_head_stride, p.seqlen_q, p.heads_q},
      {"dout", p.dout, p.do_batch_stride, p.do_row_stride, p.do_head_stride, p.seqlen_q, p.heads_q},
      {"dq", p.dq, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride, p.seqlen_q, p.heads_q},
      {"dk", p.dk, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride, p.seqlen_k, p.heads_kv},
      {"dv", p.dv, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride, p.seqlen_k, p.heads_kv},
  };
  for (const View& v : views) {
    // varlen: the rows dimension is the packed one (always > 1 unless tiny); check it regardless.
    FLASHATTN_TRY(check_16byte_layout(who, v.name, v.ptr,
                                      {{"batch", nb, v.bs}, {"row", vl ? 2 : v.rows, v.rs}, {"head", v.heads, v.hs}}));
  }
  return Status::success();
}

WorkspaceLayout workspace_layout(const BwdParams& p, int head_dim, int block_m, int block_n, const BwdSplit& split) {
  constexpr std::size_t kAlign = 256;
  const auto up = [](std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; };
  const int bm = block_m;
  WorkspaceLayout w;
  w.split = split;
  w.rows = ws_rows(static_cast<int>(p.batch), p.total_q, p.is_varlen(), static_cast<int>(p.seqlen_q), bm);
  const std::size_t rows = static_cast<std::size_t>(w.rows) * static_cast<std::size_t>(p.heads_q);
  std::size_t off = 0;
  w.dq_accum = off;
  off = up(off + rows * head_dim * sizeof(float));
  w.lse_log2 = off;
  off = up(off + rows * sizeof(float));
  w.dsum = off;
  off = up(off + rows * sizeof(float));
  w.counters = off;
  off = up(off + rows / bm * sizeof(int32_t));
  w.tail_dkv = off;
  const std::size_t sums_per_block = p.deterministic ? w.split.parts : 1;  // bwd_epilogue.cuh
  off = up(off + std::size_t(w.split.tail) * sums_per_block * 2 * block_n * head_dim * sizeof(float));
  w.tail_done = off;
  off = up(off + std::size_t(w.split.tail) * sizeof(int32_t));
  w.bytes = off;
  return w;
}

BwdKernelParams kernel_params(const BwdParams& p, int head_dim, int block_m, int block_n, const WorkspaceLayout& w) {
  BwdKernelParams k;
  k.q = p.q;
  k.k = p.k;
  k.v = p.v;
  k.out = p.out;
  k.dout = p.dout;
  k.lse = p.lse;
  k.dq = p.dq;
  k.dk = p.dk;
  k.dv = p.dv;
  k.q_batch_stride = p.q_batch_stride, k.q_row_stride = p.q_row_stride, k.q_head_stride = p.q_head_stride;
  k.k_batch_stride = p.k_batch_stride, k.k_row_stride = p.k_row_stride, k.k_head_stride = p.k_head_stride;
  k.v_batch_stride = p.v_batch_stride, k.v_row_stride = p.v_row_stride, k.v_head_stride = p.v_head_stride;
  k.o_batch_stride = p.o_batch_stride, k.o_row_stride = p.o_row_stride, k.o_head_stride = p.o_head_stride;
  k.do_batch_stride = p.do_batch_stride, k.do_row_stride = p.do_row_stride, k.do_head_stride = p.do_head_stride;
  k.dq_batch_stride = p.dq_batch_stride, k.dq_row_stride = p.dq_row_stride, k.dq_head_stride = p.dq_head_stride;
  k.dk_batch_stride = p.dk_batch_stride, k.dk_row_stride = p.dk_row_stride, k.dk_head_stride = p.dk_head_stride;
  k.dv_batch_stride = p.dv_batch_stride, k.dv_row_stride = p.dv_row_stride, k.dv_head_stride = p.dv_head_stride;
  k.lse_batch_stride = p.lse_batch_stride, k.lse_head_stride = p.lse_head_stride;
  k.cu_seqlens_q = p.cu_seqlens_q;
  k.cu_seqlens_k = p.cu_seqlens_k;
  k.batch = static_cast<int>(p.batch);
  k.seqlen_q = static_cast<int>(p.seqlen_q);
  k.seqlen_k = static_cast<int>(p.seqlen_k);
  k.heads_q = static_cast<int>(p.heads_q);
  k.heads_kv = static_cast<int>(p.heads_kv);
  k.group = static_cast<int>(p.group_size());
  k.hdim_qk = static_cast<int>(p.hdim_qk);
  k.hdim_v = static_cast<int>(p.hdim_v);
  k.window_left = clamp_window(p.options.window_left);
  k.window_right = clamp_window(p.options.window_right);
  k.scale = softmax_scale(p.options);
  k.scores = make_score_transform(p.options);
  k.score_slope = make_score_slope(k.scores);
  k.deterministic = p.deterministic;
  char* ws = static_cast<char*>(p.workspace);
  k.dq_accum = reinterpret_cast<float*>(ws + w.dq_accum);
  k.lse_log2 = reinterpret_cast<float*>(ws + w.lse_log2);
  k.dsum = reinterpret_cast<float*>(ws + w.dsum);
  k.counters = reinterpret_cast<int32_t*>(ws + w.counters);
  k.ws_rows = w.rows;
  k.head_dim = head_dim;
  k.block_m = block_m;
  k.num_m_blocks = static_cast<int>((p.seqlen_q + block_m - 1) / block_m);
  k.num_n_blocks = static_cast<int>((p.seqlen_k + block_n - 1) / block_n);
  k.split_first = w.split.first;
  k.split_tail = w.split.tail;
  k.split_parts = w.split.parts;
  k.split_span = w.split.span;
  k.split_block_steps = w.split.block_steps;
  k.tail_dkv = reinterpret_cast<float*>(ws + w.tail_dkv);
  k.tail_done = reinterpret_cast<int32_t*>(ws + w.tail_done);
  k.tail_zero_vec4 = static_cast<int64_t>((w.bytes - w.tail_dkv) / 16);
  return k;
}

namespace {

struct BwdPlanDetail {
  BwdRunFn launch_main;
  int head_dim;
  bool big_smem;
  bool key_blocks_outer;
  bool pair_dq;
  WorkspaceLayout workspace;
};

}  // namespace

bool pair_dq_applies(const BwdParams& p, const BwdTile& tile, bool sm90_ptx, const BwdSplit& split) {
  if (!tile.pair_dq || !sm90_ptx || p.deterministic || p.is_varlen() || score_slope_varies(p.options)) {
    return false;
  }
  // Pairs are grid blocks 2i and 2i + 1: key blocks 2c and 2c + 1 of one head when a head has an
  // even number of key blocks (scheduler.cuh's bwd_block_index, heads outer); the split tail runs
  // unpaired after the first split_first blocks, so that count must be even too.
  const int64_t num_n = (p.seqlen_k + tile.block_n - 1) / tile.block_n;
  if (num_n % 2 != 0 || split.first <= 0 || split.first % 2 != 0) return false;
  // Under a mask each block also walks its partner's extra query tile (masked whole): one more step
  // in a chain of `longest / group`. Measured on the H100 (hdim 256 causal): −4 % at 512 keys (8
  // tiles), a tie at 1k (16), +4…+10 % from 2k (32) on.
  return !mask_of(p.options).has_mask() ||
         chain_steps(p, tile.block_n, tile.block_m).longest >= kPairMinMaskedTiles * p.group_size();
}

Status plan_backward(const BwdParams& p, Plan* plan) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return Status::unsupported(std::string("cuda sm80 backward: dtype ") + to_string(p.dtype) +
                               " is not supported (f16 and bf16 only)");
  }
  const Instance* inst = find_instance(std::max(p.hdim_qk, p.hdim_v));
  if (inst == nullptr) {
    return Status::unsupported("cuda sm80 backward: head dims (hdim_qk = " + std::to_string(p.hdim_qk) +
                               ", hdim_v = " + std::to_string(p.hdim_v) +
                               ") need a compiled head-dim instance at least as large; this build has " +
                               compiled_head_dims() + " (CMake option FLASHATTN_HEADDIMS)");
  }
  const int head_dim = inst->head_dim;
  if (p.seqlen_q > kMaxSeqlen || p.seqlen_k > kMaxSeqlen) {
    return Status::unsupported("cuda sm80 backward: sequence lengths above " + std::to_string(kMaxSeqlen) +
                               " are not supported (seqlen_q = " + std::to_string(p.seqlen_q) +
                               ", seqlen_k = " + std::to_string(p.seqlen_k) + ")");
  }
  if (p.batch > INT_MAX || p.heads_q > INT_MAX) {
    return Status::unsupported("cuda sm80 backward: batch = " + std::to_string(p.batch) + " or heads_q = " +
                               std::to_string(p.heads_q) + " exceeds 2^31 - 1");
  }
  const BwdTile tile = bwd_tile(head_dim, false);
  const int64_t n_blocks = (p.seqlen_k + tile.block_n - 1) / tile.block_n * p.heads_kv * p.batch;
  const int64_t m_blocks = (p.seqlen_q + tile.block_m - 1) / tile.block_m * p.heads_q * p.batch;
  if (n_blocks > INT_MAX || m_blocks > INT_MAX) {
    return Status::unsupported("cuda sm80 backward: the problem needs more than 2^31 - 1 thread blocks");
  }
  FLASHATTN_TRY(check_all_aligned(p, "cuda sm80 backward"));
  DeviceInfo dev;
  FLASHATTN_TRY(device_info(&dev));
  if (dev.cc_major < 8) {
    return Status::unsupported("cuda sm80 backward: needs compute capability >= 8.0, the current device has " +
                               std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor));
  }
  if (dev.smem_optin < tile.smem_bytes()) {
    return Status::unsupported("cuda sm80 backward: head dim " + std::to_string(head_dim) + " needs " +
                               std::to_string(tile.smem_bytes()) + " bytes of shared memory per block, the device " +
                               "allows " + std::to_string(dev.smem_optin));
  }
  const bool big_smem = use_big_tile(dev, head_dim);
  const int i = dtype_index(p.dtype);
  bool pair_ptx = false;
  FLASHATTN_TRY(inst->bwd_check[i](big_smem, &pair_ptx));
  const BwdSplit split = split_for(p, tile, dev.num_sms);
  const BwdPlanDetail d{inst->bwd_run[i],
                        head_dim,
                        big_smem,
                        key_blocks_outer(p, tile, dev.memory_bandwidth),
                        pair_dq_applies(p, bwd_tile(head_dim, big_smem), pair_ptx, split),
                        workspace_layout(p, head_dim, tile.block_m, tile.block_n, split)};
  plan->workspace_bytes = d.workspace.bytes;
  plan->workspace_alignment = 16;  // the kernels' vector loads and stores of the fp32 sums
  plan->set(d);
  return Status::success();
}

Status gradients_into(const BwdParams& p, BwdKernelParams* k) {
  GradientPointers g;
  FLASHATTN_TRY(gradient_pointers(p, &g));
  k->dq = g.dq;
  k->dk = g.dk;
  k->dv = g.dv;
  return Status::success();
}

Status run_backward(const Plan& plan, const BwdParams& p) {
  const BwdPlanDetail d = plan.get<BwdPlanDetail>();
  const WorkspaceLayout& w = d.workspace;
  const BwdTile tile = bwd_tile(d.head_dim, false);
  BwdKernelParams k = kernel_params(p, d.head_dim, tile.block_m, tile.block_n, w);
  k.key_blocks_outer = d.key_blocks_outer;
  k.pair_dq = d.pair_dq;
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  FLASHATTN_TRY(launch_bwd_preprocess(k, p.dtype, stream));
  FLASHATTN_TRY(gradients_into(p, &k));
  FLASHATTN_TRY(d.launch_main(k, stream, d.big_smem));
  return launch_bwd_postprocess(k, p.dtype, stream);
}

}  // namespace flashattn::cuda::sm80
