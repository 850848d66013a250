// The decode family's attention kernel: split-KV (Flash-Decoding) over a KV cache.
//
// A thread block owns kBlockM = 16 packed query rows of one kv head of one sequence (the group's
// query heads × the call's few query tokens, params.cuh) and one split of that sequence's visible
// key blocks. The four warps take one 16-key slice each of every key block, so the block reads each
// K/V byte once for all the rows that need it. Per key block, per warp:
//   S = Q·Kᵀ (mma.sync) → score transform (scale / soft cap) → mask (packed rows: row r is query
//   r / group_size) → online softmax update → P·V into the warp's fp32 output.
// K/V blocks stream through kStages shared-memory stages, loaded one of three ways (Traits::kLoads):
//   cp.async (attend_keys_cp_async, every arch): 16-byte chunks by every thread, rows past the
//     sequence and columns past the head dim zero-filled, never read, each row found through the
//     cache's row addressing (contiguous or block-table pages, clamped: params.cuh);
//   TMA (sm_90): boxes of the caches' tensor maps issued by a producer warp beside the four
//     (TmaBlocks);
//   producer cp.async (sm_90): the same chunks as cp.async, copied by a producer warpgroup beside the
//     four (produce_cp_async);
//   both producers hand the stages over through full/empty mbarriers (attend_keys_producer).
// family.cu chooses (shape.cuh's AttendLoads says when).
// At the end the warps merge their (max, sum, output) per row through shared memory, exactly as the
// combine kernel merges splits; the block writes the final O and LSE when there is one split, else
// its fp32 partial output and LSE (−inf for an empty split) for combine.cu.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/decode/params.cuh"
#include "cuda/decode/shape.cuh"
#include "cuda/ptx/barrier.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
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
  int32_t* entries;          // [kStages][side][row] (the cp.async kernel's; a producer keeps its entry in a register)
  SequenceRows<true> rows;   // this thread's side of the cache
  int row, side;             // the row this thread stages

  // Staging thread t's rings in the block's shared memory (t < 2·kBlockN).
  __device__ __forceinline__ static PagedRowOffsets at(unsigned char* smem, const SequenceRows<true>& k_rows,
                                                       const SequenceRows<true>& v_rows, int t) {
    PagedRowOffsets o;
    o.ring = reinterpret_cast<int64_t*>(smem + Traits::kRowOffsetsOffset);
    o.entries = reinterpret_cast<int32_t*>(smem + Traits::kEntriesOffset);
    o.side = t / kBlockN;
    o.row = t % kBlockN;
    o.rows = o.side == 0 ? k_rows : v_rows;
    return o;
  }

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

// TMA loads (Traits::kTma, sm_90): the producer warp moves each key block with the copy engine, in
// boxes of 64 columns of the caches' tensor maps (CacheMaps), into 128-byte-swizzled panels
// (PanelSmemTile), counted on the stage's full mbarrier. A contiguous cache: one box of kBlockN
// rows per panel and side, at (column, kv head, first key + block start, cache row). A paged cache: one box of
// box_rows = min(page size, kBlockN) rows per page, panel and side, at (column, kv head, row within
// the page, page), lane j issuing the block's j-th box. The table entries wait in the producer's
// registers, a window of 32 boxes per lane pair (current, next): the next window is read when the
// current one comes into use, so no copy waits for its entry after the prologue, and the first is
// read before the sequence's length, where the split starts if the sequence fills its capacity
// (read again in the rare other case). Rows past the capacity read as zeros; a box wholly past the
// sequence is not issued; the rows of a block past the sequence are zeroed after it lands (V's: a
// masked key's P is 0, its V row must not be NaN).
//   k, v: [hdim, heads_kv, seqlen_cache, batch_cache] contiguous, [hdim, heads_kv, page_size,
//   num_pages] paged (dimension 0 innermost), box [64, 1, box_rows, 1].
struct CacheMaps {
  const CUtensorMap* k;
  const CUtensorMap* v;
};

