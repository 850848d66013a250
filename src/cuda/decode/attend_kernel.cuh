// The decode family's attention kernel: split-KV (Flash-Decoding) over a KV cache.
//
// A thread block owns kBlockM = 16 packed query rows of one kv head of one sequence (the group's
// query heads × the call's few query tokens, params.cuh) and one split of that sequence's visible
// key blocks. The four warps take one 16-key slice each of every key block, so the block reads each
// K/V byte once for all the rows that need it. Per key block, per warp:
//   S = Q·Kᵀ (mma.sync) → score transform (scale / soft cap) → mask (packed rows: row r is query
//   r / group_size) → online softmax update → P·V into the warp's fp32 output.
// K/V blocks stream through kStages shared-memory stages with cp.async (16-byte chunks, rows past
// the sequence and columns past the head dim zero-filled, never read), each row found through the
// cache's row addressing (contiguous or block-table pages, clamped: params.cuh).
// At the end the warps merge their (max, sum, output) per row through shared memory, exactly as the
// combine kernel merges splits; the block writes the final O and LSE when there is one split, else
// its fp32 partial output and LSE (−inf for an empty split) for combine.cu.
#pragma once

#include <cstdint>

#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/decode/params.cuh"
#include "cuda/decode/shape.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile_io.cuh"
#include "cuda/sm80/warp_gemm.cuh"

namespace flashattn::cuda::decode {

// Which rows, keys and split a thread block owns.
struct AttendWork {
  int b, h_kv, split;
  int r0, rows;           // packed rows [r0, r0 + rows)
  int i_first, i_last;    // the queries of those rows
  Mask mask;              // of sequence b
  int n_begin, n_end;     // this split's key blocks
};



// blockIdx = (split, m_block + num_m_blocks·h_kv, b). A sequence's visible key blocks are divided
// evenly over the splits by its real length (split_blocks): a split past the end is empty and only
// reports so.
template <class Traits>
__device__ __forceinline__ AttendWork attend_work(const AttendParams& p) {
  AttendWork w;
  w.split = static_cast<int>(blockIdx.x);
  w.h_kv = static_cast<int>(blockIdx.y) / p.num_m_blocks;
  w.b = static_cast<int>(blockIdx.z);
  w.r0 = (static_cast<int>(blockIdx.y) % p.num_m_blocks) * Traits::kBlockM;
  w.rows = imin(Traits::kBlockM, p.packed_rows - w.r0);
  w.i_first = w.r0 / p.group_size;
  w.i_last = (w.r0 + w.rows - 1) / p.group_size;
  w.mask.seqlen_q = p.seqlen_q;
  w.mask.seqlen_k = p.index.keys(w.b);
  w.mask.left = p.window_left;
  w.mask.right = p.window_right;
  const int first = w.mask.n_block_begin(w.i_first, Traits::kBlockN);
  const int last = w.mask.n_block_end(w.i_first, w.i_last - w.i_first + 1, Traits::kBlockN);
  const BlockRange mine = split_blocks(first, last, p.num_splits, w.split);
  w.n_begin = mine.begin;
  w.n_end = mine.end;
  return w;
}

// Q's packed rows → shared memory (cp.async; rows past the tile's and columns past hdim_qk zeroed).
template <class Traits>
__device__ __forceinline__ void load_q(const AttendParams& p, const AttendWork& w, uint32_t s_q, int tid) {
  using QTile = typename Traits::QTile;
  for (int c = tid; c < Traits::kBlockM * QTile::kChunksPerRow; c += Traits::kThreads) {
    const int row = c / QTile::kChunksPerRow, chunk = c % QTile::kChunksPerRow;
    const uint32_t dst = s_q + QTile::chunk_offset(row, chunk);
    if (row < w.rows && chunk * kChunkElems < p.hdim_qk) {
      const PackedRow at = unpack_row(w.r0 + row, w.h_kv, p.group_size);
      const int64_t off = int64_t{w.b} * p.q_batch_stride + int64_t{at.query} * p.q_row_stride +
                          int64_t{at.head} * p.q_head_stride + chunk * kChunkElems;
      ptx::cp_async_16(dst, static_cast<const char*>(p.q) + off * kElemBytes);
    } else {
      TileIO<QTile, Traits::kThreads>::store_zero_16(dst);
    }
  }
}

// Paged caches: where the rows of a key block lie, computed once per row and side and shared
// through shared memory. Each row is loaded by the 16 threads of its chunk columns; had each of them
// found the row itself (a block-table read, a division by the page size and two 64-bit products per
// row and side), the paged kernel would execute twice the contiguous one's instructions for the same
// bytes and read them at ~0.8× its rate. Thread t stages row t % kBlockN of K (t < kBlockN) or V:
//   entry_for(n)             its row's block-table entry for block n, read now (the prologue);
//   fetch_entry(n, slot)     the same entry copied into entry ring slot `slot` (cp.async, in the
//                            caller's next commit group);
//   stage(n, buf, entry)     the row's element offset (the entry clamped into the pool) into offset
//                            ring buffer buf;
//   fetched(slot)            an entry fetch_entry copied, once its group has landed;
//   read(buf, side)          a loading thread's kLoadRows offsets (rows row0 + i·kLoadRowStep).
// In the loop an entry travels with the K/V block loaded kStages − 1 blocks earlier, so its latency
// hides behind the same waits as the K/V bytes: read into a register, it was waited for within the
// iteration (ncu, batch 1, page 16: 20 % of the kernel's stall samples, at the back edge or at the
// clamp, wherever the read was placed).
// A key past the sequence stages 0: its row is zero-filled, never read; its entry is not fetched.
template <class Traits>
struct PagedRowOffsets {
  static constexpr int kBlockN = Traits::kBlockN, kLoadRows = Traits::kLoadRows, kStep = Traits::kLoadRowStep;
  int64_t* ring;             // [kStages][side][row % kStep][row / kStep]
  int32_t* entries;          // [kStages][side][row]
  SequenceRows<true> rows;   // this thread's side of the cache
  int row, side;             // the row this thread stages

