// Device building blocks of src/cuda/common against host computations, one block at a time, so a
// failure names the piece: LdsmAddr (fragment addresses vs the swizzle), TileIO (predicated cp.async
// loads with zero fill, predicated stores), gemm_ss (swizzle + ldmatrix + mma: Q·Kᵀ on one tile),
// gemm_rs (accumulator → A fragments + ldmatrix.trans: P·V), OnlineSoftmax (max/rescale/−inf
// handling, lse), mask_accumulator (fragment coordinates of the mask), tanh_accurate.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/common/mask.cuh"
#include "cuda/common/scores.cuh"
#include "cuda/sm80/hooks.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile_io.cuh"
#include "cuda/sm80/warp_gemm.cuh"
#include "test_util.cuh"

namespace {

using namespace flashattn::cuda;
using flashattn::ptx::BF16;
using flashattn::ptx::F16;

// ---- LdsmAddr ---------------------------------------------------------------------------------
template <class Tile>
__global__ void ldsm_addr_kernel(int* mismatches) {
  const int lane = threadIdx.x;
  const uint32_t tile = 4096;  // any 128-byte aligned base
  int bad = 0;
  for (int pattern = 0; pattern < 3; ++pattern) {
    const int row0 = 8 * (pattern + 1);
    int row_lane, chunk_lane;
    LdsmAddr<Tile> addr = ldsm_a_addr<Tile>(tile, row0, lane);
    if (pattern == 0) {
      row_lane = row0 + lane % 16, chunk_lane = lane / 16;
    } else if (pattern == 1) {
      addr = ldsm_b_addr<Tile>(tile, row0, lane);
      row_lane = row0 + lane % 8 + 8 * (lane / 16), chunk_lane = (lane / 8) % 2;
    } else {
      addr = ldsm_bt_addr<Tile>(tile, row0, lane);
      row_lane = row0 + lane % 16, chunk_lane = lane / 16;
    }
    for (int rd = 0; row_lane + rd < Tile::kRows; rd += 8)
      for (int cd = 0; chunk_lane + cd < Tile::kChunksPerRow; cd += 2)
        bad += addr.at(rd, cd, 256) != tile + 256 + Tile::chunk_offset(row_lane + rd, chunk_lane + cd);
  }
  atomicAdd(mismatches, bad);
}

template <class Tile>
void check_ldsm_addr() {
  fa_test::DeviceBuffer<int> bad(std::vector<int>{0});
  ldsm_addr_kernel<Tile><<<1, 32>>>(bad.ptr);
  FA_KERNEL_OK();
  EXPECT_EQ(bad.download()[0], 0) << "tile " << Tile::kRows << " x " << Tile::kCols;
}

TEST(CudaCommon, LdsmAddrMatchesSwizzleSmall) {
  FA_REQUIRE_DEVICE();
  check_ldsm_addr<SmemTile<64, 64>>();
  check_ldsm_addr<SmemTile<64, 96>>();
  check_ldsm_addr<SmemTile<128, 128>>();
  check_ldsm_addr<SmemTile<64, 192>>();
  check_ldsm_addr<SmemTile<64, 256>>();
}

// ---- TileIO -----------------------------------------------------------------------------------
// Loads a tile from a strided matrix (rows_valid, cols_valid), reads it back logically, stores it
// to a poisoned output with the same predicates.
template <class Tile, int kThreads>
__global__ void tile_io_kernel(const uint16_t* src, int64_t stride, int rows_valid, int cols_valid, uint16_t* logical,
                               uint16_t* stored) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x;
  for (int i = tid; i < Tile::kBytes / 4; i += kThreads) reinterpret_cast<uint32_t*>(smem)[i] = 0xdeadbeefu;
  __syncthreads();
  const uint32_t s = flashattn::ptx::smem_addr(smem);
  TileIO<Tile, kThreads>::load_async_or_zero(s, src, stride, rows_valid, cols_valid, tid);
  flashattn::ptx::cp_async_commit();
  flashattn::ptx::cp_async_wait<0>();
  __syncthreads();
  for (int e = tid; e < Tile::kRows * Tile::kCols; e += kThreads) {
    const int r = e / Tile::kCols, c = e % Tile::kCols;
    logical[e] = *reinterpret_cast<const uint16_t*>(smem + Tile::elem_offset(r, c));
  }
  TileIO<Tile, kThreads>::store(stored, stride, rows_valid, cols_valid, smem, tid);
}