template <class Traits>
struct TmaBlocks {
  using KVTile = typename Traits::KVTile;
  static constexpr int kPanels = KVTile::kChunksPerRow / KVTile::kPanelChunks;
  CacheMaps maps;
  uint32_t k_tile, v_tile;  // stage 0
  uint32_t bars;            // stage 0's full mbarrier (stage s: + 8·s; the kStages empty ones follow)
  int h_kv;
  int row0, cache_row;      // contiguous: the sequence's first key's row and its cache row
  PagedRows pages;          // paged: the sequence's table row (its addressing fields unused)
  int box_rows, boxes;      // paged: rows per box (min(page size, kBlockN)) and boxes per block and side

  // Paged: lane l's entry of a window of 32 boxes, box l counted from block `block0`'s first (lane l
  // covers box l % boxes of block block0 + l / boxes); 0 for keys past the capacity (the table row's
  // end). Independent of the sequence's length, so it may be read before the length is known.
  __device__ __forceinline__ int window_entry(int block0, int capacity, int lane) const {
    const int key = (block0 + lane / boxes) * Traits::kBlockN + (lane % boxes) * box_rows;
    return key < capacity ? pages.entry_of(key) : 0;
  }
  // Block n into `stage`, by the producer warp (every lane calls; paged: `window` is this lane's
  // entry of the current window, block n's at lanes slot·boxes + j).
  __device__ __forceinline__ void load(const AttendWork& w, int n, int stage, int window, int slot, int lane) const {
    const int key0 = n * Traits::kBlockN;
    const uint32_t bar = bars + 8 * stage;
    const uint32_t k_dst = k_tile + stage * KVTile::kBytes, v_dst = v_tile + stage * KVTile::kBytes;
    if constexpr (!Traits::kPaged) {
      if (lane == 0) {
        ptx::mbarrier_arrive_expect_tx(bar, 2 * kPanels * KVTile::kPanelBytes);
#pragma unroll
        for (int c = 0; c < kPanels; ++c) {
          ptx::tma_load(k_dst + c * KVTile::kPanelBytes, maps.k, bar, 64 * c, h_kv, row0 + key0, cache_row);
          ptx::tma_load(v_dst + c * KVTile::kPanelBytes, maps.v, bar, 64 * c, h_kv, row0 + key0, cache_row);
        }
      }
    } else {
      // The lanes holding block n's entries (window lanes slot·boxes + j) issue its boxes themselves,
      // each expecting its own bytes: no shuffle, no division on the way to the copies.
      const int j = lane - slot * boxes;
      const int key = key0 + j * box_rows;
      if (j >= 0 && j < boxes && key < w.mask.seqlen_k) {
        const int page = pages.clamp_page(window);
        const int in_page = boxes > 1 ? 0 : pages.row_of(key);  // boxes of a page's size start pages
        const uint32_t at = static_cast<uint32_t>(j * box_rows * KVTile::kRowBytes);
        ptx::mbarrier_expect_tx(bar, static_cast<uint32_t>(2 * kPanels * box_rows * KVTile::kRowBytes));
#pragma unroll
        for (int c = 0; c < kPanels; ++c) {
          ptx::tma_load(k_dst + c * KVTile::kPanelBytes + at, maps.k, bar, 64 * c, h_kv, in_page, page);
          ptx::tma_load(v_dst + c * KVTile::kPanelBytes + at, maps.v, bar, 64 * c, h_kv, in_page, page);
        }
      }
      __syncwarp();
      if (lane == 0) ptx::mbarrier_arrive(bar);  // after every lane's expectation
    }
  }
  // After block n landed: zero its V rows past the sequence (a partial block only; the caller then
  // needs a barrier before the rows are read).
  __device__ __forceinline__ void zero_rows_past_sequence(const AttendWork& w, int n, int stage, int tid) const {
    const int valid = w.mask.seqlen_k - n * Traits::kBlockN;
    const uint32_t v_dst = v_tile + stage * KVTile::kBytes;
    for (int c = tid; c < Traits::kBlockN * KVTile::kChunksPerRow; c += Traits::kThreads) {
      const int row = c / KVTile::kChunksPerRow, chunk = c % KVTile::kChunksPerRow;
      if (row >= valid) TileIO<KVTile, Traits::kThreads>::store_zero_16(v_dst + KVTile::chunk_offset(row, chunk));
    }
  }
};

