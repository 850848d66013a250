// Host-only checks of the index logic in src/cuda/common (no GPU needed): the mask's key/query
// ranges, block ranges and tile_needs_mask against brute force; the shared-memory swizzle (a
// bijection inside each row, bank-conflict free for every access pattern the kernels use); the
// forward's tile shapes (shared memory within the A100/H100 per-block limits, whole warps); the
// backward's dQ accumulator layout (a permutation of the tile that the kernel and postprocess share);
// the backward's grid orders (each key block once; key blocks outer hands them out by key block);
// the decode family's index logic (key splits, packed GQA rows, partial rows) and shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/common/fast_divmod.cuh"
#include "cuda/decode/params.cuh"
#include "cuda/decode/shape.cuh"
#include "cuda/sm80/bwd_split.hpp"
#include "cuda/sm80/bwd_tile.cuh"
#include "cuda/sm80/fwd_traits.cuh"
#include "cuda/sm80/instances.hpp"
#include "cuda/sm80/scheduler.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm90/bwd_grid_order.cuh"
#include "cuda/sm90/bwd_launch.hpp"
#include "cuda/sm90/bwd_maps.hpp"
#include "test_util.cuh"

namespace {

using flashattn::cuda::Mask;

bool brute_visible(const Mask& m, int i, int j) {
  const int diag = m.seqlen_k - m.seqlen_q;
  if (j < 0 || j >= m.seqlen_k) return false;
  if (m.right >= 0 && j > i + diag + m.right) return false;
  if (m.left >= 0 && j < i + diag - m.left) return false;
  return true;
}

TEST(CudaMask, RangesMatchBruteForce) {
  std::mt19937 rng(3);
  for (int it = 0; it < 4000; ++it) {
    Mask m;
    // A quarter of the problems long enough for several 128-row blocks (the sm90 backward's D = 64 steps).
    const int extra = rng() % 4 == 0 ? 200 : 0;
    m.seqlen_q = int(rng() % (70 + extra));
    m.seqlen_k = int(rng() % (70 + extra));
    m.left = rng() % 4 == 0 ? -1 : int(rng() % 40);
    m.right = rng() % 3 == 0 ? -1 : (rng() % 3 == 0 ? 0 : int(rng() % 40));
    const int bm = 16 << (rng() % 4), bn = 16 << (rng() % 4);
    SCOPED_TRACE(testing::Message() << "seqlen_q " << m.seqlen_q << " seqlen_k " << m.seqlen_k << " left " << m.left
                                    << " right " << m.right << " bm " << bm << " bn " << bn);
    for (int i = 0; i < m.seqlen_q; ++i)
      for (int j = -2; j < m.seqlen_k + 2; ++j) ASSERT_EQ(m.visible(i, j), brute_visible(m, i, j)) << i << ", " << j;
    for (int j = 0; j < m.seqlen_k; ++j)
      for (int i = 0; i < m.seqlen_q; ++i)
        ASSERT_EQ(i >= m.query_begin(j) && i < m.query_end(j), brute_visible(m, i, j)) << "query range of key " << j;
    // forward: every key block with a visible entry is visited; unmasked-looking tiles are all visible
    for (int m0 = 0; m0 < m.seqlen_q; m0 += bm) {
      const int nb = m.n_block_begin(m0, bn), ne = m.n_block_end(m0, bm, bn);
      for (int n = 0; n * bn < m.seqlen_k; ++n) {
        bool any = false, all = true;
        for (int i = m0; i < std::min(m0 + bm, m.seqlen_q); ++i)
          for (int j = n * bn; j < n * bn + bn; ++j) {
            any |= brute_visible(m, i, j);
            all &= brute_visible(m, i, j);
          }
        if (any) ASSERT_TRUE(n >= nb && n < ne) << "query tile " << m0 << " skips key block " << n;
        if (!all) ASSERT_TRUE(m.tile_needs_mask(m0, bm, n * bn, bn)) << "tile (" << m0 << ", " << n << ")";
      }
    }
    // backward: every query block with a visible entry is visited
    for (int n0 = 0; n0 < m.seqlen_k; n0 += bn) {
      const int mb = m.m_block_begin(n0, bm), me = m.m_block_end(n0, bn, bm);
      ASSERT_EQ(m.m_block_count(n0, bn, bm), std::max(0, me - mb)) << "key tile " << n0;
      for (int b = 0; b * bm < m.seqlen_q; ++b) {
        bool any = false;
        for (int i = b * bm; i < std::min(b * bm + bm, m.seqlen_q); ++i)
          for (int j = n0; j < std::min(n0 + bn, m.seqlen_k); ++j) any |= brute_visible(m, i, j);
        if (any) ASSERT_TRUE(b >= mb && b < me) << "key tile " << n0 << " skips query block " << b;
      }
    }
    // deterministic dQ order: the key blocks that visit a query tile (by the backward's walk, above)
    // are contiguous, and under a right edge the last of them is last_n_block_visiting
    for (int m0 = 0; m0 < m.seqlen_q; m0 += bm) {
      int first = -1, last = -1;
      for (int n = 0; n * bn < m.seqlen_k; ++n) {
        const int mb = m.m_block_begin(n * bn, bm), me = m.m_block_end(n * bn, bn, bm);
        if (m0 / bm < mb || m0 / bm >= me) continue;
        if (first < 0) first = n;
        ASSERT_EQ(n, last + (last < 0 ? n + 1 : 1)) << "key blocks visiting query tile " << m0 << " not contiguous";
        last = n;
      }
      if (first < 0) continue;
      ASSERT_EQ(first, m.left < 0 ? 0 : m.n_block_begin(m0, bn)) << "first key block of query tile " << m0;
      if (m.right >= 0) ASSERT_EQ(last, m.last_n_block_visiting(m0, bm, bn)) << "last key block of query tile " << m0;
    }
  }
}

TEST(CudaMask, ClampWindowKeepsMeaning) {
  EXPECT_EQ(flashattn::cuda::clamp_window(-1), -1);
  EXPECT_EQ(flashattn::cuda::clamp_window(0), 0);
  EXPECT_EQ(flashattn::cuda::clamp_window(int64_t{1} << 40), int(flashattn::cuda::kWindowUnbounded));
  Mask m{1000, 3000, flashattn::cuda::clamp_window(int64_t{1} << 40), 0};
  for (int i = 0; i < 1000; i += 37) EXPECT_EQ(m.key_begin(i), 0);
}

// Bank group (16-byte slot of a 128-byte line) of every address of one 8-address phase.
template <class Tile>
void expect_conflict_free(const char* what, int row0, int chunk, bool rows_vary) {
  std::set<int> groups;
  for (int r = 0; r < 8; ++r) {
    const int row = rows_vary ? row0 + r : row0, c = rows_vary ? chunk : chunk + r;
    groups.insert(int(Tile::chunk_offset(row, c) / flashattn::cuda::kChunkBytes) % 8);
  }
  EXPECT_EQ(groups.size(), 8u) << what << " row0 " << row0 << " chunk " << chunk;
}

template <int kRows, int kCols>
void check_swizzle() {
  using Tile = flashattn::cuda::SmemTile<kRows, kCols>;
  SCOPED_TRACE(testing::Message() << "tile " << kRows << " x " << kCols);
  std::set<uint32_t> seen;
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < Tile::kChunksPerRow; ++c) {
      const uint32_t off = Tile::chunk_offset(r, c);
      EXPECT_EQ(off / (Tile::kChunksPerRow * 16), uint32_t(r)) << "the swizzle leaves the row";
      seen.insert(off);
    }
  }
  EXPECT_EQ(seen.size(), size_t(kRows * Tile::kChunksPerRow)) << "not a bijection";
  for (int r0 = 0; r0 + 8 <= kRows; r0 += 8)
    for (int c = 0; c < Tile::kChunksPerRow; ++c) expect_conflict_free<Tile>("ldmatrix (8 rows, one chunk)", r0, c, true);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c + 8 <= Tile::kChunksPerRow; c += 8) expect_conflict_free<Tile>("row store (8 chunks)", r, c, false);
}

