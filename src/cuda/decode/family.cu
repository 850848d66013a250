// The decode family: the KV-cache call (kvcache_forward) on the GPU, Flash-Decoding style. Its plan
// checks the call, picks the attention instance and the number of key splits, and lays out the
// workspace; its run launches, on the caller's stream and without synchronizing or allocating (so a
// CUDA graph can capture it):
//   1. append (prepare.cu): k_new (rotated) and v_new into the cache, when given;
//   2. rotate q into the workspace (prepare.cu), when rotary tables are given;
//   3. attention (attend_kernel.cuh) over (split, packed-row tile, kv head, sequence);
//   4. combine (combine.cu), when split: the partials merged by their LSE into out and lse.
// A call with many query rows (chunked prefill) takes the forward instead of steps 3 and 4
// (forward_route.hpp), planned here and run in this family's workspace.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "backend/status_try.hpp"
#include "backend/testing.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/host_runtime.hpp"
#include "cuda/common/instances.hpp"
#include "cuda/common/mask.cuh"
#include "cuda/cuda_backend.hpp"
#include "cuda/decode/forward_route.hpp"
#include "cuda/decode/launch.hpp"
#include "cuda/decode/shape.cuh"
#include "cuda/sm90/tensor_map.hpp"
#include "decode/instances.h"