  __device__ __forceinline__ int entry_for(const AttendWork& w, int n) const {
    const int key = n * kBlockN + row;
    return key < w.mask.seqlen_k ? rows.entry_of(key) : 0;
  }
  __device__ __forceinline__ int32_t* entry_slot(int slot) const { return entries + (slot * 2 + side) * kBlockN + row; }
  __device__ __forceinline__ void fetch_entry(const AttendWork& w, int n, int slot) const {
    const int key = n * kBlockN + row;
    if (key < w.mask.seqlen_k) ptx::cp_async_4(ptx::smem_addr(entry_slot(slot)), rows.entry_address(key));
  }
  __device__ __forceinline__ int fetched(int slot) const { return *entry_slot(slot); }
  __device__ __forceinline__ void stage(const AttendWork& w, int n, int buffer, int entry) const {
    const int key = n * kBlockN + row;
    ring[((buffer * 2 + side) * kStep + row % kStep) * kLoadRows + row / kStep] =
        key < w.mask.seqlen_k ? rows.offset_on(rows.clamp_page(entry), key) : 0;
  }
  __device__ __forceinline__ void read(int buffer, int load_side, int row0, int64_t (&offsets)[kLoadRows]) const {
    static_assert(kLoadRows % 2 == 0, "rows read in pairs (16-byte loads)");
    const auto* words = reinterpret_cast<const longlong2*>(ring + ((buffer * 2 + load_side) * kStep + row0) * kLoadRows);
#pragma unroll
    for (int i = 0; i < kLoadRows / 2; ++i) {
      const longlong2 pair = words[i];
      offsets[2 * i] = pair.x;
      offsets[2 * i + 1] = pair.y;
    }
  }
};

// Key block n of one side of the cache → a stage (cp.async; keys past the sequence and columns past
// `dim` zeroed). A thread moves one chunk column of rows row0, row0 + kLoadRowStep, ...; their
// element offsets are `offsets` (paged: staged by PagedRowOffsets) or the sequence's row stride apart.
template <class Traits>
__device__ __forceinline__ void load_kv_block(const AttendWork& w, const char* data, const int64_t (&offsets)[Traits::kLoadRows],
                                              int dim, int n, uint32_t stage, int tid) {
  using KVTile = typename Traits::KVTile;
  const int chunk = tid % KVTile::kChunksPerRow, row0 = tid / KVTile::kChunksPerRow;
  const bool column_valid = chunk * kChunkElems < dim;
  const int key0 = n * Traits::kBlockN;
  const char* column = data + int64_t{chunk} * kChunkElems * kElemBytes;
  if (column_valid && key0 + Traits::kBlockN <= w.mask.seqlen_k) {  // a whole block: no predicates
#pragma unroll
    for (int i = 0; i < Traits::kLoadRows; ++i) {
      const int row = row0 + i * Traits::kLoadRowStep;
      ptx::cp_async_16(stage + KVTile::chunk_offset(row, chunk), column + offsets[i] * kElemBytes);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < Traits::kLoadRows; ++i) {
    const int row = row0 + i * Traits::kLoadRowStep;
    const uint32_t dst = stage + KVTile::chunk_offset(row, chunk);
    const int key = key0 + row;
    if (column_valid && key < w.mask.seqlen_k) {
      ptx::cp_async_16(dst, column + offsets[i] * kElemBytes);
    } else {
      TileIO<KVTile, Traits::kThreads>::store_zero_16(dst);
    }
  }
}

// A contiguous cache's row offsets of this thread's rows of block n (paged ones are staged).
template <class Traits>
__device__ __forceinline__ void contiguous_offsets(const SequenceRows<false>& rows, int n, int tid,
                                                   int64_t (&offsets)[Traits::kLoadRows]) {
  const int key0 = n * Traits::kBlockN + tid / Traits::KVTile::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < Traits::kLoadRows; ++i) offsets[i] = rows.offset(key0 + i * Traits::kLoadRowStep);
}

// The mask on a warp's score tile of packed rows: element (row, key) is −inf unless query
// row / group_size sees key (Mask::visible, which also hides keys past the sequence).
template <class Traits>
__device__ __forceinline__ void mask_packed_rows(float (&s)[1][Traits::kNTiles][4], const AttendWork& w,
                                                 const int (&query)[2], int key0, int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int ni = 0; ni < Traits::kNTiles; ++ni) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int key = key0 + 8 * ni + 2 * t + c % 2;
      if (!w.mask.visible(query[c / 2], key)) s[0][ni][c] = kMaskedScore;
    }
  }
}