TEST(CudaSmemTile, SwizzleBijectiveAndConflictFree) {
  check_swizzle<64, 64>();
  check_swizzle<64, 96>();
  check_swizzle<128, 128>();
  check_swizzle<64, 192>();
  check_swizzle<64, 256>();
  check_swizzle<16, 32>();
}

template <int D>
void check_traits() {
  using flashattn::cuda::sm80::FwdTraits;
  using flashattn::cuda::sm80::fwd_tile_shape;
  using flashattn::ptx::BF16;
  for (bool big_smem : {false, true}) {
    const auto shape = fwd_tile_shape(D, flashattn::DType::bf16, big_smem);
    EXPECT_EQ(shape.block_m % (16 * shape.warps), 0) << "D " << D;
    EXPECT_EQ(shape.block_n % 16, 0) << "D " << D;
    EXPECT_TRUE(shape.kv_stages == 1 || shape.kv_stages == 2) << "D " << D;
    // Q + stages × (K + V), 2-byte elements: A100's 163 KB per block unless big_smem.
    const std::size_t smem = std::size_t{2} * D * (shape.block_m + 2 * shape.kv_stages * shape.block_n);
    EXPECT_LE(smem, big_smem ? flashattn::cuda::sm80::kFwdBigSmemBytes : std::size_t{163} * 1024)
        << "D " << D << " big_smem " << big_smem;
  }
  // Only D = 256 has a big_smem shape (two 4-warp blocks per SM on Hopper).
  EXPECT_EQ(flashattn::cuda::sm80::fwd_has_big_smem_shape(D, flashattn::DType::bf16), D == 256) << D;
  EXPECT_LE((FwdTraits<BF16, D, false>::kSmemBytes), 163u * 1024) << "D " << D << ": over A100's per-block limit";
  EXPECT_LE((FwdTraits<BF16, D, true>::kSmemBytes), 163u * 1024) << "D " << D;
  EXPECT_LE((FwdTraits<BF16, D, false, true>::kSmemBytes), flashattn::cuda::sm80::kFwdBigSmemBytes) << "D " << D;
  EXPECT_LE((FwdTraits<BF16, D, true, true>::kSmemBytes), flashattn::cuda::sm80::kFwdBigSmemBytes) << "D " << D;
}

TEST(CudaFwdTraits, ShapesFitEveryArch) {
  check_traits<64>();
  check_traits<96>();
  check_traits<128>();
  check_traits<192>();
  check_traits<256>();
}

// D = 256 runs two 4-warp blocks of 96 KB per SM where a block may have 192 KB (H100/H200: two fit
// in 228 KB per SM), and FlashAttention-2's single 8-warp 128 KB block everywhere else (A100).
TEST(CudaFwdTraits, BigSmemShapeOfHeadDim256) {
  using flashattn::cuda::sm80::fwd_tile_shape;
  using flashattn::cuda::sm80::FwdTileShape;
  EXPECT_EQ(fwd_tile_shape(256, flashattn::DType::bf16, true), (FwdTileShape{64, 64, 4, 1}));
  EXPECT_EQ(fwd_tile_shape(256, flashattn::DType::bf16, false), (FwdTileShape{128, 64, 8, 1}));
  EXPECT_EQ(fwd_tile_shape(128, flashattn::DType::bf16, true), fwd_tile_shape(128, flashattn::DType::bf16, false));
}

// DqLayout, both red widths: a permutation of each tile's block_m × head_dim floats; a postprocess
// chunk (8 columns from a multiple of 8, rows r and r + 8 for width 4) is 8·chunk_rows consecutive
// floats at chunk_offset; a lane's elements are its first one plus compile-time offsets (the
// kernel's pointer arithmetic); one warp-wide red covers 32·width contiguous floats (the point of
// the layout: 256 or 512 bytes of whole lines).
TEST(CudaBwdTile, DqLayoutIsTheFragmentOrder) {
  using flashattn::cuda::sm80::bwd_tile;
  using flashattn::cuda::sm80::DqLayout;
  for (int vec : {2, 4}) {
    for (int d : {64, 96, 128, 192, 256}) {
      for (bool big : {false, true}) {
        const auto tile = bwd_tile(d, big);
        // the postprocess reads the layout of bwd_tile(d, false): both tiles must agree on it
        ASSERT_EQ(tile.wide_dq_reds, bwd_tile(d, false).wide_dq_reds);
        ASSERT_EQ(tile.block_m, bwd_tile(d, false).block_m);
        ASSERT_EQ(tile.warps_m_dq, bwd_tile(d, false).warps_m_dq);
        const DqLayout L(tile, vec);
        SCOPED_TRACE(testing::Message() << "width " << vec << " d " << d << " big_smem " << big);
        std::vector<int> seen(tile.block_m * d, 0);
        for (int r = 0; r < tile.block_m; ++r) {
          for (int c = 0; c < d; ++c) {
            const int i = L.index(r, c);
            ASSERT_GE(i, 0);
            ASSERT_LT(i, tile.block_m * d);
            ++seen[i];
            const int h = vec == 4 ? r / 8 % 2 : 0, first = L.index(r - 8 * h, c - c % 8);
            ASSERT_EQ(i, first + DqLayout::chunk_offset(vec, h, c % 8 / 2, c % 2)) << "chunk of (" << r << ", " << c << ")";
            ASSERT_LT(i - first, 8 * DqLayout::chunk_rows(vec));
          }
        }
        ASSERT_EQ(*std::min_element(seen.begin(), seen.end()), 1);
        const int tm = tile.block_m / tile.warps_m_dq, td = d / (8 / tile.warps_m_dq);
        for (int warp = 0; warp < 8; ++warp) {
          const int row0 = warp % tile.warps_m_dq * tm, col0 = warp / tile.warps_m_dq * td;
          for (int r = 0; r < tm; r += 16) {
            for (int c = 0; c < td; c += 8) {
              for (int half = 0; half < 2; ++half) {
                int lo = 1 << 30, hi = -1;
                for (int lane = 0; lane < 32; ++lane) {
                  const int first = L.index(row0 + lane / 4, col0 + 2 * (lane % 4));
                  const int i = L.index(row0 + r + 8 * half + lane / 4, col0 + c + 2 * (lane % 4));
                  ASSERT_EQ(i, first + L.index(r + 8 * half, c)) << "warp " << warp << " lane " << lane;
                  // the lane's red: its column pair (width 2), or its whole C fragment from half 0 (width 4)
                  const int base = vec == 4 ? first + L.index(r, c) : i;
                  lo = std::min(lo, base);
                  hi = std::max(hi, base + vec);
                  if (vec == 4) {
                    ASSERT_EQ(L.index(row0 + r + lane / 4, col0 + c + 2 * (lane % 4) + 1), base + 1);
                    ASSERT_EQ(L.index(row0 + r + 8 + lane / 4, col0 + c + 2 * (lane % 4)), base + 2);
                    ASSERT_EQ(L.index(row0 + r + 8 + lane / 4, col0 + c + 2 * (lane % 4) + 1), base + 3);
                  }
                }
                ASSERT_EQ(hi - lo, 32 * vec) << "a warp's red is 32·width contiguous floats";
                ASSERT_EQ(lo % (32 * vec), 0);
              }
            }
          }
        }
      }
    }
  }
}