// Key block n of one side of the cache → a stage (cp.async; keys past the sequence and columns past
// `dim` zeroed). A thread moves one chunk column of rows row0, row0 + kLoadRowStep, ...; their
// element offsets are `offsets` (paged: staged by PagedRowOffsets) or the sequence's row stride apart.
// `tid` counts the copying threads (the producer's, with one). A row or column outside is zeroed by a
// copy that reads nothing (source size 0), in the same commit group as the block's other copies: a
// producer's stage is complete when its full mbarrier has counted its copies, which would not count
// a plain store.
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
      ptx::cp_async_16(dst, data, 0);
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

// The element offsets of copying thread t's rows of block n, K's and V's: staged in ring buffer
// `buffer` (paged) or computed from the sequence's row stride.
template <class Traits>
__device__ __forceinline__ void block_offsets(const PagedRowOffsets<Traits>& paged, const SequenceRows<Traits::kPaged>& k_rows,
                                              const SequenceRows<Traits::kPaged>& v_rows, int n, int buffer, int t,
                                              int64_t (&k_off)[Traits::kLoadRows], int64_t (&v_off)[Traits::kLoadRows]) {
  if constexpr (Traits::kPaged) {
    const int row0 = t / Traits::KVTile::kChunksPerRow;
    paged.read(buffer, 0, row0, k_off);
    paged.read(buffer, 1, row0, v_off);
  } else {
    contiguous_offsets<Traits>(k_rows, n, t, k_off);
    contiguous_offsets<Traits>(v_rows, n, t, v_off);
  }
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

// A barrier of the attending warps: __syncthreads, or with a producer beside them (which does not
// take part) named barrier 1 over the kThreads attending threads.
template <class Traits>
__device__ __forceinline__ void attending_sync() {
  if constexpr (Traits::kWarpSpecialized) {
    ptx::named_barrier_sync(1, Traits::kThreads);
  } else {
    __syncthreads();
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
  attending_sync<Traits>();

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

// What the key loop of one thread block works with: its shared tiles' fragment addresses, the
// queries of this lane's accumulator rows (for the mask), and the running softmax state and output.
template <class Traits>
struct KeyLoop {
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  LdsmAddr<QTile> q_frag;
  LdsmAddr<KVTile> k_frag, v_frag;
  int warp_key0;  // this warp's slice of every key block
  int query[2];   // the queries of this lane's two accumulator rows (g and g + 8)
  ScoreTransform scores;
  OnlineSoftmax<1> softmax;
  float acc[1][Traits::kDTiles][4];
};

// Key block n, landed in `stage`, for this warp: S = Q·Kᵀ on its keys → score transform → mask →
// online softmax update → P·V into the output.
template <class Traits>
__device__ __forceinline__ void attend_key_block(KeyLoop<Traits>& L, const AttendWork& w, int n, int stage, int lane) {
  using Tag = typename Traits::Tag;
  using KVTile = typename Traits::KVTile;
  constexpr int kNTiles = Traits::kNTiles;
  float s[1][kNTiles][4];
#pragma unroll
  for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
    for (int c = 0; c < 4; ++c) s[0][ni][c] = 0.f;
  gemm_ss<Tag, typename Traits::QTile, KVTile, 1, kNTiles, Traits::kQKSteps>(s, L.q_frag, L.k_frag, stage * KVTile::kBytes);
  transform_scores(s, L.scores);
  const int key0 = n * Traits::kBlockN;
  if (w.mask.tile_needs_mask(w.i_first, w.i_last - w.i_first + 1, key0, Traits::kBlockN)) {
    mask_packed_rows<Traits>(s, w, L.query, key0 + L.warp_key0, lane);
  }
  L.softmax.update(s, L.acc, L.scores.exp_mult);
  uint32_t pa[1][Traits::kPVSteps][4];
  accumulator_to_a_fragments<Tag>(pa, s);
  gemm_rs<Tag, KVTile, 1, Traits::kDTiles, Traits::kPVSteps>(L.acc, pa, L.v_frag, stage * KVTile::kBytes);
}

// The key loop on cp.async (every arch): kStages − 1 blocks in flight, one commit group per block.
template <class Traits>
__device__ __forceinline__ void attend_keys_cp_async(const AttendParams& p, const AttendWork& w, unsigned char* smem,
                                                     KeyLoop<Traits>& L, int tid, int lane) {
  using KVTile = typename Traits::KVTile;
  constexpr int kStages = Traits::kStages;
  const uint32_t s_q = ptx::smem_addr(smem) + Traits::kQOffset;
  const uint32_t s_k = ptx::smem_addr(smem) + Traits::kKOffset;
  const uint32_t s_v = ptx::smem_addr(smem) + Traits::kVOffset;
  const SequenceRows<Traits::kPaged> k_rows = p.index.template key_rows<Traits::kPaged>(p.k, w.b, w.h_kv);
  const SequenceRows<Traits::kPaged> v_rows = p.index.template key_rows<Traits::kPaged>(p.v, w.b, w.h_kv);
  const char* k_data = static_cast<const char*>(p.k.data);
  const char* v_data = static_cast<const char*>(p.v.data);
  // Paged: block m's row offsets are in ring buffer (m − n_begin) % kStages, the index of the K/V
  // stage it loads into.
  [[maybe_unused]] PagedRowOffsets<Traits> paged;
  if constexpr (Traits::kPaged) paged = PagedRowOffsets<Traits>::at(smem, k_rows, v_rows, tid);
  auto load_block = [&](int n, int stage) {
    int64_t k_off[Traits::kLoadRows], v_off[Traits::kLoadRows];
    block_offsets<Traits>(paged, k_rows, v_rows, n, stage, tid, k_off, v_off);
    load_kv_block<Traits>(w, k_data, k_off, p.hdim_qk, n, s_k + stage * KVTile::kBytes, tid);
    load_kv_block<Traits>(w, v_data, v_off, p.hdim_v, n, s_v + stage * KVTile::kBytes, tid);
  };

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
    attend_key_block<Traits>(L, w, n, stage, lane);
    // Paged: block n + kStages's row offsets, into the ring buffer block n's offsets held (read when
    // block n was loaded, barriers ago), from the entries that landed with block n.
    if constexpr (Traits::kPaged) {
      if (n + kStages < w.n_end) paged.stage(w, n + kStages, stage, paged.fetched(stage));
    }
    __syncthreads();
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
}

// Paged TMA: the split's first key block if the sequence fills the capacity (what attend_work
// gives then, without a left window), computed before the length is read, and the first two entry
// windows from there (TmaBlocks).
struct EntryWindows {
  int begin, cur, nxt;
};
template <class Traits>
__device__ __forceinline__ EntryWindows speculative_windows(const AttendParams& p, const TmaBlocks<Traits>& blocks,
                                                            int lane) {
  const int capacity_blocks = (p.index.capacity + Traits::kBlockN - 1) / Traits::kBlockN;
  const BlockRange guess = split_blocks(0, capacity_blocks, p.num_splits, static_cast<int>(blockIdx.x));
  const int per_window = 32 / blocks.boxes;
  return {guess.begin, blocks.window_entry(guess.begin, p.index.capacity, lane),
          blocks.window_entry(guess.begin + per_window, p.index.capacity, lane)};
}

// The TMA loads' per-block state (TmaBlocks), paged windows included, before the length is read.
template <class Traits>
__device__ __forceinline__ TmaBlocks<Traits> tma_blocks(const AttendParams& p, uint32_t base, const CacheMaps& maps) {
  TmaBlocks<Traits> blocks;
  blocks.maps = maps;
  blocks.k_tile = base + Traits::kKOffset;
  blocks.v_tile = base + Traits::kVOffset;
  blocks.bars = base + Traits::kBarriersOffset;
  blocks.h_kv = static_cast<int>(blockIdx.y) / p.num_m_blocks;
  if constexpr (Traits::kPaged) {
    blocks.pages = p.index.template rows<true>(p.k, static_cast<int>(blockIdx.z), blocks.h_kv);
    blocks.box_rows = imin(p.index.page_size.divisor, Traits::kBlockN);
    blocks.boxes = Traits::kBlockN / blocks.box_rows;
  }
  return blocks;
}

// The TMA producer warp's loop (TmaBlocks): every block of the split into the ring of kStages stages
// as soon as a stage is empty. Paged: the entry windows follow the blocks.
template <class Traits>
__device__ __forceinline__ void produce_tma(const AttendParams& p, const AttendWork& w, TmaBlocks<Traits>& blocks,
                                            EntryWindows windows, int lane) {
  constexpr int kStages = Traits::kStages;
  const uint32_t empty = blocks.bars + 8 * kStages;
  int per_window = 1;
  if constexpr (Traits::kPaged) {
    per_window = 32 / blocks.boxes;
    if (windows.begin != w.n_begin) {
      windows.cur = blocks.window_entry(w.n_begin, p.index.capacity, lane);
      windows.nxt = blocks.window_entry(w.n_begin + per_window, p.index.capacity, lane);
    }
  } else {
    blocks.row0 = p.index.first_key(w.b);
    blocks.cache_row = p.index.cache_row(w.b);
  }
  int stage = 0, slot = 0;
  uint32_t phase = 0;
  for (int n = w.n_begin; n < w.n_end; ++n) {
    if constexpr (Traits::kPaged) {
      if (slot == per_window) {  // block n opens the next window of entries
        slot = 0;
        windows.cur = windows.nxt;
        windows.nxt = blocks.window_entry(n + per_window, p.index.capacity, lane);
      }
    }
    ptx::mbarrier_wait(empty + 8 * stage, phase ^ 1);  // a fresh stage passes at once
    blocks.load(w, n, stage, windows.cur, slot, lane);
    ++slot;
    if (++stage == kStages) stage = 0, phase ^= 1;
  }
}

// The cp.async producer warpgroup's loop: thread pt (0 ≤ pt < kThreads) copies what attending thread
// pt copies in attend_keys_cp_async, each block as soon as its stage is empty, and arrives on the
// stage's full mbarrier once its copies have landed (cp.async.mbarrier.arrive.noinc: one of the
// kThreads arrivals the barrier expects). Paged: the thread first stages the offset of row
// pt % kBlockN of side pt / kBlockN into the offset ring (PagedRowOffsets; buffer = the block's
// stage), from the table entry it read a block earlier (in flight while it waited for the stage),
// and named barrier 2 over the producer's threads orders those stores before the copies read them.
// (Why a warpgroup and not the TMA producer's single warp issuing rows: one warp's 64 copies per lane
// and block kept too few bytes in flight, 0.44 × every thread's cp.async at batch 1 × 8k; and TMA's
// boxes for pages of 16 keys read 0.89 × the contiguous call there, docs/kvcache.md.)
template <class Traits>
__device__ __forceinline__ void produce_cp_async(const AttendParams& p, const AttendWork& w, unsigned char* smem,
                                                 uint32_t base, int pt) {
  using KVTile = typename Traits::KVTile;
  constexpr int kStages = Traits::kStages;
  const uint32_t full = base + Traits::kBarriersOffset, empty = full + 8 * kStages;
  const uint32_t s_k = base + Traits::kKOffset, s_v = base + Traits::kVOffset;
  const SequenceRows<Traits::kPaged> k_rows = p.index.template key_rows<Traits::kPaged>(p.k, w.b, w.h_kv);
  const SequenceRows<Traits::kPaged> v_rows = p.index.template key_rows<Traits::kPaged>(p.v, w.b, w.h_kv);
  const char* k_data = static_cast<const char*>(p.k.data);
  const char* v_data = static_cast<const char*>(p.v.data);
  [[maybe_unused]] PagedRowOffsets<Traits> paged;
  [[maybe_unused]] int entry = 0;
  if constexpr (Traits::kPaged) {
    paged = PagedRowOffsets<Traits>::at(smem, k_rows, v_rows, pt);
    if (w.n_begin < w.n_end) entry = paged.entry_for(w, w.n_begin);
  }
  int stage = 0;
  uint32_t phase = 0;
  for (int n = w.n_begin; n < w.n_end; ++n) {
    int64_t k_off[Traits::kLoadRows], v_off[Traits::kLoadRows];
    if constexpr (Traits::kPaged) {
      paged.stage(w, n, stage, entry);
      ptx::named_barrier_sync(2, Traits::kProducerThreads);
      if (n + 1 < w.n_end) entry = paged.entry_for(w, n + 1);
    }
    block_offsets<Traits>(paged, k_rows, v_rows, n, stage, pt, k_off, v_off);
    ptx::mbarrier_wait(empty + 8 * stage, phase ^ 1);  // a fresh stage passes at once
    load_kv_block<Traits>(w, k_data, k_off, p.hdim_qk, n, s_k + stage * KVTile::kBytes, pt);
    load_kv_block<Traits>(w, v_data, v_off, p.hdim_v, n, s_v + stage * KVTile::kBytes, pt);
    ptx::cp_async_mbarrier_arrive_noinc(full + 8 * stage);
    if (++stage == kStages) stage = 0, phase ^= 1;
  }
  ptx::cp_async_wait<0>();  // no copy outlives the thread that issued it
}

// The key loop with a producer (sm_90; TMA or cp.async, Traits::kLoads), warp-specialized: the
// producer (the threads from kThreads on) loads every block into the ring of kStages stages as soon
// as a stage is empty, and the kWarps attending warps wait for a block on its stage's full mbarrier
// and give the stage back on its empty mbarrier once they have read it. So no attending warp waits
// for a load to be issued, and nothing beyond the two mbarriers orders them per block (with one warp
// per scheduler at one thread block per SM, every instruction on an attending warp's path counts).
// Returns false on the producer, which has nothing more to do.
template <class Traits, class Blocks>
__device__ __forceinline__ bool attend_keys_producer(const AttendParams& p, const AttendWork& w, unsigned char* smem,
                                                     uint32_t base, Blocks& blocks, EntryWindows windows,
                                                     KeyLoop<Traits>& L, int tid, int lane) {
  constexpr int kStages = Traits::kStages;
  const uint32_t full = base + Traits::kBarriersOffset, empty = full + 8 * kStages;
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(full + 8 * s, Traits::kTma ? 1 : Traits::kProducerThreads);
      ptx::mbarrier_init(empty + 8 * s, Traits::kThreads);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();  // the mbarriers initialized (every warp, the producer's included)

  if (tid >= Traits::kThreads) {
    if constexpr (Traits::kTma) {
      produce_tma<Traits>(p, w, blocks, windows, lane);
    } else {
      produce_cp_async<Traits>(p, w, smem, base, tid - Traits::kThreads);
    }
    return false;
  }

  load_q<Traits>(p, w, base + Traits::kQOffset, tid);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  attending_sync<Traits>();  // Q
  int stage = 0;
  uint32_t phase = 0;
  for (int n = w.n_begin; n < w.n_end; ++n) {
    ptx::mbarrier_wait(full + 8 * stage, phase);
    if constexpr (Traits::kTma) {  // (the cp.async producer zero-fills such rows itself)
      if ((n + 1) * Traits::kBlockN > w.mask.seqlen_k) {
        blocks.zero_rows_past_sequence(w, n, stage, tid);
        attending_sync<Traits>();
      }
    }
    attend_key_block<Traits>(L, w, n, stage, lane);
    // TMA: this stage's reads (and zero stores) ordered before the copy engine refills it.
    if constexpr (Traits::kTma) ptx::fence_proxy_async_shared_cta();
    ptx::mbarrier_arrive(empty + 8 * stage);
    if (++stage == kStages) stage = 0, phase ^= 1;
  }
  return true;
}

// One thread block's work (the kernels below): the key loop on cp.async or TMA, then the warps'
// merge and the output.
template <class Traits>
__device__ __forceinline__ void attend_block(const AttendParams& p, const CacheMaps& maps) {
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  // TMA's swizzled panels start at multiples of 1024 bytes (kAlignSlack pays for the rounding).
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t base = Traits::kTma ? (raw + 1023) / 1024 * 1024 : raw;
  unsigned char* smem = smem_raw + (base - raw);
  // TMA, paged: the first table entries are read beside the length, not after it.
  [[maybe_unused]] std::conditional_t<Traits::kTma, TmaBlocks<Traits>, char> blocks{};
  [[maybe_unused]] EntryWindows windows{};
  if constexpr (Traits::kTma) {
    blocks = tma_blocks<Traits>(p, base, maps);
    if constexpr (Traits::kPaged) {
      if (tid >= Traits::kThreads) windows = speculative_windows<Traits>(p, blocks, lane);
    }
  }
  const AttendWork w = attend_work<Traits>(p);
  if (w.n_begin >= w.n_end && p.num_splits > 1) {
    report_empty_split<Traits>(p, w, tid);
    return;
  }

  KeyLoop<Traits> L{ldsm_a_addr<QTile>(base + Traits::kQOffset, 0, lane),
                    ldsm_b_addr<KVTile>(base + Traits::kKOffset, warp * Traits::kKeysPerWarp, lane),
                    ldsm_bt_addr<KVTile>(base + Traits::kVOffset, warp * Traits::kKeysPerWarp, lane),
                    warp * Traits::kKeysPerWarp,
                    {(w.r0 + lane / 4) / p.group_size, (w.r0 + lane / 4 + 8) / p.group_size},
                    p.scores};
#pragma unroll
  for (int di = 0; di < Traits::kDTiles; ++di)
#pragma unroll
    for (int c = 0; c < 4; ++c) L.acc[0][di][c] = 0.f;
  L.softmax.init();

  if constexpr (Traits::kWarpSpecialized) {
#if FLASHATTN_PTX_SM90
    if (!attend_keys_producer<Traits>(p, w, smem, base, blocks, windows, L, tid, lane)) return;
#else
    FLASHATTN_PTX_UNSUPPORTED("the decode kernel's producer loads need sm_90");
#endif
  } else {
    attend_keys_cp_async<Traits>(p, w, smem, L, tid, lane);
  }
  // The combine kernel (when split) may launch now: it waits for this grid's end before reading.
  ptx::griddep_launch_dependents();
  ptx::cp_async_wait<0>();  // nothing may land in the stages the merge reuses
  attending_sync<Traits>();
  merge_warps_and_store<Traits>(p, w, smem, L.softmax, L.acc, L.scores.exp_mult, warp, lane, tid);
}

// The cp.async kernels: every thread copying (every arch from sm_80), or a producer warpgroup
// (sm_90; its sm_80 image only traps and is never chosen).
template <class Traits>
__global__ void __launch_bounds__(Traits::kLaunchThreads) attend_kernel(const __grid_constant__ AttendParams p) {
#if FLASHATTN_PTX_SM80
  attend_block<Traits>(p, CacheMaps{nullptr, nullptr});
#else
  FLASHATTN_PTX_UNSUPPORTED("the decode attention kernel needs sm_80");
#endif
}

// The TMA kernel (sm_90): the caches' tensor maps as kernel parameters, as TMA needs them.
template <class Traits>
__global__ void __launch_bounds__(Traits::kLaunchThreads)
    attend_tma_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                      const __grid_constant__ AttendParams p) {
#if FLASHATTN_PTX_SM90
  attend_block<Traits>(p, CacheMaps{&tm_k, &tm_v});
#else
  FLASHATTN_PTX_UNSUPPORTED("the decode attention kernel's TMA loads need sm_90");
#endif
}

}  // namespace flashattn::cuda::decode