// This split's row of the partials for packed row `at`: [split][b][query head][query].
__device__ __forceinline__ int64_t split_row(const AttendParams& p, const AttendWork& w, const PackedRow& at) {
  const int heads_q = p.heads_kv * p.group_size;
  return int64_t{w.split} * p.batch * heads_q * p.seqlen_q + partial_row(w.b, at.head, at.query, heads_q, p.seqlen_q);
}

// Writes one packed row's merged output chunk (8 columns from col0) and, at col0 = 0, its LSE: the
// final O (16-bit) and LSE with one split, else the split's fp32 partials.
template <class Traits>
__device__ __forceinline__ void store_row_chunk(const AttendParams& p, const AttendWork& w, int row, int col0,
                                                const float (&o)[8], float lse) {
  using Tag = typename Traits::Tag;
  const PackedRow at = unpack_row(w.r0 + row, w.h_kv, p.group_size);
  const int i = at.query, h = at.head;
  if (p.num_splits == 1) {
    uint4 packed;
    packed.x = ptx::pack2<Tag>(o[0], o[1]);
    packed.y = ptx::pack2<Tag>(o[2], o[3]);
    packed.z = ptx::pack2<Tag>(o[4], o[5]);
    packed.w = ptx::pack2<Tag>(o[6], o[7]);
    const int64_t off = int64_t{w.b} * p.o_batch_stride + int64_t{i} * p.o_row_stride + int64_t{h} * p.o_head_stride + col0;
    *reinterpret_cast<uint4*>(static_cast<char*>(p.out) + off * kElemBytes) = packed;
    if (p.lse != nullptr && col0 == 0) p.lse[w.b * p.lse_batch_stride + h * p.lse_head_stride + i] = lse;
    return;
  }
  const int64_t prow = split_row(p, w, at);
  float4* dst = reinterpret_cast<float4*>(p.partial_out + prow * p.hdim_v + col0);
  dst[0] = make_float4(o[0], o[1], o[2], o[3]);
  dst[1] = make_float4(o[4], o[5], o[6], o[7]);
  if (col0 == 0) p.partial_lse[prow] = lse;
}