TEST(CudaBwdScheduler, GridOrdersCoverEveryKeyBlockOnce) {
  using namespace flashattn::cuda::sm80;
  std::mt19937 rng(5);
  for (int it = 0; it < 300; ++it) {
    BwdKernelParams p;
    p.num_n_blocks = 1 + int(rng() % 9);
    p.heads_kv = 1 + int(rng() % 5);
    p.batch = 1 + int(rng() % 4);
    p.key_blocks_outer = rng() % 2;
    const KeyBlockOrder order = rng() % 2 ? KeyBlockOrder::ascending : KeyBlockOrder::descending;
    const int blocks = p.num_n_blocks * p.heads_kv * p.batch;
    std::set<std::tuple<int, int, int>> seen;
    int last_rank = -1;
    for (int g = 0; g < blocks; ++g) {
      const BwdBlockIndex ix = bwd_block_index<true>(p, g, order);
      ASSERT_GE(ix.n_block, 0);
      ASSERT_LT(ix.n_block, p.num_n_blocks);
      ASSERT_LT(ix.h_kv, p.heads_kv);
      ASSERT_LT(ix.b, p.batch);
      EXPECT_TRUE(seen.insert({ix.n_block, ix.h_kv, ix.b}).second) << "block " << g << " repeats a key block";
      // Key blocks outer: every head's key block of rank r before any of rank r + 1.
      const int rank = order == KeyBlockOrder::ascending ? ix.n_block : p.num_n_blocks - 1 - ix.n_block;
      if (p.key_blocks_outer) EXPECT_GE(rank, last_rank) << "block " << g;
      last_rank = rank;
    }
    EXPECT_EQ(int(seen.size()), blocks);
  }
}

TEST(CudaScores, TransformModes) {
  using flashattn::cuda::ScoreMode;
  auto plain = flashattn::cuda::make_score_transform(0.125f, 0.f);
  EXPECT_EQ(plain.mode, ScoreMode::plain);
  EXPECT_FLOAT_EQ(plain.exp_mult, 0.125f * flashattn::cuda::kLog2e);
  auto neg = flashattn::cuda::make_score_transform(-0.5f, 0.f);
  EXPECT_EQ(neg.mode, ScoreMode::prescale);
  EXPECT_EQ(neg.exp_mult, 1.f);
  auto zero = flashattn::cuda::make_score_transform(0.f, 0.f);
  EXPECT_EQ(zero.mode, ScoreMode::prescale);
  auto cap = flashattn::cuda::make_score_transform(0.125f, 30.f);
  EXPECT_EQ(cap.mode, ScoreMode::softcap);
  EXPECT_FLOAT_EQ(cap.in_mult, 0.125f / 30.f);
  EXPECT_FLOAT_EQ(cap.out_mult, 30.f * flashattn::cuda::kLog2e);
}

// The backward's compile-time choice: only the soft cap's slope varies with the score, and its
// ScoreSlope maps the log2-domain score back to tanh.
TEST(CudaScores, SlopeVariesOnlyUnderTheCap) {
  using flashattn::cuda::make_score_transform;
  EXPECT_FALSE(flashattn::cuda::score_slope_varies(make_score_transform(0.125f, 0.f)));
  EXPECT_FALSE(flashattn::cuda::score_slope_varies(make_score_transform(-0.5f, 0.f)));
  const auto cap = make_score_transform(0.125f, 30.f);
  EXPECT_TRUE(flashattn::cuda::score_slope_varies(cap));
  EXPECT_FLOAT_EQ(flashattn::cuda::make_score_slope(cap).inv_cap_log2, 1.f / (30.f * flashattn::cuda::kLog2e));
  EXPECT_EQ(flashattn::cuda::make_score_slope(make_score_transform(0.125f, 0.f)).inv_cap_log2, 0.f);
}

// ---- the decode family (src/cuda/decode) ----

// Every split count and range: the splits cover the sequence's visible key blocks exactly once, in
// order, each holding at least kMinBlocksPerSplit blocks unless it is the last non-empty one.
TEST(CudaDecode, SplitsCoverEveryKeyBlockOnce) {
  using flashattn::cuda::decode::split_blocks;
  for (int first = 0; first < 5; ++first) {
    for (int last = 0; last < 300; last += (last < 40 ? 1 : 37)) {
      for (int splits = 1; splits <= 128; splits += (splits < 12 ? 1 : 29)) {
        std::vector<int> seen(std::max(last, 1), 0);
        int next = first, nonempty = 0;
        for (int s = 0; s < splits; ++s) {
          const auto r = split_blocks(first, last, splits, s);
          if (r.begin >= r.end) continue;
          ++nonempty;
          ASSERT_EQ(r.begin, next) << "first " << first << " last " << last << " splits " << splits << " split " << s;
          if (r.end < last) ASSERT_GE(r.end - r.begin, flashattn::cuda::decode::kMinBlocksPerSplit);
          for (int n = r.begin; n < r.end; ++n) ++seen[n];
          next = r.end;
        }
        ASSERT_EQ(next, std::max(first, last)) << "first " << first << " last " << last << " splits " << splits;
        for (int n = first; n < last; ++n) ASSERT_EQ(seen[n], 1);
        ASSERT_LE(nonempty, splits);
      }
    }
  }
}

// Packed rows of every kv head are a bijection onto (query, query head), and partial rows onto
// [0, batch · heads_q · seqlen_q), so no two tiles or splits write the same partial.
TEST(CudaDecode, PackedRowsAndPartialRowsAreBijections) {
  using namespace flashattn::cuda::decode;
  for (int heads_kv : {1, 2, 8}) {
    for (int group : {1, 3, 4, 32}) {
      for (int seqlen_q : {1, 2, 5}) {
        const int heads_q = heads_kv * group, batch = 3;
        std::set<int64_t> partials;
        for (int b = 0; b < batch; ++b) {
          std::set<std::pair<int, int>> seen;
          for (int h_kv = 0; h_kv < heads_kv; ++h_kv) {
            for (int r = 0; r < group * seqlen_q; ++r) {
              const PackedRow at = unpack_row(r, h_kv, group);
              ASSERT_GE(at.query, 0);
              ASSERT_LT(at.query, seqlen_q);
              ASSERT_EQ(at.head / group, h_kv) << "a packed row left its kv group";
              ASSERT_TRUE(seen.insert({at.query, at.head}).second);
              const int64_t row = partial_row(b, at.head, at.query, heads_q, seqlen_q);
              ASSERT_GE(row, 0);
              ASSERT_LT(row, int64_t{batch} * heads_q * seqlen_q);
              ASSERT_TRUE(partials.insert(row).second);
            }
          }
          ASSERT_EQ(seen.size(), static_cast<std::size_t>(heads_q * seqlen_q));
        }
      }
    }
  }
}

// The page arithmetic's division by an invariant divisor is exact for every page size and key.
TEST(CudaCommon, FastDivmodIsExact) {
  using flashattn::cuda::FastDivmod;
  std::mt19937 rng(5);
  for (int d : {1, 2, 3, 5, 7, 16, 17, 63, 64, 100, 256, 1000, 4097, 65536, 1 << 20, (1 << 30) + 3, 0x7fffffff}) {
    const FastDivmod f = FastDivmod::of(d);
    for (int it = 0; it < 20000; ++it) {
      const int n = it < 1000 ? it : static_cast<int>(rng() & 0x7fffffff);
      ASSERT_EQ(f.quotient(n), n / d) << "n " << n << " d " << d;
    }
    ASSERT_EQ(f.quotient(0x7fffffff), 0x7fffffff / d) << "d " << d;
  }
}