template <int kRows, int kCols, int kThreads>
void check_tile_io(int rows_valid, int cols_valid) {
  using Tile = SmemTile<kRows, kCols>;
  SCOPED_TRACE(testing::Message() << "tile " << kRows << "x" << kCols << " threads " << kThreads << " valid "
                                  << rows_valid << "x" << cols_valid);
  const int64_t stride = kCols + 40;  // padded rows
  std::vector<uint16_t> src(kRows * stride);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint16_t(1 + i % 60000);
  const uint16_t kPoison = 0xffff;
  fa_test::DeviceBuffer<uint16_t> dsrc(src), dlog(kRows * kCols), dst(std::vector<uint16_t>(src.size(), kPoison));
  tile_io_kernel<Tile, kThreads><<<1, kThreads, Tile::kBytes>>>(dsrc.ptr, stride, rows_valid, cols_valid,
                                                                dlog.ptr, dst.ptr);
  FA_KERNEL_OK();
  const auto logical = dlog.download();
  const auto stored = dst.download();
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      const bool valid = r < rows_valid && c < cols_valid;
      ASSERT_EQ(logical[r * kCols + c], valid ? src[r * stride + c] : 0) << "smem (" << r << ", " << c << ")";
      ASSERT_EQ(stored[r * stride + c], valid ? src[r * stride + c] : kPoison) << "stored (" << r << ", " << c << ")";
    }
  }
}

TEST(CudaCommon, TileLoadStorePredicatedSmall) {
  FA_REQUIRE_DEVICE();
  check_tile_io<64, 128, 128>(64, 128);  // full tile fast path
  check_tile_io<64, 128, 128>(37, 128);
  check_tile_io<64, 128, 128>(64, 72);
  check_tile_io<64, 128, 128>(37, 72);
  check_tile_io<64, 96, 128>(50, 96);    // general path (128 % 12 != 0)
  check_tile_io<64, 96, 128>(64, 40);
  check_tile_io<64, 192, 256>(9, 136);
  check_tile_io<128, 64, 128>(1, 8);
  check_tile_io<64, 256, 128>(64, 256);  // store: one column per thread, 4-row steps (swizzle varies)
  check_tile_io<64, 256, 128>(61, 200);
  check_tile_io<128, 128, 256>(97, 64);   // store: 16-row steps
}

// ---- gemm_ss and gemm_rs on one tile ----------------------------------------------------------
// kWarps warps, each owning 16·kMTiles rows of Q: S = Q·Kᵀ (stored per the C layout), then
// O = P·V with P = S·p_scale rounded to the 16-bit type (accumulator_to_a_fragments).
template <class Tag, int kD, int kBN, int kMTiles, int kWarps>
__global__ void gemm_kernel(const uint16_t* q, const uint16_t* k, const uint16_t* v, float p_scale, float* s_out,
                            float* o_out) {
  using QTile = SmemTile<16 * kMTiles * kWarps, kD>;
  using KVTile = SmemTile<kBN, kD>;
  constexpr int kThreads = 32 * kWarps, kNTiles = kBN / 8, kDTiles = kD / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const uint32_t sq = flashattn::ptx::smem_addr(smem), sk = sq + QTile::kBytes, sv = sk + KVTile::kBytes;
  TileIO<QTile, kThreads>::load_async_or_zero(sq, q, kD, QTile::kRows, kD, tid);
  TileIO<KVTile, kThreads>::load_async_or_zero(sk, k, kD, kBN, kD, tid);
  TileIO<KVTile, kThreads>::load_async_or_zero(sv, v, kD, kBN, kD, tid);
  flashattn::ptx::cp_async_commit();
  flashattn::ptx::cp_async_wait<0>();
  __syncthreads();
  const int row0 = warp * 16 * kMTiles;
  float s[kMTiles][kNTiles][4] = {};
  gemm_ss<Tag, QTile, KVTile, kMTiles, kNTiles, kD / 16>(s, ldsm_a_addr<QTile>(sq, row0, lane),
                                                         ldsm_b_addr<KVTile>(sk, 0, lane), 0);
  for (int mi = 0; mi < kMTiles; ++mi)
    for (int ni = 0; ni < kNTiles; ++ni)
      for (int c = 0; c < 4; ++c) {
        const int row = row0 + 16 * mi + 8 * (c / 2) + g, col = 8 * ni + 2 * t + c % 2;
        s_out[row * kBN + col] = s[mi][ni][c];
        s[mi][ni][c] *= p_scale;
      }
  uint32_t pa[kMTiles][kBN / 16][4];
  accumulator_to_a_fragments<Tag>(pa, s);
  float o[kMTiles][kDTiles][4] = {};
  gemm_rs<Tag, KVTile, kMTiles, kDTiles, kBN / 16>(o, pa, ldsm_bt_addr<KVTile>(sv, 0, lane), 0);
  for (int mi = 0; mi < kMTiles; ++mi)
    for (int di = 0; di < kDTiles; ++di)
      for (int c = 0; c < 4; ++c) {
        const int row = row0 + 16 * mi + 8 * (c / 2) + g, col = 8 * di + 2 * t + c % 2;
        o_out[row * kD + col] = o[mi][di][c];
      }
}