// An empty split (no key block of this sequence falls to it) reports LSE −inf for its rows and
// writes nothing else: combine gives it weight 0 and never reads its output.
template <class Traits>
__device__ __forceinline__ void report_empty_split(const AttendParams& p, const AttendWork& w, int tid) {
  for (int row = tid; row < w.rows; row += Traits::kThreads) {
    const PackedRow at = unpack_row(w.r0 + row, w.h_kv, p.group_size);
    const int64_t prow = split_row(p, w, at);
    p.partial_lse[prow] = -kInfinity;
  }
}

// The warps' merge: each warp has, per row, the running max m_w (score units), its sum ℓ_w and its
// output relative to exp2(m_w·exp_mult). With M = max_w m_w·exp_mult and weights 2^(m_w·exp_mult − M):
//   O = Σ_w weight_w·O_w / Σ_w weight_w·ℓ_w,   LSE = (M + log2 Σ_w weight_w·ℓ_w)·ln 2.
// A row no warp saw a key for gets O = 0 and LSE +inf (final) or −inf (a split's partial).
template <class Traits>
__device__ __forceinline__ void merge_warps_and_store(const AttendParams& p, const AttendWork& w, unsigned char* smem,
                                                      const OnlineSoftmax<1>& softmax,
                                                      const float (&acc)[1][Traits::kDTiles][4], float exp_mult,
                                                      int warp, int lane, int tid) {
  constexpr int kM = Traits::kBlockM, kD = Traits::kHeadDim, kWarps = Traits::kWarps;
  float* merge_out = reinterpret_cast<float*>(smem + Traits::kKOffset);  // [warp][row][col]
  float* merge_max = merge_out + kWarps * kM * kD;                       // [warp][row], base 2
  float* merge_sum = merge_max + kWarps * kM;                            // [warp][row]
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = 8 * half + g;
    const float m = softmax.row_max[0][half];
    const float sum = quad_sum(softmax.row_sum[0][half]);
    if (t == 0) {
      merge_max[warp * kM + row] = m == -kInfinity ? -kInfinity : m * exp_mult;
      merge_sum[warp * kM + row] = sum;
    }
#pragma unroll
    for (int di = 0; di < Traits::kDTiles; ++di) {
      float* dst = merge_out + (warp * kM + row) * kD + 8 * di + 2 * t;
      dst[0] = acc[0][di][2 * half];
      dst[1] = acc[0][di][2 * half + 1];
    }
  }
  __syncthreads();

  const bool final_output = p.num_splits == 1;
  for (int c = tid; c < kM * (kD / 8); c += Traits::kThreads) {
    const int row = c / (kD / 8), col0 = 8 * (c % (kD / 8));
    if (row >= w.rows || col0 >= p.hdim_v) continue;
    float top = -kInfinity;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) top = fmaxf(top, merge_max[v * kM + row]);
    float weight[kWarps], total = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) {
      const float mv = merge_max[v * kM + row];
      weight[v] = mv == -kInfinity ? 0.f : ptx::exp2_approx(mv - top);
      total += weight[v] * merge_sum[v * kM + row];
    }
    const bool empty = total == 0.f;
    const float inv = empty ? 0.f : 1.f / total;
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float x = 0.f;
#pragma unroll
      for (int v = 0; v < kWarps; ++v) x = fmaf(weight[v], merge_out[(v * kM + row) * kD + col0 + e], x);
      o[e] = x * inv;
    }
    const float lse = empty ? (final_output ? kInfinity : -kInfinity) : (top + log2f(total)) * kLn2;
    store_row_chunk<Traits>(p, w, row, col0, o, lse);
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) attend_kernel(const __grid_constant__ AttendParams p) {
#if FLASHATTN_PTX_SM80
  using Tag = typename Traits::Tag;
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  constexpr int kStages = Traits::kStages, kNTiles = Traits::kNTiles, kDTiles = Traits::kDTiles;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const AttendWork w = attend_work<Traits>(p);
  if (w.n_begin >= w.n_end && p.num_splits > 1) {
    report_empty_split<Traits>(p, w, tid);
    return;
  }

  const uint32_t s_q = ptx::smem_addr(smem) + Traits::kQOffset;
  const uint32_t s_k = ptx::smem_addr(smem) + Traits::kKOffset;
  const uint32_t s_v = ptx::smem_addr(smem) + Traits::kVOffset;
  const int warp_key0 = warp * Traits::kKeysPerWarp;  // this warp's slice of every key block
  const LdsmAddr<QTile> q_frag = ldsm_a_addr<QTile>(s_q, 0, lane);
  const LdsmAddr<KVTile> k_frag = ldsm_b_addr<KVTile>(s_k, warp_key0, lane);
  const LdsmAddr<KVTile> v_frag = ldsm_bt_addr<KVTile>(s_v, warp_key0, lane);
  // The queries of this lane's two accumulator rows (g and g + 8), for the mask.
  const int query[2] = {(w.r0 + lane / 4) / p.group_size, (w.r0 + lane / 4 + 8) / p.group_size};

  const SequenceRows<Traits::kPaged> k_rows = p.index.template key_rows<Traits::kPaged>(p.k, w.b, w.h_kv);
  const SequenceRows<Traits::kPaged> v_rows = p.index.template key_rows<Traits::kPaged>(p.v, w.b, w.h_kv);
  const char* k_data = static_cast<const char*>(p.k.data);
  const char* v_data = static_cast<const char*>(p.v.data);
  // Paged: block m's row offsets are in ring buffer (m − n_begin) % kStages, the index of the K/V
  // stage it loads into.
  [[maybe_unused]] PagedRowOffsets<Traits> paged;
  if constexpr (Traits::kPaged) {
    paged.ring = reinterpret_cast<int64_t*>(smem + Traits::kRowOffsetsOffset);
    paged.entries = reinterpret_cast<int32_t*>(smem + Traits::kEntriesOffset);
    paged.side = tid / Traits::kBlockN;
    paged.row = tid % Traits::kBlockN;
    paged.rows = paged.side == 0 ? k_rows : v_rows;
  }
  auto load_block = [&](int n, int stage) {
    int64_t k_off[Traits::kLoadRows], v_off[Traits::kLoadRows];
    if constexpr (Traits::kPaged) {
      const int row0 = tid / KVTile::kChunksPerRow;
      paged.read(stage, 0, row0, k_off);
      paged.read(stage, 1, row0, v_off);
    } else {
      contiguous_offsets<Traits>(k_rows, n, tid, k_off);
      contiguous_offsets<Traits>(v_rows, n, tid, v_off);
    }
    load_kv_block<Traits>(w, k_data, k_off, p.hdim_qk, n, s_k + stage * KVTile::kBytes, tid);
    load_kv_block<Traits>(w, v_data, v_off, p.hdim_v, n, s_v + stage * KVTile::kBytes, tid);
  };

  float acc[1][kDTiles][4];
#pragma unroll
  for (int di = 0; di < kDTiles; ++di)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[0][di][c] = 0.f;
  OnlineSoftmax<1> softmax;
  softmax.init();
  const ScoreTransform scores = p.scores;

  // Prologue: Q and the first kStages − 1 key blocks, one commit group each (Q joins the first);
  // paged: the row offsets of the first kStages blocks (the loop stages each later one a block
  // ahead of its load), and with block n_begin + k's group the table entries of block
  // n_begin + kStages + k, into entry slot k.
  load_q<Traits>(p, w, s_q, tid);
  if constexpr (Traits::kPaged) {
    int first_entries[kStages];
#pragma unroll
    for (int k = 0; k < kStages; ++k) first_entries[k] = w.n_begin + k < w.n_end ? paged.entry_for(w, w.n_begin + k) : 0;
#pragma unroll
    for (int k = 0; k < kStages; ++k) {
      if (w.n_begin + k < w.n_end) paged.stage(w, w.n_begin + k, k, first_entries[k]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (w.n_begin + k < w.n_end) load_block(w.n_begin + k, k);
    if constexpr (Traits::kPaged) {
      if (w.n_begin + kStages + k < w.n_end) paged.fetch_entry(w, w.n_begin + kStages + k, k);
    }
    ptx::cp_async_commit();
  }

  int stage = 0;
  for (int n = w.n_begin; n < w.n_end; ++n) {
    // Keep kStages − 1 blocks in flight: the stage refilled here was last read in the previous
    // iteration, which every warp has left (the barrier at its end).
    const int ahead = n + kStages - 1;
    const int ahead_stage = stage == 0 ? kStages - 1 : stage - 1;
    if (ahead < w.n_end) load_block(ahead, ahead_stage);
    // Paged: with it, block ahead + kStages's table entries; staged at the bottom of iteration
    // ahead, after this group has landed.
    if constexpr (Traits::kPaged) {
      if (ahead + kStages < w.n_end) paged.fetch_entry(w, ahead + kStages, ahead_stage);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<kStages - 1>();  // block n has landed
    __syncthreads();

    float s[1][kNTiles][4];
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[0][ni][c] = 0.f;
    gemm_ss<Tag, QTile, KVTile, 1, kNTiles, Traits::kQKSteps>(s, q_frag, k_frag, stage * KVTile::kBytes);
    transform_scores(s, scores);
    const int key0 = n * Traits::kBlockN;
    if (w.mask.tile_needs_mask(w.i_first, w.i_last - w.i_first + 1, key0, Traits::kBlockN)) {
      mask_packed_rows<Traits>(s, w, query, key0 + warp_key0, lane);
    }
    softmax.update(s, acc, scores.exp_mult);
    uint32_t pa[1][Traits::kPVSteps][4];
    accumulator_to_a_fragments<Tag>(pa, s);
    gemm_rs<Tag, KVTile, 1, kDTiles, Traits::kPVSteps>(acc, pa, v_frag, stage * KVTile::kBytes);
    // Paged: block n + kStages's row offsets, into the ring buffer block n's offsets held (read when
    // block n was loaded, barriers ago), from the entries that landed with block n.
    if constexpr (Traits::kPaged) {
      if (n + kStages < w.n_end) paged.stage(w, n + kStages, stage, paged.fetched(stage));
    }
    __syncthreads();
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  // The combine kernel (when split) may launch now: it waits for this grid's end before reading.
  ptx::griddep_launch_dependents();
  ptx::cp_async_wait<0>();  // nothing may land in the stages the merge reuses
  __syncthreads();
  merge_warps_and_store<Traits>(p, w, smem, softmax, acc, scores.exp_mult, warp, lane, tid);
#else
  FLASHATTN_PTX_UNSUPPORTED("the decode attention kernel needs sm_80");
#endif
}

}  // namespace flashattn::cuda::decode