// The backward's split (bwd_plan.cu's split_for) on the H200's 132 SMs: which grids run as parts.
flashattn::BwdParams bwd_shape(int64_t batch, int64_t seqlen, int64_t heads_q, int64_t heads_kv, bool causal) {
  flashattn::BwdParams p;
  p.batch = batch;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.hdim_qk = p.hdim_v = 128;
  p.options.causal = causal;
  p.options.window_right = causal ? 0 : -1;  // normalized as validation leaves it
  return p;
}

TEST(CudaBackwardSplit, LongMaskedBlocksRunAsParts) {
  using flashattn::cuda::sm80::bwd_tile;
  using flashattn::cuda::sm80::split_for;
  const auto tile = bwd_tile(128, false);  // block_m 64, block_n 128
  // MQA 32/1 at batch 1, causal 8k: 64 key blocks, the first walking 32 · 128 = 4096 steps against an
  // SM's share of 1008: every block in parts, the first's about a quarter of that share.
  auto s = split_for(bwd_shape(1, 8192, 32, 1, true), tile, 132);
  EXPECT_EQ(s.first, 0);
  EXPECT_EQ(s.tail, 64);
  EXPECT_EQ(s.parts, 17);
  // The same with a sliding window (every block ~ the same length, 64 blocks on 132 SMs).
  auto w = bwd_shape(1, 8192, 32, 1, false);
  w.options.window_left = 1024;
  w.options.window_right = 0;
  s = split_for(w, tile, 132);
  EXPECT_EQ(s.first, 0);
  EXPECT_EQ(s.tail, 64);
  EXPECT_GE(s.parts, 2);
  // Grids of many blocks under a mask stay whole: the grid's causal cells, GQA 32/8 and 32/4.
  for (auto p : {bwd_shape(1, 16384, 16, 16, true), bwd_shape(32, 512, 16, 16, true), bwd_shape(2, 16384, 32, 8, true),
                 bwd_shape(2, 16384, 32, 4, true), bwd_shape(8, 4096, 32, 1, true)}) {
    s = split_for(p, tile, 132);
    EXPECT_EQ(s.tail, 0) << p.batch << " x " << p.seqlen_q << ", " << p.heads_q << "/" << p.heads_kv;
    EXPECT_EQ(s.parts, 1);
    EXPECT_EQ(s.first, (p.seqlen_k + 127) / 128 * p.heads_kv * p.batch);
  }
  // Deterministic calls split only small masked grids (at most a quarter of the SMs in blocks; their
  // parts' dQ turns serialize larger ones), each part's sums kept apart, within 256 MiB.
  auto d = bwd_shape(1, 8192, 32, 1, true);
  d.deterministic = true;
  EXPECT_EQ(split_for(d, tile, 132).tail, 0);  // 64 blocks
  d.seqlen_q = d.seqlen_k = 4096;                // 32 blocks
  s = split_for(d, tile, 132);
  EXPECT_EQ(s.tail, 32);
  EXPECT_GT(s.parts, 1);
  EXPECT_LE(int64_t{s.tail} * s.parts * 128 * 1024, int64_t{256} << 20);
  d.options.causal = false;  // no mask: whole blocks
  d.options.window_right = -1;
  EXPECT_EQ(split_for(d, tile, 132).tail, 0);
  // Varlen: counted at the longest lengths; two sequences of MQA still split.
  auto v = bwd_shape(2, 8192, 32, 1, true);
  const int32_t cu[] = {0, 8192, 12288};
  v.cu_seqlens_q = v.cu_seqlens_k = cu;
  s = split_for(v, tile, 132);
  EXPECT_EQ(s.first, 0);
  EXPECT_EQ(s.tail, 128);
  EXPECT_GE(s.parts, 2);
}

TEST(CudaBackwardSplit, LastWaveOfEqualBlocks) {
  using flashattn::cuda::sm80::bwd_tile;
  using flashattn::cuda::sm80::split_for;
  const auto tile = bwd_tile(128, false);
  // No mask, 2048 blocks on 132 SMs: the last 68 run split (as spans: LastWaveInSpans).
  const auto s = split_for(bwd_shape(1, 16384, 16, 16, false), tile, 132);
  EXPECT_EQ(s.first, 2048 - 68);
  EXPECT_EQ(s.tail, 68);
  EXPECT_TRUE(s.parts >= 2 || s.span > 0);
  // Whole waves and varlen stay whole.
  EXPECT_EQ(split_for(bwd_shape(1, 16384, 16, 16, false), tile, 128).tail, 0);
  auto v = bwd_shape(2, 8192, 16, 16, false);
  const int32_t cu[] = {0, 8192, 12288};
  v.cu_seqlens_q = v.cu_seqlens_k = cu;
  EXPECT_EQ(split_for(v, tile, 132).tail, 0);
}

// The span split (bwd_params.cuh): where the best equal parts still leave SMs idle (hdim 128 or 256
// without a mask: 2048 key blocks, 68 in the last wave of 132 SMs), the last wave runs as spans of
// one SM's share of its steps; their segments cover every step of every split block once, each
// block's count of segments is the count its parts wait for, and the order is longest first.
void expect_spans_cover(const flashattn::cuda::sm80::BwdSplit& s, int num_sms) {
  using namespace flashattn::cuda::sm80;
  BwdKernelParams k;
  k.split_first = s.first;
  k.split_tail = s.tail;
  k.split_span = s.span;
  k.split_block_steps = s.block_steps;
  TailOrder order{};
  const int count = tail_order(k, order);
  ASSERT_LE(count, 2 * num_sms);
  std::vector<int> covered(static_cast<std::size_t>(s.tail) * s.block_steps, 0), segments(s.tail, 0), parts(s.tail, -1);
  std::vector<int> seen(kMaxTailSegments, 0);
  int previous_length = INT_MAX;
  for (int i = 0; i < count; ++i) {
    const int entry = order.segment[i];
    ASSERT_EQ(seen[entry]++, 0) << "segment " << entry << " twice";
    const TailSegment seg = tail_segment(k, entry / 2, entry % 2);
    const int block = seg.grid_block - s.first;
    ASSERT_GE(block, 0);
    ASSERT_LT(block, s.tail);
    ASSERT_LT(seg.range.begin, seg.range.end);
    ASSERT_LE(seg.range.end, s.block_steps);
    ASSERT_LE(seg.range.end - seg.range.begin, previous_length) << "not longest first at " << i;
    previous_length = seg.range.end - seg.range.begin;
    for (int step = seg.range.begin; step < seg.range.end; ++step) covered[block * s.block_steps + step]++;
    segments[block]++;
    ASSERT_TRUE(parts[block] == -1 || parts[block] == seg.range.parts);
    parts[block] = seg.range.parts;
  }
  for (std::size_t i = 0; i < covered.size(); ++i) ASSERT_EQ(covered[i], 1) << "step " << i;
  for (int b = 0; b < s.tail; ++b) EXPECT_EQ(segments[b], parts[b]) << "block " << b;
}