template <class Tag, int kD, int kBN, int kMTiles, int kWarps>
void check_gemm() {
  constexpr int kM = 16 * kMTiles * kWarps;
  SCOPED_TRACE(testing::Message() << "D " << kD << " BN " << kBN << " m-tiles " << kMTiles << " warps " << kWarps);
  std::mt19937 rng(kD * 7 + kBN);
  std::vector<uint16_t> qb, kb, vb;
  std::vector<float> qv, kv, vv;
  fa_test::random_matrix<Tag>(rng, kM * kD, &qb, &qv);
  fa_test::random_matrix<Tag>(rng, kBN * kD, &kb, &kv);
  fa_test::random_matrix<Tag>(rng, kBN * kD, &vb, &vv);
  const float p_scale = 0.05f;
  fa_test::DeviceBuffer<uint16_t> dq(qb), dk(kb), dv(vb);
  fa_test::DeviceBuffer<float> ds(kM * kBN), dout(kM * kD);
  const int smem = (kM + 2 * kBN) * kD * 2;
  auto kernel = gemm_kernel<Tag, kD, kBN, kMTiles, kWarps>;
  FA_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 32 * kWarps, smem>>>(dq.ptr, dk.ptr, dv.ptr, p_scale, ds.ptr, dout.ptr);
  FA_KERNEL_OK();
  const auto s = ds.download();
  const auto o = dout.download();
  for (int i = 0; i < kM; ++i) {
    for (int j = 0; j < kBN; ++j) {
      double ref = 0;
      for (int d = 0; d < kD; ++d) ref += double(qv[i * kD + d]) * kv[j * kD + d];
      ASSERT_NEAR(s[i * kBN + j], ref, 1e-3 * (1 + std::fabs(ref))) << "S[" << i << "][" << j << "]";
    }
  }
  for (int i = 0; i < kM; ++i) {
    for (int d = 0; d < kD; ++d) {
      double ref = 0;
      for (int j = 0; j < kBN; ++j) ref += double(fa_test::round_to<Tag>(s[i * kBN + j] * p_scale)) * vv[j * kD + d];
      ASSERT_NEAR(o[i * kD + d], ref, 2e-3 * (1 + std::fabs(ref))) << "O[" << i << "][" << d << "]";
    }
  }
}

TEST(CudaCommon, WarpGemmQKandPVSmall) {
  FA_REQUIRE_DEVICE();
  check_gemm<BF16, 64, 64, 2, 2>();
  check_gemm<F16, 64, 128, 2, 1>();
  check_gemm<BF16, 96, 64, 2, 2>();
  check_gemm<F16, 128, 64, 1, 4>();
  check_gemm<BF16, 192, 64, 1, 2>();
  check_gemm<BF16, 256, 64, 1, 2>();
}

// ---- store_accumulator --------------------------------------------------------------------------
// One warp stores a [16·kMTiles × 8·kNTiles] accumulator (value 3·row + col, distinct per row within
// a column pair's reach) at (row0, col0) of a poisoned tile, times `scale`; the tile is read back
// logically and compared with the host's rounding of the same values.
template <class Tag, class Tile, int kMTiles, int kNTiles>
__global__ void store_accumulator_kernel(int row0, int col0, float scale, uint16_t* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  for (int i = lane; i < Tile::kBytes / 2; i += 32) reinterpret_cast<uint16_t*>(smem)[i] = 0xffff;
  __syncwarp();
  float c[kMTiles][kNTiles][4];
  for (int mi = 0; mi < kMTiles; ++mi)
    for (int ni = 0; ni < kNTiles; ++ni)
      for (int e = 0; e < 4; ++e) c[mi][ni][e] = float((16 * mi + 8 * (e / 2) + g) * 3 + 8 * ni + 2 * t + e % 2);
  store_accumulator<Tag, Tile>(smem, c, row0, col0, lane, scale);
  __syncwarp();
  for (int e = lane; e < Tile::kRows * Tile::kCols; e += 32) {
    out[e] = *reinterpret_cast<const uint16_t*>(smem + Tile::elem_offset(e / Tile::kCols, e % Tile::kCols));
  }
}