namespace flashattn::cuda {
namespace decode {
namespace {

constexpr const char* kWho = "cuda decode";
constexpr int kBlockM = 16;  // DecodeTraits::kBlockM of every instance
constexpr int kBlockN = 64;  // DecodeTraits::kBlockN of every instance (decode_shape)
static_assert(decode_shape(64).block_n == kBlockN && decode_shape(128).block_n == kBlockN &&
              decode_shape(256).block_n == kBlockN, "one key block size for every instance");
constexpr int64_t kMaxGridYZ = 65535;

struct Instance {
  int head_dim;
  AttendRunFn run[2];  // [dtype]: f16, bf16
  AttendCheckFn check[2];
  std::size_t smem_bytes[kAttendLoadsKinds][2];  // [AttendLoads][paged]: a thread block's shared memory (f16 = bf16)
};

template <int D, AttendLoads kLoads>
constexpr std::size_t smem_of(bool paged) {
  return paged ? DecodeTraits<ptx::BF16, D, true, kLoads>::kSmemBytes : DecodeTraits<ptx::BF16, D, false, kLoads>::kSmemBytes;
}
#define FLASHATTN_DECODE_SMEM(D, loads) {smem_of<D, AttendLoads::loads>(false), smem_of<D, AttendLoads::loads>(true)}
#define FLASHATTN_DECODE_REGISTER(D)                                                                      \
  Instance{D, {&attend_run<ptx::F16, D>, &attend_run<ptx::BF16, D>},                                       \
           {&attend_device_check<ptx::F16, D>, &attend_device_check<ptx::BF16, D>},                       \
           {FLASHATTN_DECODE_SMEM(D, cp_async), FLASHATTN_DECODE_SMEM(D, tma), FLASHATTN_DECODE_SMEM(D, producer_cp_async)}},
constexpr Instance kNoInstance{0, {nullptr, nullptr}, {nullptr, nullptr}, {{0, 0}, {0, 0}, {0, 0}}};
// kNoInstance first keeps the array non-empty when no head dim of the build has an instance.
const Instance kInstances[] = {kNoInstance, FLASHATTN_DECODE_HEADDIMS(FLASHATTN_DECODE_REGISTER)};
#undef FLASHATTN_DECODE_REGISTER
#undef FLASHATTN_DECODE_SMEM

const Instance* find_instance(int64_t head_dim) { return smallest_instance_holding(kInstances, head_dim); }

// Workspace: [rotated q][partial lse][partial out], or through the forward [rotated q][sequence
// index][the forward's workspace]; each part 256-byte aligned, absent parts empty.
struct Layout {
  std::size_t q_rotated = 0, partial_lse = 0, partial_out = 0, index = 0, forward = 0, bytes = 0;
};

std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

std::size_t rotated_q_end(const KVCacheParams& p) {
  if (p.rotary_cos == nullptr) return 0;
  return align256(static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads_q * p.hdim_qk) * 2);
}

Layout forward_route_layout(const KVCacheParams& p, const ForwardRoute& route) {
  Layout l;
  l.index = rotated_q_end(p);
  l.forward = align256(l.index + sequence_index_bytes(p));
  l.bytes = align256(l.forward + route.workspace_bytes);
  return l;
}

Layout workspace_layout(const KVCacheParams& p, int num_splits) {
  Layout l;
  std::size_t at = rotated_q_end(p);
  if (num_splits > 1) {
    const std::size_t rows = static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q);
    l.partial_lse = at;
    at = align256(at + num_splits * rows * sizeof(float));
    l.partial_out = at;
    at = align256(at + num_splits * rows * static_cast<std::size_t>(p.hdim_v) * sizeof(float));
  }
  l.bytes = at;
  return l;
}

struct PlanDetail {
  AttendRunFn run;  // null when the route runs the call
  AttendLoads loads;
  int num_splits;
  Layout layout;
  ForwardRoute route;
};

int num_m_blocks(const KVCacheParams& p) {
  return static_cast<int>((p.group_size() * p.seqlen_q + kBlockM - 1) / kBlockM);
}

// Key blocks one of s splits walks.
int64_t split_steps(int64_t key_blocks, int s) { return std::max<int64_t>((key_blocks + s - 1) / s, kMinBlocksPerSplit); }

// Thread blocks of `smem_bytes` that fit on one SM: the per-block opt-in limit is the SM's shared
// memory less the 1 KB the runtime reserves per block (228 KB and 227 KB on the H100/H200).
int64_t blocks_per_sm(const DeviceInfo& dev, std::size_t smem_bytes) {
  constexpr int64_t kReserved = 1024;
  return std::max<int64_t>(1, (int64_t{dev.smem_optin} + kReserved) / (static_cast<int64_t>(smem_bytes) + kReserved));
}

// The splits of `key_blocks` key blocks for `blocks` thread blocks on `slots` slots: a split of s
// walks ceil(key_blocks / s) key blocks (at least kMinBlocksPerSplit) plus about kSplitOverhead
// blocks' worth of fixed work (Q, the warps' merge, the partials), in ceil(blocks · s / slots)
// rounds; the s ≤ kMaxSplits of the least rounds × (steps + overhead), the fewest among equals. A
// grid that fills 80 % of the slots is not split (more splits only add partials and a combine).
int best_splits(int64_t blocks, int64_t key_blocks, int64_t slots) {
  if (blocks == 0 || key_blocks == 0 || 5 * blocks >= 4 * slots) return 1;
  constexpr int64_t kSplitOverhead = 3;
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int s = 1; s <= kMaxSplits; ++s) {
    const int64_t rounds = (blocks * s + slots - 1) / slots;
    const int64_t cost = rounds * (split_steps(key_blocks, s) + kSplitOverhead);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

// Splits of each sequence's keys, from the shapes, the cache's capacity and the SM count (never the
// cache lengths, which live on the device), by best_splits over the grid of blocks = batch · heads_kv
// · row tiles. Slots: one per SM, paged or not, when a kv head has one 16-row tile (measured at batch
// 1 × 32k, page 16, since the table entries travel with the K/V loads: 16 splits 3–5 % faster than
// 32). With more row tiles a block does several tiles' math per K/V byte, and a second block per SM
// hides its latency: as many per SM as fit (two at D ≤ 128 on an H100/H200), as long as each split
// still walks kMinStepsTwoSlots key blocks; shorter splits pay more in partials and their combine
// than the second block wins. Measured on the H200, same process (docs/kvcache.md): GQA 32/8 with
// 16–64 query tokens at batch 1–2 1.02–1.20 × the one-slot choice; MQA 32/1 at batch 8–32 1.1–1.26 ×,
// but 0.79–0.88 × at batch 1 × 8k–32k, where the splits would walk 2–4 key blocks. Also measured:
// at batch 1 × 8 kv heads and one tile, 16 splits (8 key blocks each at 8k keys) ran 9 % faster than
// 15 (9 for the longest), 33 slower. A caller's num_splits wins. The kernel spreads a sequence's real
// key blocks evenly over the splits.
int choose_splits(const KVCacheParams& p, const DeviceInfo& dev, const Instance& inst, AttendLoads loads) {
  if (p.num_splits > 0) return p.num_splits < kMaxSplits ? p.num_splits : kMaxSplits;
  constexpr int64_t kMinStepsTwoSlots = 16;
  const int64_t blocks = p.batch * p.heads_kv * num_m_blocks(p);
  const int64_t block_n = decode_shape(inst.head_dim).block_n;
  const int64_t key_blocks = (p.seqlen_k + block_n - 1) / block_n;
  const int one_slot = best_splits(blocks, key_blocks, dev.num_sms);
  const int64_t per_sm = blocks_per_sm(dev, inst.smem_bytes[static_cast<int>(loads)][p.is_paged()]);
  if (num_m_blocks(p) == 1 || per_sm == 1) return one_slot;
  const int more_slots = best_splits(blocks, key_blocks, per_sm * dev.num_sms);
  return split_steps(key_blocks, more_slots) >= kMinStepsTwoSlots ? more_slots : one_slot;
}

// The tensor map of one side of the cache for TMA loads (attend_kernel.cuh's TmaBlocks): [hdim,
// heads_kv, rows, batch_cache] contiguous, [hdim, heads_kv, page_size, num_pages] paged, 64-column
// boxes of one kv head and kBlockN rows (paged: min(page size, kBlockN)).
sm90::TileMapSpec cache_map_spec(const KVCacheParams& p, bool v_side) {
  sm90::TileMapSpec m;
  m.data = v_side ? p.v : p.k;
  m.rank = 4;
  m.dims[0] = v_side ? p.hdim_v : p.hdim_qk;
  m.dims[1] = p.heads_kv;
  m.dims[2] = p.is_paged() ? p.page_size : p.seqlen_k;
  m.dims[3] = p.is_paged() ? p.num_pages : p.batch_cache;
  m.strides[0] = 1;
  m.strides[1] = v_side ? p.v_head_stride : p.k_head_stride;
  m.strides[2] = v_side ? p.v_row_stride : p.k_row_stride;
  m.strides[3] = v_side ? p.v_batch_stride : p.k_batch_stride;
  m.box[0] = 64;
  m.box[1] = 1;
  m.box[2] = static_cast<int>(p.is_paged() ? std::min<int64_t>(p.page_size, kBlockN) : kBlockN);
  m.box[3] = 1;
  m.swizzle = ptx::Swizzle::b128;
  return m;
}

// Whether TMA can load this call's K/V blocks: an sm_90 GPU, pages that hold whole key blocks or a
// whole number of at least 8 keys per block, and caches TMA can tile.
Status tma_fits(const KVCacheParams& p, const DeviceInfo& dev) {
  if (dev.cc_major < 9) return Status::unsupported(std::string(kWho) + ": TMA loads need compute capability >= 9.0");
  if (p.is_paged() && p.page_size % kBlockN != 0 && (kBlockN % p.page_size != 0 || p.page_size < 8)) {
    return Status::unsupported(std::string(kWho) + ": TMA loads need pages of 8, 16, 32 or a multiple of 64 keys");
  }
  FLASHATTN_TRY(sm90::check_tile_map(p.dtype, cache_map_spec(p, false), kWho));
  return sm90::check_tile_map(p.dtype, cache_map_spec(p, true), kWho);
}

// How the attention kernel loads K/V (shape.cuh's AttendLoads), on an sm_90 GPU with an sm_90 image:
// paged caches whose pages hold whole key blocks (64, 256, ...) by TMA, other pages by the cp.async
// producer warpgroup; contiguous caches and every other GPU by every thread's cp.async. Measured
// (docs/kvcache.md, "TMA loads" and "The cp.async producer"): at batch 1 × 8k (an L2-resident call,
// one thread block per SM) pages of 64 and 256 went from 0.86 to 1.05 × the contiguous call on TMA
// (H200), pages of 16 from 0.89 to 0.98 on the producer (H100), which reads pages of 16 at 1.00–1.11 ×
// every thread's cp.async on every decode row; contiguous caches read 1–3 % slower on TMA at some rows
// and within 0–2 % of cp.async on the producer. A test or a benchmark may force any
// (testing::DecodeLoads).
Status choose_loads(const KVCacheParams& p, const DeviceInfo& dev, const Instance& inst, int dtype, AttendLoads* loads) {
  const testing::DecodeLoads asked = testing::decode_loads();
  if (asked == testing::DecodeLoads::tma) {
    *loads = AttendLoads::tma;
    FLASHATTN_TRY(tma_fits(p, dev));
    return inst.check[dtype](p.is_paged(), *loads);
  }
  if (asked == testing::DecodeLoads::producer_cp_async) {
    *loads = AttendLoads::producer_cp_async;
    if (dev.cc_major < 9) {
      return Status::unsupported(std::string(kWho) + ": the cp.async producer needs compute capability >= 9.0");
    }
    return inst.check[dtype](p.is_paged(), *loads);
  }
  *loads = AttendLoads::cp_async;
  // The cheap tests first: a call that cannot take a producer builds no Status message per call.
  if (asked == testing::DecodeLoads::automatic && dev.cc_major >= 9 && p.is_paged()) {
    if (p.page_size % kBlockN == 0) {
      if (tma_fits(p, dev).ok() && inst.check[dtype](true, AttendLoads::tma).ok()) {
        *loads = AttendLoads::tma;
        return Status::success();
      }
    } else if (inst.check[dtype](true, AttendLoads::producer_cp_async).ok()) {
      *loads = AttendLoads::producer_cp_async;
      return Status::success();
    }
  }
  return inst.check[dtype](p.is_paged(), *loads);
}

Status check_sizes(const KVCacheParams& p) {
  const auto too_big = [&](const char* what, int64_t value, int64_t limit) {
    return Status::unsupported(std::string(kWho) + ": " + what + " = " + std::to_string(value) + " is above " +
                               std::to_string(limit) + ", the most the decode kernels take");
  };
  if (p.seqlen_k > kMaxSeqlen) return too_big("the cache's capacity per sequence", p.seqlen_k, kMaxSeqlen);
  if (p.batch > kMaxGridYZ) return too_big("batch", p.batch, kMaxGridYZ);
  if (p.heads_kv * num_m_blocks(p) > kMaxGridYZ) {
    return too_big("heads_kv x ceil(heads_q / heads_kv x seqlen_q / 16)", p.heads_kv * num_m_blocks(p), kMaxGridYZ);
  }
  if (p.batch * p.heads_q * p.seqlen_q > INT_MAX / 2) return too_big("batch x heads_q x seqlen_q", p.batch * p.heads_q * p.seqlen_q, INT_MAX / 2);
  if (p.num_pages > INT_MAX) return too_big("num_pages", p.num_pages, INT_MAX);
  if (p.batch_cache > INT_MAX) return too_big("batch_cache", p.batch_cache, INT_MAX);
  if (p.seqlen_rotary > INT_MAX) return too_big("seqlen_rotary", p.seqlen_rotary, INT_MAX);
  if (p.hdim_qk % 8 != 0 || p.hdim_v % 8 != 0) {
    return Status::unsupported(std::string(kWho) + ": hdim_qk = " + std::to_string(p.hdim_qk) + ", hdim_v = " +
                               std::to_string(p.hdim_v) + ": head dims must be multiples of 8 (16-byte loads)");
  }
  return Status::success();
}

// q, the caches and out as the 16-byte loads and stores see them.
Status check_layout(const KVCacheParams& p) {
  const int64_t cache_rows = p.is_paged() ? p.num_pages : p.batch_cache;
  const int64_t cache_len = p.is_paged() ? p.page_size : p.seqlen_k;
  FLASHATTN_TRY(check_16byte_layout(kWho, "q", p.q, {{"batch", p.batch, p.q_batch_stride}, {"row", p.seqlen_q, p.q_row_stride},
                                                     {"head", p.heads_q, p.q_head_stride}}));
  FLASHATTN_TRY(check_16byte_layout(kWho, "k_cache", p.k, {{"batch", cache_rows, p.k_batch_stride},
                                                           {"row", cache_len, p.k_row_stride},
                                                           {"head", p.heads_kv, p.k_head_stride}}));
  FLASHATTN_TRY(check_16byte_layout(kWho, "v_cache", p.v, {{"batch", cache_rows, p.v_batch_stride},
                                                           {"row", cache_len, p.v_row_stride},
                                                           {"head", p.heads_kv, p.v_head_stride}}));
  return check_16byte_layout(kWho, "out", p.out, {{"batch", p.batch, p.o_batch_stride}, {"row", p.seqlen_q, p.o_row_stride},
                                                  {"head", p.heads_q, p.o_head_stride}});
}

Status plan_kvcache(const KVCacheParams& p, Plan* plan) {
  DeviceInfo dev;
  FLASHATTN_TRY(device_info(&dev));
  ForwardRoute route;
  if (wants_forward_route(p, dev.num_sms) && plan_forward_route(p, &route).ok()) {
    const Layout layout = forward_route_layout(p, route);
    plan->workspace_bytes = layout.bytes;
    plan->workspace_alignment = std::max<std::size_t>(16, route.workspace_alignment);
    plan->set(PlanDetail{nullptr, AttendLoads::cp_async, 1, layout, route});
    return Status::success();
  }
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return Status::unsupported(std::string(kWho) + ": dtype " + to_string(p.dtype) +
                               " is not supported: the tensor-core kernels take f16 or bf16 (f32 runs on the CPU backend)");
  }
  const int64_t need = p.hdim_qk > p.hdim_v ? p.hdim_qk : p.hdim_v;
  const Instance* inst = find_instance(need);
  if (inst == nullptr) {
    return Status::unsupported(std::string(kWho) + ": head dim " + std::to_string(need) +
                               " (max of hdim_qk, hdim_v) has no compiled decode instance: this build has \"" +
                               FLASHATTN_DECODE_HEADDIMS_STRING + "\" (FLASHATTN_HEADDIMS among 64, 128, 256)");
  }
  if (dev.cc_major < 8) {
    return Status::unsupported(std::string(kWho) + ": needs compute capability >= 8.0, the current device has " +
                               std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor));
  }
  FLASHATTN_TRY(check_sizes(p));
  FLASHATTN_TRY(check_layout(p));
  const int i = dtype_index(p.dtype);
  AttendLoads loads;
  FLASHATTN_TRY(choose_loads(p, dev, *inst, i, &loads));
  const int splits = choose_splits(p, dev, *inst, loads);
  const Layout layout = workspace_layout(p, splits);
  plan->workspace_bytes = layout.bytes;
  plan->workspace_alignment = layout.bytes > 0 ? 16 : 1;  // the kernels store 16-byte vectors into it
  plan->set(PlanDetail{inst->run[i], loads, splits, layout, {}});
  return Status::success();
}