TEST(CudaBackwardSplit, LastWaveInSpans) {
  using flashattn::cuda::sm80::bwd_tile;
  using flashattn::cuda::sm80::split_for;
  // hdim 256 at 4k: 68 blocks of 64 steps; equal parts at best 3 rounds of 13 steps (k = 5), spans 33.
  auto s = split_for(bwd_shape(4, 4096, 8, 8, false), bwd_tile(256, true), 132);
  EXPECT_EQ(s.first, 2048 - 68);
  EXPECT_EQ(s.tail, 68);
  EXPECT_EQ(s.block_steps, 64);
  EXPECT_EQ(s.span, 33);
  expect_spans_cover(s, 132);
  // hdim 128 from 1k to 16k, and shapes the GPU tests plan for 3 SMs (--sms=3).
  for (int64_t seqlen : {1024, 2048, 8192, 16384}) {
    s = split_for(bwd_shape(16384 / seqlen, seqlen, 16, 16, false), bwd_tile(128, true), 132);
    EXPECT_GT(s.span, 0) << seqlen;
    expect_spans_cover(s, 132);
  }
  // diff_test's case for it (differential_test.cpp: q 1000, k 4352, hdim 256, one head): 68 blocks
  // of 16 steps, spans of 9 on 132 SMs; planned for 3 SMs (ctest's --sms=3), the last 2 blocks in
  // spans of 11, one of them across both.
  auto d256 = bwd_shape(1, 1000, 1, 1, false);
  d256.seqlen_k = 4352;
  d256.hdim_qk = d256.hdim_v = 256;
  s = split_for(d256, bwd_tile(256, true), 132);
  EXPECT_EQ(s.first, 0);
  EXPECT_EQ(s.tail, 68);
  EXPECT_EQ(s.span, 9);
  expect_spans_cover(s, 132);
  s = split_for(d256, bwd_tile(256, true), 3);
  EXPECT_EQ(s.first, 66);
  EXPECT_EQ(s.tail, 2);
  EXPECT_EQ(s.span, 11);
  expect_spans_cover(s, 3);
  s = split_for(bwd_shape(1, 1000, 1, 1, false), bwd_tile(128, true), 3);  // the sanitizers' case
  EXPECT_EQ(s.first, 6);
  EXPECT_EQ(s.tail, 2);
  EXPECT_EQ(s.span, 11);
  expect_spans_cover(s, 3);
  // Whole blocks where spans cost more than no split (hdim 256 at 512: 68 blocks of 8 steps, spans of
  // 5 plus two overheads).
  s = split_for(bwd_shape(32, 512, 8, 8, false), bwd_tile(256, true), 132);
  EXPECT_EQ(s.tail, 0);
  // Where equal parts fill the GPU as well, they stay (hdim 64 at 16k: 4 blocks as 32 parts of 4).
  s = split_for(bwd_shape(1, 16384, 32, 32, false), bwd_tile(64, true), 132);
  EXPECT_EQ(s.span, 0);
  EXPECT_EQ(s.parts, 32);
}

// bwd_shape with seqlen_k keys and head dim hdim.
flashattn::BwdParams bwd_shape_keys(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q,
                                    int64_t heads_kv, int64_t hdim, bool causal) {
  flashattn::BwdParams p = bwd_shape(batch, seqlen_q, heads_q, heads_kv, causal);
  p.seqlen_k = seqlen_k;
  p.hdim_qk = p.hdim_v = hdim;
  return p;
}

// The plan pairs only where the paired kernel runs from PTX for sm_90+ (check_bwd_main_image's
// *pair_ptx): on a compute capability 9.0 GPU with a build for sm_90, so that the pair runs on the
// H100/H200 the tests and the benchmark use; on an earlier GPU never (it would run without clusters).
TEST(CudaBackwardSplit, PairedKernelHasSm90PtxWhereBuiltForIt) {
  FA_REQUIRE_DEVICE();
  const flashattn::cuda::sm80::Instance* inst = flashattn::cuda::sm80::find_instance(256);
  if (inst == nullptr || inst->head_dim != 256) GTEST_SKIP() << "no hdim-256 instance in this build";
  int dev = 0, major = 0;
  FA_CUDA_OK(cudaGetDevice(&dev));
  FA_CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major > 9) GTEST_SKIP() << "compute capability " << major << ".x: which image runs depends on the build";
  bool pair_ptx = major < 9;  // the wrong answer, so that an unset flag fails
  const flashattn::Status s =
      inst->bwd_check[flashattn::cuda::dtype_index(flashattn::DType::bf16)](/*big_smem=*/true, &pair_ptx);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(pair_ptx, major == 9 && FLASHATTN_TEST_BUILT_FOR_SM90 != 0);
}

// Where the sm80 backward's whole blocks run in cluster pairs that sum dQ over two key blocks
// (bwd_plan.cu's pair_dq_applies, bwd_pair.cuh): the big hdim-256 tile on sm_90+, without soft cap,
// varlen or deterministic mode, with an even number of key blocks per head and of whole blocks.
TEST(CudaBackwardSplit, PairedDq) {
  using flashattn::cuda::sm80::bwd_tile;
  using flashattn::cuda::sm80::pair_dq_applies;
  using flashattn::cuda::sm80::split_for;
  const auto d256 = bwd_tile(256, true);
  ASSERT_TRUE(d256.pair_dq);
  EXPECT_FALSE(bwd_tile(256, false).pair_dq);
  EXPECT_FALSE(bwd_tile(128, true).pair_dq);
  // Whether a call pairs where the paired kernel has its sm_90 PTX, with the grid split for `sms` SMs.
  const auto pairs = [&](const flashattn::BwdParams& p, int sms) {
    return pair_dq_applies(p, d256, true, split_for(p, d256, sms));
  };
  // hdim 256 at 4k: 2048 blocks, 1980 whole (even) and 68 in spans.
  const auto p = bwd_shape(4, 4096, 8, 8, false);
  const auto s = split_for(p, d256, 132);
  EXPECT_TRUE(pair_dq_applies(p, d256, true, s));
  EXPECT_FALSE(pair_dq_applies(p, d256, false, s));                 // no sm_90 PTX: no clusters
  EXPECT_FALSE(pair_dq_applies(p, bwd_tile(256, false), true, s));  // the small-memory tile
  EXPECT_FALSE(pairs(p, 131));                                   // 2048 mod 131 = 83: 1965 whole
  EXPECT_TRUE(pairs(bwd_shape(4, 4096, 8, 8, true), 132));       // pairs walk both blocks' query tiles
  // Every block in parts (split_long_blocks): none whole.
  EXPECT_FALSE(pairs(bwd_shape_keys(1, 8192, 8192, 32, 1, 256, true), 132));
  // diff_test's causal pair case: 256 whole blocks of up to 32 query tiles; with 16 at most the extra
  // step costs more.
  EXPECT_TRUE(pairs(bwd_shape_keys(1, 2048, 2048, 8, 8, 256, true), 132));
  EXPECT_FALSE(pairs(bwd_shape(16, 1024, 8, 8, true), 132));
  // diff_test's GQA case at hdim 224 (q 128, k 2048, 16/8 heads): 256 blocks, all whole.
  const auto gqa = bwd_shape_keys(1, 128, 2048, 16, 8, 224, false);
  EXPECT_EQ(split_for(gqa, d256, 132).first, 256);
  EXPECT_TRUE(pairs(gqa, 132));
  auto det = p;
  det.deterministic = true;
  EXPECT_FALSE(pairs(det, 132));
  auto capped = p;
  capped.options.softcap = 30.f;
  EXPECT_FALSE(pairs(capped, 132));
  // An odd number of key blocks per head (4097 keys: 65 blocks) never pairs.
  auto odd = p;
  odd.seqlen_k = 4097;
  EXPECT_FALSE(pairs(odd, 132));
  // diff_test's cases (differential_test.cpp): q 1000, k 4352, one head (68 blocks): all in spans on
  // 132 SMs (nothing whole to pair), 66 whole on 3 (ctest's --sms=3); q 300, k 4352, 2 × 2 heads (272
  // blocks): 264 whole on 132 SMs.
  const auto one = bwd_shape_keys(1, 1000, 4352, 1, 1, 256, false);
  EXPECT_FALSE(pairs(one, 132));
  EXPECT_TRUE(pairs(one, 3));
  const auto four = bwd_shape_keys(2, 300, 4352, 2, 2, 256, false);
  EXPECT_EQ(split_for(four, d256, 132).first, 264);
  EXPECT_TRUE(pairs(four, 132));
}