template <class Tag, int kRows, int kCols, int kMTiles, int kNTiles>
void check_store_accumulator(int row0, int col0) {
  using Tile = SmemTile<kRows, kCols>;
  SCOPED_TRACE(testing::Message() << "tile " << kRows << "x" << kCols << " at (" << row0 << ", " << col0 << ")");
  fa_test::DeviceBuffer<uint16_t> dout(kRows * kCols);
  store_accumulator_kernel<Tag, Tile, kMTiles, kNTiles><<<1, 32, Tile::kBytes>>>(row0, col0, 0.5f, dout.ptr);
  FA_KERNEL_OK();
  const auto out = dout.download();
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      const int lr = r - row0, lc = c - col0;
      const bool mine = lr >= 0 && lr < 16 * kMTiles && lc >= 0 && lc < 8 * kNTiles;
      const uint16_t want = mine ? fa_test::to_bits<Tag>(0.5f * float(lr * 3 + lc)) : uint16_t{0xffff};
      ASSERT_EQ(out[r * kCols + c], want) << "(" << r << ", " << c << ")";
    }
  }
}

TEST(CudaCommon, StoreAccumulatorSmall) {
  FA_REQUIRE_DEVICE();
  check_store_accumulator<F16, 64, 128, 2, 4>(16, 32);   // 16 chunks per row: swizzle = row % 8
  check_store_accumulator<BF16, 64, 96, 1, 6>(40, 48);   // 12 chunks per row: swizzle = (row / 2) % 4
  check_store_accumulator<BF16, 64, 256, 1, 32>(48, 0);  // the forward's D = 256 epilogue
  check_store_accumulator<F16, 128, 64, 2, 2>(8, 8);
}

// ---- OnlineSoftmax ----------------------------------------------------------------------------
// One warp, 16 rows, kTiles tiles of 32 keys: scores from global (−inf = masked). Each thread adds
// its own probabilities into acc, so after finalize the 4 threads' acc of a row sum to 1 (0 for a
// fully masked row) exactly when every rescale was right.
constexpr int kSoftmaxTiles = 3, kSoftmaxKeys = 32;

__global__ void softmax_kernel(const float* scores, float exp_mult, float* acc_out, float* lse_out) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  OnlineSoftmax<1> sm;
  sm.init();
  float acc[1][2][4] = {};
  for (int tile = 0; tile < kSoftmaxTiles; ++tile) {
    float s[1][kSoftmaxKeys / 8][4];
    for (int ni = 0; ni < kSoftmaxKeys / 8; ++ni)
      for (int c = 0; c < 4; ++c) {
        const int row = 8 * (c / 2) + g, col = tile * kSoftmaxKeys + 8 * ni + 2 * t + c % 2;
        s[0][ni][c] = scores[row * kSoftmaxTiles * kSoftmaxKeys + col];
      }
    sm.update(s, acc, exp_mult);
    for (int half = 0; half < 2; ++half) {
      float mine = 0;
      for (int ni = 0; ni < kSoftmaxKeys / 8; ++ni) mine += s[0][ni][2 * half] + s[0][ni][2 * half + 1];
      acc[0][0][2 * half] += mine;
    }
  }
  float lse[1][2];
  sm.finalize(acc, exp_mult, lse);
  for (int half = 0; half < 2; ++half) {
    acc_out[(8 * half + g) * 4 + t] = acc[0][0][2 * half];
    if (t == 0) lse_out[8 * half + g] = lse[0][half];
  }
}