CacheIndex cache_index(const KVCacheParams& p) {
  CacheIndex x{};
  x.cache_seqlens = p.cache_seqlens;
  x.cache_batch_idx = p.cache_batch_idx;
  x.cache_leftpad = p.cache_leftpad;
  x.block_table = p.block_table;
  x.block_table_batch_stride = p.block_table_batch_stride;
  x.page_size = FastDivmod::of(p.is_paged() ? static_cast<int>(p.page_size) : 1);
  x.num_pages = static_cast<int>(p.num_pages);
  x.batch_cache = static_cast<int>(p.batch_cache);
  x.capacity = static_cast<int>(p.seqlen_k);
  x.seqlen_new = static_cast<int>(p.seqlen_new);
  return x;
}

RotaryTables rotary_tables(const KVCacheParams& p) {
  RotaryTables r;
  r.cos = p.rotary_cos;
  r.sin = p.rotary_sin;
  r.row_stride = p.rotary_row_stride;
  r.rotary_dim = static_cast<int>(p.rotary_dim);
  r.seqlen_rotary = static_cast<int>(p.seqlen_rotary);
  r.interleaved = p.rotary_interleaved;
  return r;
}

Status append(const KVCacheParams& p, cudaStream_t stream) {
  AppendParams a{};
  a.k_new = p.k_new;
  a.v_new = p.v_new;
  a.kn_batch_stride = p.kn_batch_stride;
  a.kn_row_stride = p.kn_row_stride;
  a.kn_head_stride = p.kn_head_stride;
  a.vn_batch_stride = p.vn_batch_stride;
  a.vn_row_stride = p.vn_row_stride;
  a.vn_head_stride = p.vn_head_stride;
  a.k = {p.k_cache, p.k_batch_stride, p.k_row_stride, p.k_head_stride};
  a.v = {p.v_cache, p.v_batch_stride, p.v_row_stride, p.v_head_stride};
  a.index = cache_index(p);
  a.rotary = rotary_tables(p);
  a.batch = static_cast<int>(p.batch);
  a.heads_kv = static_cast<int>(p.heads_kv);
  a.seqlen_new = static_cast<int>(p.seqlen_new);
  a.hdim_qk = static_cast<int>(p.hdim_qk);
  a.hdim_v = static_cast<int>(p.hdim_v);
  return launch_append(a, p.dtype, p.is_paged(), stream);
}