// The sm80 backward's grid order (bwd_plan.cu's key_blocks_outer): key blocks outer under a mask,
// except deterministic mode, the tiles without that order (hdim 256) and short MHA calls (through 2k
// keys on the H100's memory, through 512 at hdim 64 on the H200's), where heads outer measured faster.
TEST(CudaBackwardSplit, GridOrderByMemory) {
  using flashattn::cuda::sm80::bwd_tile;
  using flashattn::cuda::sm80::key_blocks_outer;
  const double h100 = 3.35e12, h200 = 4.8e12;
  const auto d64 = bwd_tile(64, true), d128 = bwd_tile(128, true), d256 = bwd_tile(256, true);
  EXPECT_FALSE(key_blocks_outer(bwd_shape(8, 2048, 16, 16, true), d128, h100));
  EXPECT_TRUE(key_blocks_outer(bwd_shape(4, 4096, 16, 16, true), d128, h100));
  EXPECT_FALSE(key_blocks_outer(bwd_shape(32, 512, 32, 32, true), d64, h200));
  EXPECT_TRUE(key_blocks_outer(bwd_shape(16, 1024, 32, 32, true), d64, h200));
  EXPECT_TRUE(key_blocks_outer(bwd_shape(32, 512, 16, 16, true), d128, h200));
  EXPECT_FALSE(key_blocks_outer(bwd_shape(8, 2048, 16, 16, true), d128, 0));  // unknown: as slow memory
  EXPECT_TRUE(key_blocks_outer(bwd_shape(8, 2048, 32, 1, true), d128, h100));  // GQA: the fill
  EXPECT_FALSE(key_blocks_outer(bwd_shape(4, 4096, 16, 16, false), d128, h100));  // no mask
  EXPECT_FALSE(key_blocks_outer(bwd_shape(4, 4096, 8, 8, true), d256, h100));    // one order
  auto det = bwd_shape(4, 4096, 16, 16, true);
  det.deterministic = true;
  EXPECT_FALSE(key_blocks_outer(det, d128, h100));
}

// The sm90 backward's parts (bwd_launch.hpp's bwd_parts, bwd_chains) on 132 SMs. On the H100's
// memory a part walks at most 4 query heads of a group over 8 (the GQA/MQA rows: 32/8 and 32/4 whole,
// 32/1 in 8 parts), on the H200's groups stay whole; on both, chain-bound calls (MQA at batch 1) split
// into parts of about a quarter of an SM's share, in whole heads. D = 64, deterministic mode and lone
// heads never split: there chain-bound calls are left to sm80's backward.
TEST(CudaSm90BackwardPlan, LongAndWideChainsRunAsParts) {
  using flashattn::cuda::sm90::bwd_chains;
  constexpr double kH100 = 3.35e12, kH200 = 4.8e12;
  const int hd = 128;  // the kernel whose steps are counted (128 keys, 64 query rows)
  // GQA rows (causal, hdim 128, 32 query heads): batch 2 x 16k, 8 x 4k, 16 x 2k.
  const std::tuple<flashattn::BwdParams, int64_t> rows[] = {
      {bwd_shape(2, 16384, 32, 8, true), 1},  {bwd_shape(2, 16384, 32, 4, true), 1},
      {bwd_shape(2, 16384, 32, 1, true), 8},  {bwd_shape(8, 4096, 32, 1, true), 8},
      {bwd_shape(16, 2048, 32, 1, true), 8}, {bwd_shape(16, 2048, 32, 4, true), 1}};
  for (const auto& [p, parts] : rows) {
    for (double bw : {kH100, 0.0, kH200}) {
      const auto c = bwd_chains(p, hd, 132, bw);
      const int64_t want = bw == kH200 ? 1 : parts;
      EXPECT_FALSE(c.chain_bound) << p.batch << " x " << p.seqlen_q << ", " << p.heads_q << "/" << p.heads_kv;
      EXPECT_EQ(c.parts, want) << p.batch << " x " << p.seqlen_q << ", " << p.heads_q << "/" << p.heads_kv << ", " << bw;
      EXPECT_EQ(c.ctas, c.cells * c.parts);
      EXPECT_EQ(c.heads_per_cta(p.heads_q / p.heads_kv), p.heads_q / p.heads_kv / want);
    }
  }
  // The grid's cells: no mask, every block alike and many of them; causal, longest first. Whole.
  for (bool causal : {false, true}) {
    for (int64_t s = 512; s <= 16384; s *= 2) {
      const auto c = bwd_chains(bwd_shape(16384 / s, s, 16, 16, causal), hd, 132, kH100);
      EXPECT_FALSE(c.chain_bound) << s;
      EXPECT_EQ(c.parts, 1) << s;
    }
  }
  // MQA 32/1 at batch 1, causal 8k: the first key block walks 4096 of 133,120 steps (30 x an SM's
  // share); parts of about a quarter of a share (252 steps): 17 of 1 or 2 heads (2 x 128 steps).
  for (double bw : {kH100, kH200}) {
    const auto c = bwd_chains(bwd_shape(1, 8192, 32, 1, true), hd, 132, bw);
    EXPECT_FALSE(c.chain_bound);
    EXPECT_EQ(c.cells, 64);
    EXPECT_EQ(c.parts, 17);
    EXPECT_EQ(c.ctas, 64 * 17);
    EXPECT_EQ(c.longest, 2 * 128);
  }
  // Whole where nothing splits: deterministic mode, D = 64, a lone head (one head without a mask,
  // 64 blocks of 128 steps on 132 SMs); chain-bound, so left to sm80's split.
  auto det = bwd_shape(1, 8192, 32, 1, true);
  det.deterministic = true;
  auto c = bwd_chains(det, hd, 132, kH100);
  EXPECT_TRUE(c.chain_bound);
  EXPECT_EQ(c.parts, 1);
  EXPECT_EQ(c.longest, 4096);
  c = bwd_chains(bwd_shape(1, 8192, 32, 1, true), 64, 132, kH100);
  EXPECT_TRUE(c.chain_bound);
  EXPECT_EQ(c.parts, 1);
  c = bwd_chains(bwd_shape(1, 8192, 1, 1, false), hd, 132, kH100);
  EXPECT_TRUE(c.chain_bound);
  EXPECT_EQ(c.parts, 1);
  // Short chains run whole whatever the grid (a small problem), and a 1-SM plan (the tests') splits
  // only for L2 (MQA 32/1 on the H100's memory: 8 parts of 4 heads).
  EXPECT_EQ(bwd_chains(bwd_shape(1, 1024, 1, 1, false), hd, 132, kH100).parts, 1);  // 16 steps
  EXPECT_EQ(bwd_chains(bwd_shape(1, 8192, 32, 1, true), hd, 1, kH100).parts, 8);
  EXPECT_EQ(bwd_chains(bwd_shape(1, 8192, 32, 1, true), hd, 1, kH200).parts, 1);
  // A large group: 64 heads in 16 parts of 4 at 512 keys (8 steps a head), but no part under 16
  // steps: at 128 keys (2 steps a head) 8 parts of 8 heads.
  EXPECT_EQ(bwd_chains(bwd_shape(32, 512, 64, 1, false), hd, 132, kH100).parts, 16);
  EXPECT_EQ(bwd_chains(bwd_shape(32, 128, 64, 1, false), hd, 132, kH100).parts, 8);
  // Parts of unequal heads (the diff test's cases): 5 heads, causal 1500, in 4 parts (2, 1, 1, 1) on
  // 132 SMs; 8 heads over one key block in 4 parts of 2 even on 2 SMs.
  EXPECT_EQ(bwd_chains(bwd_shape(1, 1500, 5, 1, true), hd, 132, kH200).parts, 4);
  auto one_block = bwd_shape(1, 1000, 8, 1, false);
  one_block.seqlen_k = 100;
  EXPECT_EQ(bwd_chains(one_block, hd, 2, kH200).parts, 4);
  // Empty problems walk nothing: run here (dK = dV = 0), whole, not refused as chain-bound.
  for (auto p : {bwd_shape(0, 8192, 1, 1, false), bwd_shape(1, 8192, 1, 1, false)}) {
    if (p.batch == 1) p.seqlen_k = 0;
    const auto e = bwd_chains(p, hd, 132, kH100);
    EXPECT_FALSE(e.chain_bound) << "longest " << e.longest << " of " << e.steps;
    EXPECT_EQ(e.longest, 0);
    EXPECT_EQ(e.parts, 1);
  }
}