TEST(CudaCommon, OnlineSoftmaxRescaleAndMaskedRowsSmall) {
  FA_REQUIRE_DEVICE();
  constexpr int kCols = kSoftmaxTiles * kSoftmaxKeys;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.f, 4.f);
  std::vector<float> s(16 * kCols);
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < kCols; ++c) {
      float x = dist(rng) + (c / kSoftmaxKeys) * (r % 3 == 0 ? 6.f : -6.f);  // max grows / shrinks over tiles
      if (r == 1) x = -INFINITY;                                          // fully masked row
      if (r == 2 && c < kSoftmaxKeys) x = -INFINITY;                      // masked in the first tile only
      if (r == 3 && c >= kSoftmaxKeys) x = -INFINITY;                     // masked after the first tile
      if (r == 4 && c % 5 != 0) x = -INFINITY;                            // sparse
      s[r * kCols + c] = x;
    }
  }
  const float scale = 0.7f;
  fa_test::DeviceBuffer<float> ds(s), dacc(16 * 4), dlse(16);
  softmax_kernel<<<1, 32>>>(ds.ptr, scale * kLog2e, dacc.ptr, dlse.ptr);
  FA_KERNEL_OK();
  const auto acc = dacc.download();
  const auto lse = dlse.download();
  for (int r = 0; r < 16; ++r) {
    double mx = -INFINITY;
    for (int c = 0; c < kCols; ++c) mx = std::max(mx, double(s[r * kCols + c]) * scale);
    double sum = 0;
    if (!std::isinf(mx))
      for (int c = 0; c < kCols; ++c) sum += std::exp(double(s[r * kCols + c]) * scale - mx);
    const double total = acc[r * 4] + acc[r * 4 + 1] + acc[r * 4 + 2] + acc[r * 4 + 3];
    if (sum == 0) {
      EXPECT_EQ(total, 0.0) << "fully masked row " << r << ": acc must be 0";
      EXPECT_TRUE(std::isinf(lse[r]) && lse[r] > 0) << "fully masked row " << r << ": lse must be +inf, got " << lse[r];
    } else {
      EXPECT_NEAR(total, 1.0, 1e-5) << "row " << r << ": probabilities do not sum to 1 after rescales";
      EXPECT_NEAR(lse[r], mx + std::log(sum), 1e-4 * (1 + std::fabs(mx))) << "row " << r;
    }
  }
}

// ---- mask_accumulator ------------------------------------------------------------------------
template <int kMTiles, int kNTiles>
__global__ void mask_kernel(Mask mask, int row0, int col0, float* out) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  float s[kMTiles][kNTiles][4];
  for (int mi = 0; mi < kMTiles; ++mi)
    for (int ni = 0; ni < kNTiles; ++ni)
      for (int c = 0; c < 4; ++c) s[mi][ni][c] = 1.f;
  mask_accumulator(s, mask, row0, col0, lane);
  for (int mi = 0; mi < kMTiles; ++mi)
    for (int ni = 0; ni < kNTiles; ++ni)
      for (int c = 0; c < 4; ++c) out[(16 * mi + 8 * (c / 2) + g) * 8 * kNTiles + 8 * ni + 2 * t + c % 2] = s[mi][ni][c];
}

TEST(CudaCommon, MaskAccumulatorCoordinatesSmall) {
  FA_REQUIRE_DEVICE();
  const Mask masks[] = {{100, 120, -1, 0}, {70, 50, 5, 3}, {64, 64, -1, -1}, {40, 200, 30, -1}};
  for (const Mask& m : masks) {
    for (int row0 : {0, 16, 48}) {
      for (int col0 : {0, 32, 64}) {
        fa_test::DeviceBuffer<float> out(32 * 32);
        mask_kernel<2, 4><<<1, 32>>>(m, row0, col0, out.ptr);
        FA_KERNEL_OK();
        const auto o = out.download();
        for (int r = 0; r < 32; ++r)
          for (int c = 0; c < 32; ++c) {
            const bool vis = m.visible(row0 + r, col0 + c);
            ASSERT_EQ(o[r * 32 + c], vis ? 1.f : -INFINITY)
                << "row " << row0 + r << " key " << col0 + c << " (mask " << m.seqlen_q << "x" << m.seqlen_k << ", "
                << m.left << ", " << m.right << ")";
          }
      }
    }
  }
}

// ---- tanh_accurate ---------------------------------------------------------------------------
__global__ void tanh_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = tanh_accurate(x[i]);
}

TEST(CudaCommon, TanhAccurateSmall) {
  FA_REQUIRE_DEVICE();
  std::vector<float> x;
  for (float v = -25.f; v <= 25.f; v += 0.0137f) x.push_back(v);
  for (float v : {0.f, -0.f, 1e-30f, -1e-20f, 1e-4f, 88.f, -90.f, 1e30f, -1e30f, INFINITY, -INFINITY}) x.push_back(v);
  const int n = static_cast<int>(x.size());
  fa_test::DeviceBuffer<float> dx(x), dy(n);
  tanh_kernel<<<(n + 255) / 256, 256>>>(dx.ptr, dy.ptr, n);
  FA_KERNEL_OK();
  const auto y = dy.download();
  for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], std::tanh(double(x[i])), 1e-6) << "tanh(" << x[i] << ")";
  std::vector<float> nan_in{NAN};
  fa_test::DeviceBuffer<float> dn(nan_in), dny(1);
  tanh_kernel<<<1, 1>>>(dn.ptr, dny.ptr, 1);
  FA_KERNEL_OK();
  EXPECT_TRUE(std::isnan(dny.download()[0])) << "tanh(NaN) must stay NaN";
}

}  // namespace