Status rotate_q(const KVCacheParams& p, void* q_rotated, cudaStream_t stream) {
  RotateQParams r{};
  r.q = p.q;
  r.q_batch_stride = p.q_batch_stride;
  r.q_row_stride = p.q_row_stride;
  r.q_head_stride = p.q_head_stride;
  r.q_rotated = q_rotated;
  r.index = cache_index(p);
  r.rotary = rotary_tables(p);
  r.batch = static_cast<int>(p.batch);
  r.seqlen_q = static_cast<int>(p.seqlen_q);
  r.heads_q = static_cast<int>(p.heads_q);
  r.hdim_qk = static_cast<int>(p.hdim_qk);
  r.per_query = p.rotary_per_query();
  return launch_rotate_q(r, p.dtype, stream);
}

AttendParams attend_params(const KVCacheParams& p, const PlanDetail& d, const QueryRows& q) {
  AttendParams a{};
  a.q = q.data;
  a.q_batch_stride = q.batch_stride;
  a.q_row_stride = q.row_stride;
  a.q_head_stride = q.head_stride;
  a.k = {p.k_cache, p.k_batch_stride, p.k_row_stride, p.k_head_stride};
  a.v = {p.v_cache, p.v_batch_stride, p.v_row_stride, p.v_head_stride};
  a.index = cache_index(p);
  a.out = p.out;
  a.o_batch_stride = p.o_batch_stride;
  a.o_row_stride = p.o_row_stride;
  a.o_head_stride = p.o_head_stride;
  a.lse = p.lse;
  a.lse_batch_stride = p.lse_batch_stride;
  a.lse_head_stride = p.lse_head_stride;
  a.batch = static_cast<int>(p.batch);
  a.heads_kv = static_cast<int>(p.heads_kv);
  a.group_size = static_cast<int>(p.group_size());
  a.seqlen_q = static_cast<int>(p.seqlen_q);
  a.packed_rows = a.group_size * a.seqlen_q;
  a.num_m_blocks = num_m_blocks(p);
  a.num_splits = d.num_splits;
  a.hdim_qk = static_cast<int>(p.hdim_qk);
  a.hdim_v = static_cast<int>(p.hdim_v);
  a.window_left = clamp_window(p.options.window_left);
  a.window_right = clamp_window(p.options.window_right);
  a.scores = make_score_transform(p.options);
  return a;
}