// The steps' shapes (bwd_launch.hpp): 128 query rows at D = 64 (D = 128's work per step), 64 above;
// the plan counts a call's chains in those steps.
TEST(CudaSm90BackwardPlan, StepShapes) {
  using flashattn::cuda::sm90::bwd_block_m;
  using flashattn::cuda::sm90::bwd_block_n;
  using flashattn::cuda::sm90::bwd_chains;
  EXPECT_EQ(bwd_block_m(64), 128);
  EXPECT_EQ(bwd_block_n(64), 128);
  EXPECT_EQ(bwd_block_m(128), 64);
  EXPECT_EQ(bwd_block_n(128), 128);
  EXPECT_EQ(bwd_block_m(256), 64);
  EXPECT_EQ(bwd_block_n(256), 64);
  // MQA 32/1 at batch 1, causal 8k: the first key block walks every query block of every head
  // (deterministic: whole key blocks, so the longest part is that chain).
  auto mqa = bwd_shape(1, 8192, 32, 1, true);
  mqa.deterministic = true;
  const auto c64 = bwd_chains(mqa, 64, 132, 0.0);
  EXPECT_EQ(c64.cells, 64);
  EXPECT_EQ(c64.longest, 32 * 8192 / 128);
  const auto c128 = bwd_chains(mqa, 128, 132, 0.0);
  EXPECT_EQ(c128.longest, 32 * 8192 / 64);
}

// "auto" takes the sm90 backward where it was measured faster than sm80's (bwd_launch.hpp's
// kBackwardAuto): without a mask always; with one, D = 64 and 128 at any length (on the H100's or
// unknown memory for groups up to 8: a CTA's, a part's query heads where the key blocks run in parts),
// D = 256 on the H200's memory from 512 keys where the grid goes grouped (groups up to 8, under 4k
// keys) and from 4k otherwise, on the H100's from 1k; never deterministic.
TEST(CudaSm90BackwardPlan, AutoWhereMeasuredFaster) {
  using flashattn::cuda::sm90::backward_in_auto;
  using flashattn::cuda::sm90::BackwardCall;
  constexpr double kH200 = 4.8e12, kH100 = 3.35e12;
  const auto call = [](int d, int64_t s, int64_t group, bool masked, double bandwidth, bool det = false) {
    return BackwardCall{d, s, group, masked, det, bandwidth};
  };
  for (double bw : {kH200, kH100, 0.0}) {
    for (int64_t s : {512, 16384}) {
      EXPECT_TRUE(backward_in_auto(call(64, s, 1, false, bw))) << s;
      EXPECT_TRUE(backward_in_auto(call(128, s, 1, false, bw))) << s;
      EXPECT_TRUE(backward_in_auto(call(256, s, 32, false, bw))) << s;
      EXPECT_FALSE(backward_in_auto(call(128, s, 1, false, bw, true))) << s;
      EXPECT_FALSE(backward_in_auto(call(128, s, 1, true, bw, true))) << s;
    }
    EXPECT_TRUE(backward_in_auto(call(64, 8192, 1, true, bw)));
    EXPECT_FALSE(backward_in_auto(call(192, 16384, 1, false, bw)));  // no sm90 backward instance
  }
  // Masked, fast memory (the H200).
  EXPECT_TRUE(backward_in_auto(call(64, 512, 1, true, kH200)));
  EXPECT_TRUE(backward_in_auto(call(64, 2048, 32, true, kH200)));
  EXPECT_TRUE(backward_in_auto(call(128, 512, 1, true, kH200)));
  EXPECT_TRUE(backward_in_auto(call(128, 2048, 32, true, kH200)));  // MQA: 1.10 x sm80's
  EXPECT_TRUE(backward_in_auto(call(256, 512, 1, true, kH200)));    // the grid grouped
  EXPECT_TRUE(backward_in_auto(call(256, 2048, 8, true, kH200)));
  EXPECT_FALSE(backward_in_auto(call(256, 2048, 16, true, kH200)));  // one group: 0.73-0.78 x below 4k
  EXPECT_TRUE(backward_in_auto(call(256, 4096, 16, true, kH200)));
  // Masked, slower or unknown memory (the H100): the grouped order, groups up to 8.
  for (double bw : {kH100, 0.0}) {
    EXPECT_TRUE(backward_in_auto(call(64, 512, 1, true, bw)));
    EXPECT_TRUE(backward_in_auto(call(64, 2048, 8, true, bw)));
    EXPECT_FALSE(backward_in_auto(call(64, 2048, 32, true, bw)));  // D = 64 has no parts: MQA whole
    EXPECT_TRUE(backward_in_auto(call(128, 512, 1, true, bw)));
    EXPECT_TRUE(backward_in_auto(call(128, 2048, 8, true, bw)));
    EXPECT_FALSE(backward_in_auto(call(128, 2048, 32, true, bw)));  // MQA whole: 0.91 x sm80's on the H100
    EXPECT_FALSE(backward_in_auto(call(128, 16384, 16, true, bw)));
    EXPECT_TRUE(backward_in_auto(call(128, 2048, 4, true, bw)));  // MQA 32/1 in 8 parts: 1.14-1.20 x
    EXPECT_FALSE(backward_in_auto(call(256, 512, 1, true, bw)));
    EXPECT_TRUE(backward_in_auto(call(256, 1024, 1, true, bw)));
  }
}

// The grid order covers every (key block, pair) once; under a mask the pairs go in groups
// (bwd_order_pairs: one wave's worth of key blocks) and a group's key blocks come in order.
TEST(CudaSm90BackwardPlan, GridOrderCoversTheGridOnce) {
  using flashattn::cuda::sm90::bwd_grid_cell;
  std::mt19937 rng(5);
  for (int it = 0; it < 2000; ++it) {
    const int n_blocks = 1 + rng() % 70, pairs = 1 + rng() % 50, order_pairs = 1 + rng() % pairs;
    const bool outer = rng() % 2;
    std::vector<int> seen(static_cast<size_t>(n_blocks) * pairs, 0);
    int last_group = -1, last_n = -1;
    for (int bid = 0; bid < n_blocks * pairs; ++bid) {
      const auto c = bwd_grid_cell(bid, outer, order_pairs, n_blocks, pairs);
      ASSERT_TRUE(c.n_block >= 0 && c.n_block < n_blocks && c.pair >= 0 && c.pair < pairs) << bid;
      ++seen[static_cast<size_t>(c.pair) * n_blocks + c.n_block];
      if (outer) {
        const int group = c.pair / order_pairs;
        ASSERT_GE(group, last_group) << bid;
        if (group == last_group) ASSERT_GE(c.n_block, last_n) << bid;
        last_group = group;
        last_n = c.n_block;
      }
    }
    for (int x : seen) ASSERT_EQ(x, 1) << n_blocks << " key blocks, " << pairs << " pairs of " << order_pairs;
  }
  // The order's group at a (batch, seqlen, heads_q, heads_kv) masked call of head dim d on 132 SMs.
  const auto order_pairs = [](int64_t batch, int64_t seqlen, int64_t heads_q, int64_t heads_kv, int d, double bw) {
    const flashattn::cuda::sm90::BackwardCall call{d, seqlen, heads_q / heads_kv, true, false, bw};
    return flashattn::cuda::sm90::bwd_order_pairs(call, static_cast<int>(heads_kv * batch), 132);
  };
  constexpr double kH100 = 3.35e12, kH200 = 4.8e12;
  EXPECT_EQ(order_pairs(8, 2048, 8, 8, 256, kH100), 5);  // 32 key blocks a pair
  EXPECT_EQ(order_pairs(1, 4096, 8, 8, 256, kH100), 3);
  EXPECT_EQ(order_pairs(32, 512, 16, 16, 128, kH100), 33);
  EXPECT_EQ(order_pairs(1, 128, 2, 2, 128, kH100), 2);  // at most every pair
  EXPECT_EQ(order_pairs(8, 2048, 32, 4, 128, kH100), 9);  // 8 query heads a kv head
  // The H200's memory: D = 256 under 4k keys.
  EXPECT_EQ(order_pairs(8, 2048, 8, 8, 256, kH200), 5);
  EXPECT_EQ(order_pairs(32, 512, 8, 8, 256, kH200), 17);
  EXPECT_EQ(order_pairs(2, 8192, 32, 32, 64, kH100), 3);  // D = 64 and 256 under 16k keys
  EXPECT_EQ(order_pairs(1, 8192, 8, 8, 256, kH100), 2);
  // One group of every pair: long keys, MQA, D = 128 from 8k keys on the H100's memory, D = 64 and
  // 128 and D = 256 from 4k on the H200's.
  EXPECT_EQ(order_pairs(2, 8192, 16, 16, 128, kH100), 32);
  EXPECT_EQ(order_pairs(1, 16384, 32, 32, 64, kH100), 32);
  EXPECT_EQ(order_pairs(16, 2048, 32, 1, 128, kH100), 16);
  EXPECT_EQ(order_pairs(8, 2048, 16, 16, 128, kH200), 128);
  EXPECT_EQ(order_pairs(8, 4096, 8, 8, 256, kH200), 64);
  EXPECT_EQ(order_pairs(8, 2048, 32, 2, 256, kH200), 16);
}

// A key block's parts (bwd_part_heads, with the plan's part_heads = group / parts and extra = group %
// parts) walk every query head of the group once, in order, the longest ceil(group / parts) heads.
TEST(CudaSm90BackwardPlan, PartsCoverTheGroupOnce) {
  using flashattn::cuda::sm90::bwd_part_heads;
  for (int group = 1; group <= 70; ++group) {
    for (int parts = 1; parts <= group; ++parts) {
      int next = 0, longest = 0;
      for (int j = 0; j < parts; ++j) {
        const auto h = bwd_part_heads(j, group / parts, group % parts);
        ASSERT_EQ(h.first, next) << group << " heads, part " << j << " of " << parts;
        ASSERT_GE(h.count, 1);
        next += h.count;
        longest = std::max(longest, h.count);
      }
      ASSERT_EQ(next, group) << parts << " parts";
      ASSERT_EQ(longest, (group + parts - 1) / parts);
    }
  }
}

// The maps the sm90 backward encodes: none over an empty tensor (TMA takes no zero-sized dimension
// and an empty tensor may have no data pointer); the kernel never loads through the others.
TEST(CudaSm90BackwardPlan, EmptyTensorsGetNoMap) {
  using flashattn::cuda::sm90::bwd_loads_keys;
  using flashattn::cuda::sm90::bwd_loads_queries;
  auto p = bwd_shape(2, 128, 4, 2, false);
  EXPECT_TRUE(bwd_loads_queries(p));
  EXPECT_TRUE(bwd_loads_keys(p));
  p.seqlen_q = 0;  // no queries: dK = dV = 0 from every CTA, K and V still mapped
  EXPECT_FALSE(bwd_loads_queries(p));
  EXPECT_TRUE(bwd_loads_keys(p));
  auto v = bwd_shape(2, 128, 4, 2, false);  // varlen, no packed key rows but a nonzero longest length
  const int32_t cu_q[] = {0, 5, 9}, cu_k[] = {0, 0, 0};
  v.cu_seqlens_q = cu_q;
  v.cu_seqlens_k = cu_k;
  v.total_q = 9;
  v.total_k = 0;
  EXPECT_FALSE(bwd_loads_keys(v));
  EXPECT_FALSE(bwd_loads_queries(v));  // no CTA has keys, so none walks a step
  v.total_k = 9;
  v.cu_seqlens_k = cu_q;
  EXPECT_TRUE(bwd_loads_keys(v));
  EXPECT_TRUE(bwd_loads_queries(v));
  v.total_q = 0;
  EXPECT_FALSE(bwd_loads_queries(v));
  auto nk = bwd_shape(2, 128, 4, 2, false);  // padded, no keys: nothing is loaded
  nk.seqlen_k = 0;
  EXPECT_FALSE(bwd_loads_keys(nk));
  EXPECT_FALSE(bwd_loads_queries(nk));
  auto b = bwd_shape(0, 128, 4, 2, false);
  EXPECT_FALSE(bwd_loads_queries(b));
  EXPECT_FALSE(bwd_loads_keys(b));
}

TEST(CudaBackwardSplit, CoversTheGrid) {
  using flashattn::cuda::sm80::bwd_tile;
  using flashattn::cuda::sm80::split_for;
  std::mt19937 rng(11);
  for (int it = 0; it < 3000; ++it) {
    const int64_t heads_kv = 1 + rng() % 8, group = 1 + rng() % 16;
    auto p = bwd_shape(1 + rng() % 8, 1 + rng() % 40000, heads_kv * group, heads_kv, rng() % 2);
    if (rng() % 4 == 0) p.options.window_left = rng() % 3000;
    if (rng() % 4 == 0) p.options.window_right = rng() % 3000;
    p.deterministic = rng() % 3 == 0;
    for (int d : {64, 128, 256}) {
      const auto tile = bwd_tile(d, true);
      const int sms = 1 + rng() % 200;
      const auto s = split_for(p, tile, sms);
      const int64_t blocks = (p.seqlen_k + tile.block_n - 1) / tile.block_n * p.heads_kv * p.batch;
      ASSERT_EQ(int64_t{s.first} + s.tail, blocks);
      ASSERT_GE(s.parts, 1);
      ASSERT_LE(s.parts, 64);
      ASSERT_EQ(s.parts == 1 && s.span == 0, s.tail == 0);
      if (s.span > 0) {
        ASSERT_FALSE(p.deterministic);
        ASSERT_EQ(s.parts, 1);
        expect_spans_cover(s, sms);
      }
      if (p.deterministic) ASSERT_LE(int64_t{s.tail} * s.parts * 2 * tile.block_n * d * 4, int64_t{256} << 20);
    }
  }
}

// The decode tiles fit an A100's and an H100's shared memory, and the warps' merge fits the K/V stages.
template <int D>
void expect_decode_shape_fits() {
  using T = flashattn::cuda::decode::DecodeTraits<flashattn::ptx::BF16, D, true>;
  EXPECT_LE(T::kSmemBytes, std::size_t{163} * 1024) << "D = " << D;
  EXPECT_LE(T::kMergeBytes, 2 * T::kStages * T::KVTile::kBytes) << "D = " << D;
  EXPECT_EQ(T::kKeysPerWarp * T::kWarps, T::kBlockN);
}
TEST(CudaDecode, ShapesFitSharedMemory) {
  expect_decode_shape_fits<64>();
  expect_decode_shape_fits<128>();
  expect_decode_shape_fits<256>();
}

}  // namespace