Status combine(const KVCacheParams& p, const float* partial_out, const float* partial_lse, int num_splits,
               cudaStream_t stream) {
  CombineParams c{};
  c.partial_out = partial_out;
  c.partial_lse = partial_lse;
  c.out = p.out;
  c.o_batch_stride = p.o_batch_stride;
  c.o_row_stride = p.o_row_stride;
  c.o_head_stride = p.o_head_stride;
  c.lse = p.lse;
  c.lse_batch_stride = p.lse_batch_stride;
  c.lse_head_stride = p.lse_head_stride;
  c.batch = static_cast<int>(p.batch);
  c.heads_q = static_cast<int>(p.heads_q);
  c.seqlen_q = static_cast<int>(p.seqlen_q);
  c.hdim_v = static_cast<int>(p.hdim_v);
  c.num_splits = num_splits;
  return launch_combine(c, p.dtype, stream);
}

Status run_kvcache(const Plan& plan, const KVCacheParams& p) {
  const PlanDetail d = plan.get<PlanDetail>();
  auto* stream = static_cast<cudaStream_t>(p.stream);
  auto* workspace = static_cast<unsigned char*>(p.workspace);
  if (p.seqlen_new > 0) FLASHATTN_TRY(append(p, stream));
  if (p.rotary_cos != nullptr) FLASHATTN_TRY(rotate_q(p, workspace + d.layout.q_rotated, stream));
  const QueryRows q = query_rows(p, workspace + d.layout.q_rotated);
  if (d.route.family != nullptr) {
    return run_forward_route(d.route, p, cache_index(p), q, workspace + d.layout.index, workspace + d.layout.forward,
                             stream);
  }
  AttendParams a = attend_params(p, d, q);
  AttendMaps maps{};  // zeros unless TMA reads through them
  if (d.loads == AttendLoads::tma) {
    FLASHATTN_TRY(sm90::make_tile_map(&maps.k, p.dtype, cache_map_spec(p, false), kWho));
    FLASHATTN_TRY(sm90::make_tile_map(&maps.v, p.dtype, cache_map_spec(p, true), kWho));
  }
  if (d.num_splits == 1) return d.run(a, p.is_paged(), d.loads, &maps, stream);
  a.out = nullptr;
  a.lse = nullptr;
  a.partial_lse = reinterpret_cast<float*>(workspace + d.layout.partial_lse);
  a.partial_out = reinterpret_cast<float*>(workspace + d.layout.partial_out);
  FLASHATTN_TRY(d.run(a, p.is_paged(), d.loads, &maps, stream));
  return combine(p, a.partial_out, a.partial_lse, d.num_splits, stream);
}

}  // namespace
}  // namespace decode

const Family& decode_family() {
  static const Family kDecode{"decode", Device::cuda, {}, {}, {decode::plan_kvcache, decode::run_kvcache}};
  return kDecode;
}

}  // namespace flashattn::cuda
