// The Hopper PTX wrappers of src/cuda/ptx (wgmma, tma, mbarrier, fence, barrier, setmaxnreg) and
// the tensor-map builder of src/cuda/sm90 against their written contracts, one CTA each:
//   - wgmma SS and RS, bf16 and f16, N = 64 .. 256: a 64×64 A tile and a B tile TMA-loaded with the
//     128B swizzle (64B for one case), D = A·Bᵀ (B stored K-major, as K in Q·Kᵀ) or D = A·B (B stored
//     MN-major, as V in P·V), 4 k-steps, against a float64 host product on random nonzero inputs;
//   - the checks can fail: the tiles read through a descriptor that leaves the swizzle out, and the
//     host product with B transposed, must both disagree with the device result;
//   - scale-d: the first k-step must overwrite an accumulator holding NaN;
//   - S = Q·Kᵀ (SS) → P packed from the accumulator into A fragments → O = P·V (RS, V MN-major);
//   - TMA 2-D to 5-D loads with out-of-bounds zero fill, the 128B swizzle pattern of
//     ptx/swizzle.hpp, a clipped store of data written by ordinary stores (fence.proxy.async);
//     mbarrier phases of parity 0 and 1;
//   - named barriers and setmaxnreg between a producer and two consumer warpgroups;
//   - host only: descriptor bits, the tensor-map builder's checks.
// Compiled for sm_90a alone (tests/cuda/CMakeLists.txt); the device tests skip on a GPU that is not
// compute capability 9.0. Outputs are NaN (or 0xFFFF) before each kernel.
#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "cuda/ptx/barrier.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm90/fwd_maps.hpp"
#include "cuda/sm90/tensor_map.hpp"
#include "test_util.cuh"

namespace {

using flashattn::DType;
using flashattn::StatusCode;
using flashattn::cuda::sm90::make_tile_map;
using flashattn::cuda::sm90::TileMapSpec;
using flashattn::ptx::BF16;
using flashattn::ptx::F16;
using flashattn::ptx::Major;
using flashattn::ptx::Swizzle;

constexpr int kM = 64;                        // wgmma's M: rows of A and D
constexpr int kK = 64;                        // the tiles' k extent: 4 k-steps of 16
constexpr int kKSteps = kK / 16;
constexpr int kRowBytes = 128;                // a K-major row of 64 16-bit elements = the 128B swizzle span
constexpr int kTileABytes = kM * kRowBytes;
constexpr int kSmemAlign = 1024;              // the 128B swizzle's pattern: tiles start on it
constexpr int kWarpgroup = 128;

template <class Tag>
constexpr DType dtype_of() {
  return std::is_same_v<Tag, BF16> ? DType::bf16 : DType::f16;
}

__device__ uint8_t* align_smem(uint8_t* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<uint8_t*>((a + kSmemAlign - 1) / kSmemAlign * kSmemAlign);
}

// ---- wgmma on TMA-loaded tiles --------------------------------------------------------------------

enum class AFrom { smem, registers };  // the SS or the RS form

struct GemmArgs {
  const uint16_t* a = nullptr;  // A, 64×64 row-major: the RS form's threads read their fragments here
  float* d = nullptr;           // D, 64×N row-major
  Swizzle b_swizzle = Swizzle::b128;  // of B's tiles; MN-major B is loaded in chunks of S/2 columns
  bool wrong_desc = false;      // read B through a descriptor that claims no swizzle (K-major B only)
  bool a_by_stores = false;     // A's tile written by the threads (ptx::swizzle_128b_offset), not by TMA
};

// Bytes of B's tile: N rows of 128 B (K-major), or N / (S/2) chunks of 64 k-rows × S bytes (MN-major).
template <int kN>
constexpr int tile_b_bytes() {
  return kN * kRowBytes;
}

// One warpgroup: TMA loads A (64×64, 128B swizzle; K-major [m][k] or MN-major [k][m]) and B, then
// D = A·B over 4 k-steps of wgmma, the accumulator starting as NaN (the first k-step overwrites it:
// scale-d = 0). With args.a_by_stores the threads write A's tile with ordinary stores instead, then
// fence.proxy.async and a barrier (the sm90 backward's dSᵀ).
template <int kN, class Tag, AFrom kA, Major kMajorB, Major kMajorA = Major::K>
__global__ void __launch_bounds__(kWarpgroup) wgmma_kernel(const __grid_constant__ CUtensorMap map_a,
                                                           const __grid_constant__ CUtensorMap map_b, GemmArgs args) {
  using namespace flashattn::ptx;
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full;  // the mbarrier the loads complete on
  uint8_t* tile_a = align_smem(smem_raw);
  uint8_t* tile_b = tile_a + kTileABytes;
  const uint32_t bar = smem_addr(&full);
  const int b_span = static_cast<int>(args.b_swizzle);  // MN-major: bytes per k-row of a chunk
  const int b_chunk_cols = b_span / 2, b_chunk_bytes = kK * b_span;

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&map_a);
    tma_prefetch_descriptor(&map_b);
    mbarrier_init(bar, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (args.a_by_stores) {
    for (int i = threadIdx.x; i < kM * kK; i += kWarpgroup) {
      *reinterpret_cast<uint16_t*>(tile_a + swizzle_128b_offset(i / kK, 2 * (i % kK))) = args.a[i];
    }
    fence_proxy_async_shared_cta();
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(bar, (args.a_by_stores ? 0 : kTileABytes) + tile_b_bytes<kN>());
    if (!args.a_by_stores) tma_load(smem_addr(tile_a), &map_a, bar, 0, 0);
    if constexpr (kMajorB == Major::K) {
      tma_load(smem_addr(tile_b), &map_b, bar, 0, 0);
    } else {
      for (int c = 0; c < kN / b_chunk_cols; ++c) {
        tma_load(smem_addr(tile_b) + c * b_chunk_bytes, &map_b, bar, c * b_chunk_cols, 0);
      }
    }
  }

  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint32_t a_frag[kKSteps][4];
  if constexpr (kA == AFrom::registers) {  // the fragment of ptx/wgmma.cuh, straight from global A
    auto pair = [&](int row, int col) {
      return uint32_t(args.a[row * kK + col]) | (uint32_t(args.a[row * kK + col + 1]) << 16);
    };
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      a_frag[k][0] = pair(16 * w + g, 16 * k + 2 * t);
      a_frag[k][1] = pair(16 * w + g + 8, 16 * k + 2 * t);
      a_frag[k][2] = pair(16 * w + g, 16 * k + 2 * t + 8);
      a_frag[k][3] = pair(16 * w + g + 8, 16 * k + 2 * t + 8);
    }
  }

  // A MN-major: one chunk of 64 m-columns (LBO unused), k-step k 16 rows further down.
  const uint64_t desc_a = kMajorA == Major::K ? wgmma_desc_k_major(smem_addr(tile_a), Swizzle::b128)
                                              : wgmma_desc_mn_major(smem_addr(tile_a), Swizzle::b128, kTileABytes);
  const uint32_t a_step = kMajorA == Major::K ? 32 : 16 * kRowBytes;
  uint64_t desc_b;
  if constexpr (kMajorB == Major::K) {
    desc_b = args.wrong_desc ? make_wgmma_desc(smem_addr(tile_b), Swizzle::none, kRowBytes, 8 * kRowBytes)
                             : wgmma_desc_k_major(smem_addr(tile_b), Swizzle::b128);
  } else {
    desc_b = wgmma_desc_mn_major(smem_addr(tile_b), args.b_swizzle, b_chunk_bytes);
  }
  // k-step k: 32 bytes further along a K-major row; 16 rows (16·S bytes) further down an MN-major chunk.
  const uint32_t b_step = kMajorB == Major::K ? 32 : 16 * b_span;

  float d[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) d[i] = __int_as_float(0x7fffffff);
  mbarrier_wait(bar, 0);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kKSteps; ++k) {
    const uint64_t b = wgmma_desc_advance(desc_b, k * b_step);
    if constexpr (kA == AFrom::smem) {
      wgmma_ss<kN, Tag, kMajorA, kMajorB>(d, wgmma_desc_advance(desc_a, a_step * k), b, k > 0);
    } else {
      wgmma_rs<kN, Tag, kMajorB>(d, a_frag[k], b, k > 0);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(d);

  // The accumulator fragment of ptx/wgmma.cuh.
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const int row = 16 * w + g, col = 8 * j + 2 * t;
    args.d[row * kN + col] = d[4 * j];
    args.d[row * kN + col + 1] = d[4 * j + 1];
    args.d[(row + 8) * kN + col] = d[4 * j + 2];
    args.d[(row + 8) * kN + col + 1] = d[4 * j + 3];
  }
}

// Random 16-bit values that are never zero (a zero would hide a missed element).
template <class Tag>
void nonzero_random(std::mt19937& rng, std::size_t n, std::vector<uint16_t>* bits, std::vector<float>* vals) {
  fa_test::random_matrix<Tag>(rng, n, bits, vals);
  for (std::size_t i = 0; i < n; ++i) {
    while (((*bits)[i] & 0x7fff) == 0) {
      (*bits)[i] = fa_test::to_bits<Tag>(std::normal_distribution<float>()(rng));
      (*vals)[i] = fa_test::from_bits<Tag>((*bits)[i]);
    }
  }
}

// D = A·B in float64 with B(k, n) = b_at(k, n), and the tolerance of each element: 2^-12 of
// Σ|a·b| plus 1e-6. The 64 products are exact in fp32 and their fp32 sum stays far below that
// (an accumulator with a 14-bit mantissa would too); a wrong element (a misread row, chunk or
// k-step) is off by a tenth of Σ|a·b| or more.
struct HostProduct {
  std::vector<double> d, tol;
};
template <class BAt>
HostProduct host_product(const std::vector<float>& a, int n, BAt b_at) {
  HostProduct p{std::vector<double>(kM * n), std::vector<double>(kM * n)};
  for (int i = 0; i < kM; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int k = 0; k < kK; ++k) {
        s += double(a[i * kK + k]) * b_at(k, j);
        mag += std::fabs(double(a[i * kK + k]) * b_at(k, j));
      }
      p.d[i * n + j] = s;
      p.tol[i * n + j] = mag / 4096 + 1e-6;
    }
  }
  return p;
}

// Elements of got outside the tolerance of want (NaN counts); the first one's index in *first.
int count_mismatches(const std::vector<float>& got, const HostProduct& want, int* first = nullptr) {
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(double(got[i]) - want.d[i]) <= want.tol[i])) {
      if (bad == 0 && first != nullptr) *first = static_cast<int>(i);
      ++bad;
    }
  }
  return bad;
}

TileMapSpec map_2d(const void* data, int64_t inner, int64_t outer, int box_inner, int box_outer, Swizzle s) {
  TileMapSpec spec;
  spec.data = data;
  spec.rank = 2;
  spec.dims[0] = inner;
  spec.dims[1] = outer;
  spec.strides[0] = 1;
  spec.strides[1] = inner;
  spec.box[0] = box_inner;
  spec.box[1] = box_outer;
  spec.swizzle = s;
  return spec;
}

// Runs wgmma_kernel<kN, Tag, kA, kMajorB, kMajorA> on random A, B and returns D (and the inputs' floats).
template <int kN, class Tag, AFrom kA, Major kMajorB, Major kMajorA = Major::K>
struct GemmRun {
  std::vector<float> a, b;  // as stored: a [m][k] or [k][m], b [n][k] (K-major) or [k][n] (MN-major)
  std::vector<float> d;
  bool launched = false;

  void run(Swizzle b_swizzle, bool wrong_desc, uint32_t seed, bool a_by_stores = false) {
    std::mt19937 rng(seed);
    std::vector<uint16_t> a_bits, b_bits;
    nonzero_random<Tag>(rng, kM * kK, &a_bits, &a);
    nonzero_random<Tag>(rng, kN * kK, &b_bits, &b);
    fa_test::DeviceBuffer<uint16_t> da(a_bits), db(b_bits);
    fa_test::DeviceBuffer<float> dd(kM * kN);
    FA_CUDA_OK(cudaMemset(dd.ptr, 0xFF, kM * kN * sizeof(float)));  // NaN

    CUtensorMap map_a, map_b;
    const flashattn::Status sa =
        make_tile_map(&map_a, dtype_of<Tag>(), map_2d(da.ptr, kK, kM, kK, kM, Swizzle::b128), "test A");
    ASSERT_TRUE(sa.ok()) << sa.message;
    const TileMapSpec spec_b = kMajorB == Major::K
                                   ? map_2d(db.ptr, kK, kN, kK, kN, b_swizzle)
                                   : map_2d(db.ptr, kN, kK, static_cast<int>(b_swizzle) / 2, kK, b_swizzle);
    const flashattn::Status sb = make_tile_map(&map_b, dtype_of<Tag>(), spec_b, "test B");
    ASSERT_TRUE(sb.ok()) << sb.message;

    GemmArgs args;
    args.a = da.ptr;
    args.d = dd.ptr;
    args.b_swizzle = b_swizzle;
    args.wrong_desc = wrong_desc;
    args.a_by_stores = a_by_stores;
    const int smem = kSmemAlign + kTileABytes + tile_b_bytes<kN>();
    wgmma_kernel<kN, Tag, kA, kMajorB, kMajorA><<<1, kWarpgroup, smem>>>(map_a, map_b, args);
    FA_KERNEL_OK();
    d = dd.download();
    launched = true;
  }

  // B(k, n) as the product reads it.
  double b_at(int k, int n) const { return kMajorB == Major::K ? b[n * kK + k] : b[k * kN + n]; }
  HostProduct reference() const {
    std::vector<float> a_mk = a;  // A(m, k) at [m·kK + k]
    if (kMajorA == Major::MN) {
      for (int m = 0; m < kM; ++m)
        for (int k = 0; k < kK; ++k) a_mk[m * kK + k] = a[k * kM + m];
    }
    return host_product(a_mk, kN, [&](int k, int n) { return b_at(k, n); });
  }
};

template <int kN, class Tag, AFrom kA, Major kMajorB, Major kMajorA = Major::K>
void check_wgmma(Swizzle b_swizzle = Swizzle::b128, bool a_by_stores = false) {
  FA_REQUIRE_SM90();
  GemmRun<kN, Tag, kA, kMajorB, kMajorA> r;
  r.run(b_swizzle, false, 1234 + kN, a_by_stores);
  if (!r.launched) return;
  const HostProduct ref = r.reference();
  int first = -1;
  const int bad = count_mismatches(r.d, ref, &first);
  double max_err = 0;
  for (std::size_t i = 0; i < r.d.size(); ++i) max_err = std::fmax(max_err, std::fabs(r.d[i] - ref.d[i]));
  EXPECT_EQ(bad, 0) << "of " << r.d.size() << "; first D[" << first / kN << "][" << first % kN
                    << "] = " << (first >= 0 ? r.d[first] : 0.f) << " vs " << (first >= 0 ? ref.d[first] : 0.);
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(max_err));
}

// S = Q·Kᵀ shape: A and B K-major, SS, every N the forward's key blocks may take.
TEST(CudaPtxSm90, WgmmaSsBf16N64) { check_wgmma<64, BF16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsBf16N80) { check_wgmma<80, BF16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsBf16N96) { check_wgmma<96, BF16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsBf16N128) { check_wgmma<128, BF16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsBf16N176) { check_wgmma<176, BF16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsBf16N192) { check_wgmma<192, BF16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsBf16N256) { check_wgmma<256, BF16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsF16N64) { check_wgmma<64, F16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsF16N128) { check_wgmma<128, F16, AFrom::smem, Major::K>(); }
// A from registers, B K-major.
TEST(CudaPtxSm90, WgmmaRsBf16N64) { check_wgmma<64, BF16, AFrom::registers, Major::K>(); }
TEST(CudaPtxSm90, WgmmaRsBf16N128) { check_wgmma<128, BF16, AFrom::registers, Major::K>(); }
TEST(CudaPtxSm90, WgmmaRsF16N64) { check_wgmma<64, F16, AFrom::registers, Major::K>(); }
TEST(CudaPtxSm90, WgmmaRsF16N128) { check_wgmma<128, F16, AFrom::registers, Major::K>(); }
// O += P·V shape: A from registers, B MN-major (trans-b) in chunks of 64 columns (128B) or 32 (64B).
TEST(CudaPtxSm90, WgmmaRsMnMajorBf16N64) { check_wgmma<64, BF16, AFrom::registers, Major::MN>(); }
TEST(CudaPtxSm90, WgmmaRsMnMajorBf16N128) { check_wgmma<128, BF16, AFrom::registers, Major::MN>(); }
TEST(CudaPtxSm90, WgmmaRsMnMajorBf16N256) { check_wgmma<256, BF16, AFrom::registers, Major::MN>(); }
TEST(CudaPtxSm90, WgmmaRsMnMajorBf16N96Swizzle64) {
  check_wgmma<96, BF16, AFrom::registers, Major::MN>(Swizzle::b64);
}
TEST(CudaPtxSm90, WgmmaRsMnMajorF16N128) { check_wgmma<128, F16, AFrom::registers, Major::MN>(); }
TEST(CudaPtxSm90, WgmmaRsMnMajorF16N192) { check_wgmma<192, F16, AFrom::registers, Major::MN>(); }
TEST(CudaPtxSm90, WgmmaSsMnMajorBf16N128) { check_wgmma<128, BF16, AFrom::smem, Major::MN>(); }
// dQ = dS·K of the sm90 backward: A MN-major ([k][m], dSᵀ as stored), B MN-major, N = 64; A loaded
// by TMA, and written by the threads through swizzle_128b_offset as the backward writes dSᵀ.
TEST(CudaPtxSm90, WgmmaSsMnMajorABf16N64) { check_wgmma<64, BF16, AFrom::smem, Major::MN, Major::MN>(); }
TEST(CudaPtxSm90, WgmmaSsMnMajorAF16N64) { check_wgmma<64, F16, AFrom::smem, Major::MN, Major::MN>(); }
TEST(CudaPtxSm90, WgmmaSsMnMajorAStoredBf16N64) {
  check_wgmma<64, BF16, AFrom::smem, Major::MN, Major::MN>(Swizzle::b128, true);
}
TEST(CudaPtxSm90, WgmmaSsKMajorAStoredBf16N64) {
  check_wgmma<64, BF16, AFrom::smem, Major::K, Major::K>(Swizzle::b128, true);
}
// The head-dim-256 backward's shapes (bwd_kernel_wide.cuh): Sᵀ and dPᵀ at N = 32 (a warpgroup's 32
// queries); dQ = dS·K with both operands MN-major and N = 128, so B spans two chunks (LBO used along
// with the transposed A); dV += Pᵀ·dO and dK += dSᵀ·Q from the thread-stored K-major tiles with an
// MN-major B of two chunks.
TEST(CudaPtxSm90, WgmmaSsBf16N32) { check_wgmma<32, BF16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsF16N32) { check_wgmma<32, F16, AFrom::smem, Major::K>(); }
TEST(CudaPtxSm90, WgmmaSsMnMajorABf16N128) { check_wgmma<128, BF16, AFrom::smem, Major::MN, Major::MN>(); }
TEST(CudaPtxSm90, WgmmaSsMnMajorAStoredBf16N128) {
  check_wgmma<128, BF16, AFrom::smem, Major::MN, Major::MN>(Swizzle::b128, true);
}
TEST(CudaPtxSm90, WgmmaSsMnMajorAStoredF16N128) {
  check_wgmma<128, F16, AFrom::smem, Major::MN, Major::MN>(Swizzle::b128, true);
}
TEST(CudaPtxSm90, WgmmaSsKMajorAStoredMnMajorBBf16N128) {
  check_wgmma<128, BF16, AFrom::smem, Major::MN, Major::K>(Swizzle::b128, true);
}
TEST(CudaPtxSm90, WgmmaSsKMajorAStoredMnMajorBF16N128) {
  check_wgmma<128, F16, AFrom::smem, Major::MN, Major::K>(Swizzle::b128, true);
}

// The comparison can fail: the right result does not match the product with B transposed (B's
// storage read the other way), and B read through a descriptor without the swizzle does not match
// the right product.
TEST(CudaPtxSm90, WgmmaCheckCatchesTransposedB) {
  FA_REQUIRE_SM90();
  GemmRun<64, BF16, AFrom::smem, Major::K> r;
  r.run(Swizzle::b128, false, 99);
  if (!r.launched) return;
  EXPECT_EQ(count_mismatches(r.d, r.reference()), 0);
  const HostProduct transposed = host_product(r.a, 64, [&](int k, int n) { return double(r.b[k * kK + n]); });
  EXPECT_GT(count_mismatches(r.d, transposed), kM * 64 * 9 / 10) << "D = A·B (B not transposed) matched too";
}

template <int kN, class Tag, AFrom kA>
void check_wrong_descriptor_fails() {
  FA_REQUIRE_SM90();
  GemmRun<kN, Tag, kA, Major::K> r;
  r.run(Swizzle::b128, true, 7);
  if (!r.launched) return;
  EXPECT_GT(count_mismatches(r.d, r.reference()), kM * kN / 2) << "a descriptor without the swizzle matched";
}
TEST(CudaPtxSm90, WgmmaCheckCatchesWrongDescriptorSs) { check_wrong_descriptor_fails<128, BF16, AFrom::smem>(); }
TEST(CudaPtxSm90, WgmmaCheckCatchesWrongDescriptorRs) { check_wrong_descriptor_fails<64, F16, AFrom::registers>(); }

// The attention pattern without the softmax: S = Q·Kᵀ (SS, 64 keys), P = S rounded to 16 bits and
// packed from the accumulator straight into A fragments (a[i] = pack2(s[8k + 2i], s[8k + 2i + 1]),
// the identity ptx/wgmma.cuh states), O = P·V (RS, V MN-major). Q, K: 64×64; V: 64 keys × kNV.
template <class Tag, int kNV>
__global__ void __launch_bounds__(kWarpgroup) chain_kernel(const __grid_constant__ CUtensorMap map_q,
                                                           const __grid_constant__ CUtensorMap map_k,
                                                           const __grid_constant__ CUtensorMap map_v, float* o) {
  using namespace flashattn::ptx;
  constexpr int kKeys = 64, kVChunkBytes = kKeys * kRowBytes;  // V: chunks of 64 columns × 64 keys
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full;
  uint8_t* tile_q = align_smem(smem_raw);
  uint8_t* tile_k = tile_q + kTileABytes;
  uint8_t* tile_v = tile_k + kKeys * kRowBytes;
  const uint32_t bar = smem_addr(&full);
  if (threadIdx.x == 0) {
    mbarrier_init(bar, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(bar, kTileABytes + kKeys * kRowBytes + kNV * kRowBytes);
    tma_load(smem_addr(tile_q), &map_q, bar, 0, 0);
    tma_load(smem_addr(tile_k), &map_k, bar, 0, 0);
    for (int c = 0; c < kNV / 64; ++c) tma_load(smem_addr(tile_v) + c * kVChunkBytes, &map_v, bar, 64 * c, 0);
  }
  const uint64_t desc_q = wgmma_desc_k_major(smem_addr(tile_q), Swizzle::b128);
  const uint64_t desc_k = wgmma_desc_k_major(smem_addr(tile_k), Swizzle::b128);
  const uint64_t desc_v = wgmma_desc_mn_major(smem_addr(tile_v), Swizzle::b128, kVChunkBytes);
  float s[kKeys / 2], out[kNV / 2];
  mbarrier_wait(bar, 0);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kKSteps; ++k) {
    wgmma_ss<kKeys, Tag>(s, wgmma_desc_advance(desc_q, 32 * k), wgmma_desc_advance(desc_k, 32 * k), k > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(s);

  uint32_t p[kKeys / 16][4];
#pragma unroll
  for (int k = 0; k < kKeys / 16; ++k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) p[k][i] = pack2<Tag>(s[8 * k + 2 * i], s[8 * k + 2 * i + 1]);
  }
  wgmma_fence();  // p was written by ordinary instructions
#pragma unroll
  for (int k = 0; k < kKeys / 16; ++k) {
    wgmma_rs<kNV, Tag, Major::MN>(out, p[k], wgmma_desc_advance(desc_v, 16 * k * kRowBytes), k > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(out);
  const int w = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < kNV / 8; ++j) {
    const int row = 16 * w + g, col = 8 * j + 2 * t;
    o[row * kNV + col] = out[4 * j];
    o[row * kNV + col + 1] = out[4 * j + 1];
    o[(row + 8) * kNV + col] = out[4 * j + 2];
    o[(row + 8) * kNV + col + 1] = out[4 * j + 3];
  }
}

template <class Tag, int kNV>
void check_chain() {
  FA_REQUIRE_SM90();
  constexpr int kKeys = 64;
  std::mt19937 rng(2024 + kNV);
  std::vector<uint16_t> qb, kb, vb;
  std::vector<float> q, k, v;
  nonzero_random<Tag>(rng, kM * kK, &qb, &q);
  nonzero_random<Tag>(rng, kKeys * kK, &kb, &k);
  nonzero_random<Tag>(rng, kKeys * kNV, &vb, &v);
  // Scale Q so that S (and P) stay within a few units: |S| ~ 0.2·8.
  for (std::size_t i = 0; i < q.size(); ++i) {
    q[i] = fa_test::round_to<Tag>(q[i] * 0.2f);
    qb[i] = fa_test::to_bits<Tag>(q[i]);
    if ((qb[i] & 0x7fff) == 0) qb[i] = fa_test::to_bits<Tag>(q[i] = fa_test::round_to<Tag>(0.01f));
  }
  fa_test::DeviceBuffer<uint16_t> dq(qb), dk(kb), dv(vb);
  fa_test::DeviceBuffer<float> dout(kM * kNV);
  FA_CUDA_OK(cudaMemset(dout.ptr, 0xFF, kM * kNV * sizeof(float)));
  CUtensorMap mq, mk, mv;
  for (auto [map, spec] : {std::pair{&mq, map_2d(dq.ptr, kK, kM, kK, kM, Swizzle::b128)},
                           std::pair{&mk, map_2d(dk.ptr, kK, kKeys, kK, kKeys, Swizzle::b128)},
                           std::pair{&mv, map_2d(dv.ptr, kNV, kKeys, 64, kKeys, Swizzle::b128)}}) {
    const flashattn::Status st = make_tile_map(map, dtype_of<Tag>(), spec, "chain test");
    ASSERT_TRUE(st.ok()) << st.message;
  }
  const int smem = kSmemAlign + kTileABytes + kKeys * kRowBytes + kNV * kRowBytes;
  chain_kernel<Tag, kNV><<<1, kWarpgroup, smem>>>(mq, mk, mv, dout.ptr);
  FA_KERNEL_OK();
  const auto o = dout.download();

  // P as the device rounds it (fp32 S → 16 bits); a P element that lands on the other side of a
  // rounding boundary moves O by 2^-8 of one term, within the 2^-7 · Σ|p·v| tolerance.
  std::vector<float> p(kM * kKeys);
  for (int i = 0; i < kM; ++i) {
    for (int j = 0; j < kKeys; ++j) {
      double sum = 0;
      for (int c = 0; c < kK; ++c) sum += double(q[i * kK + c]) * k[j * kK + c];
      p[i * kKeys + j] = fa_test::round_to<Tag>(static_cast<float>(sum));
    }
  }
  int bad = 0, first = -1;
  for (int i = 0; i < kM; ++i) {
    for (int n = 0; n < kNV; ++n) {
      double ref = 0, mag = 0;
      for (int j = 0; j < kKeys; ++j) {
        ref += double(p[i * kKeys + j]) * v[j * kNV + n];
        mag += std::fabs(double(p[i * kKeys + j]) * v[j * kNV + n]);
      }
      if (!(std::fabs(o[i * kNV + n] - ref) <= mag / 128 + 1e-5)) {
        if (bad++ == 0) first = i * kNV + n;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << o.size() << "; first O[" << first / kNV << "][" << first % kNV << "]";
}
TEST(CudaPtxSm90, WgmmaChainSsThenRsBf16) { check_chain<BF16, 128>(); }
TEST(CudaPtxSm90, WgmmaChainSsThenRsF16) { check_chain<F16, 64>(); }

// ---- TMA loads and stores, mbarrier phases ----------------------------------------------------------

// T: 3 planes × 40 rows × 64 columns of 16-bit values (never 0x0000, the zero fill), contiguous.
constexpr int kCols = 64, kRows = 40, kPlanes = 3;
constexpr int kTElems = kCols * kRows * kPlanes;
// Phase 0: 3-D box {64, 32, 2} at (0, 24, 2): it leaves the tensor in rows and in planes, so only
// rows 24..39 of plane 2 are in bounds; rows 40..55 of plane 2 and all of plane 3 are zero-filled
// on the load and must not be written by the store of the same box.
constexpr int kBox0Rows = 32, kBox0Planes = 2, kBox0Row = 24, kBox0Plane = 2;
constexpr int kBox0Elems = kCols * kBox0Rows * kBox0Planes;
static_assert(kBox0Row + kBox0Rows > kRows && kBox0Plane + kBox0Planes > kPlanes,
              "the box must reach past the tensor in rows and in planes (clipping in dims 1 and 2)");
// Poisoned elements after the stored tensor: up to the end of where the box would land if the
// store did not clip (its rows 40..55 and plane 3 laid out linearly), so an unclipped store shows.
constexpr int kGuard = ((kBox0Plane + kBox0Planes - 1) * kRows + kBox0Row + kBox0Rows) * kCols - kTElems;
// Phase 1: 2-D view {64, 120}, box {64, 8} at row 8, 128B swizzle: raw shared memory is dumped.
constexpr int kBox1Row = 8;
// Phase 2: 4-D view {64, 8, 5, 3} (rows split 5 × 8), box {64, 8, 1, 1} at (0, 0, 2, 1): rows 16..23
// of plane 1. Phase 3: 5-D view {32, 2, 8, 5, 3} (columns split 2 × 32 too), box {32, 2, 4, 1, 1} at
// (0, 0, 4, 3, 2): rows 28..31 of plane 2.
constexpr int kBox3Rows = 4;

struct TmaArgs {
  uint16_t* dump0;  // phase 0's box, after the kernel added 1 to it
  uint16_t* dump1;  // phase 1's raw (swizzled) shared memory, 8 × 64
  uint16_t* dump2;  // phase 2's box, 8 × 64
  uint16_t* dump3;  // phase 3's box, 4 × 64
};

__global__ void tma_kernel(const __grid_constant__ CUtensorMap map3, const __grid_constant__ CUtensorMap map3_out,
                           const __grid_constant__ CUtensorMap map2_swizzled, const __grid_constant__ CUtensorMap map4,
                           const __grid_constant__ CUtensorMap map5, TmaArgs args) {
  using namespace flashattn::ptx;
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full;
  uint8_t* buf1 = align_smem(smem_raw);            // 1 KB, on the swizzle pattern
  uint16_t* buf0 = reinterpret_cast<uint16_t*>(buf1 + 1024);
  uint16_t* buf2 = buf0 + kBox0Elems;
  uint16_t* buf3 = buf2 + 8 * kCols;
  const uint32_t bar = smem_addr(&full);
  const int tid = threadIdx.x;
  if (tid == 0) {
    mbarrier_init(bar, 1);
    fence_proxy_async_shared_cta();  // single CTA: the programming guide's way to show TMA the init
  }
  __syncthreads();

  // Each phase: one thread expects the box's bytes and issues the load; everyone waits on the parity.
  // A barrier between phases keeps every waiter within one phase of the barrier: a thread still
  // polling parity 1 after phases 1 and 2 had both completed would wait for phase 3 instead.
  if (tid == 0) {
    mbarrier_arrive_expect_tx(bar, kBox0Elems * 2);
    tma_load(smem_addr(buf0), &map3, bar, 0, kBox0Row, kBox0Plane);
  }
  mbarrier_wait(bar, 0);
  for (int i = tid; i < kBox0Elems; i += blockDim.x) buf0[i] = static_cast<uint16_t>(buf0[i] + 1);
  for (int i = tid; i < kBox0Elems; i += blockDim.x) args.dump0[i] = buf0[i];
  fence_proxy_async_shared_cta();  // the generic writes above, before the copy engine reads them
  __syncthreads();
  if (tid == 0) {
    tma_store(&map3_out, smem_addr(buf0), 0, kBox0Row, kBox0Plane);
    tma_store_commit();
    mbarrier_arrive_expect_tx(bar, 8 * kCols * 2);
    tma_load(smem_addr(buf1), &map2_swizzled, bar, 0, kBox1Row);
  }
  mbarrier_wait(bar, 1);
  const uint16_t* raw1 = reinterpret_cast<const uint16_t*>(buf1);
  for (int i = tid; i < 8 * kCols; i += blockDim.x) args.dump1[i] = raw1[i];
  __syncthreads();

  if (tid == 0) {
    mbarrier_arrive_expect_tx(bar, 8 * kCols * 2);
    tma_load(smem_addr(buf2), &map4, bar, 0, 0, 2, 1);
  }
  mbarrier_wait(bar, 0);
  for (int i = tid; i < 8 * kCols; i += blockDim.x) args.dump2[i] = buf2[i];
  __syncthreads();

  if (tid == 0) {
    mbarrier_arrive_expect_tx(bar, kBox3Rows * kCols * 2);
    tma_load(smem_addr(buf3), &map5, bar, 0, 0, 4, 3, 2);
  }
  mbarrier_wait(bar, 1);
  for (int i = tid; i < kBox3Rows * kCols; i += blockDim.x) args.dump3[i] = buf3[i];
  if (tid == 0) tma_store_wait<0>();  // the store's writes done before the CTA (and its smem) goes
}

TileMapSpec dense_map(const void* data, int rank, std::initializer_list<int64_t> dims, std::initializer_list<int> box,
                      Swizzle s) {
  TileMapSpec spec;
  spec.data = data;
  spec.rank = rank;
  int i = 0;
  int64_t stride = 1;
  for (int64_t d : dims) {
    spec.dims[i] = d;
    spec.strides[i] = stride;
    stride *= d;
    ++i;
  }
  i = 0;
  for (int b : box) spec.box[i++] = b;
  spec.swizzle = s;
  return spec;
}

TEST(CudaPtxSm90, TmaLoadsStoresAndMbarrierPhases) {
  FA_REQUIRE_SM90();
  std::vector<uint16_t> t(kTElems);
  for (int i = 0; i < kTElems; ++i) t[i] = static_cast<uint16_t>(((i + 1) * 2654435761u) >> 17) | 1;  // odd: never 0
  auto at = [&](int plane, int row, int col) { return t[(plane * kRows + row) * kCols + col]; };
  fa_test::DeviceBuffer<uint16_t> dt(t), dout(kTElems + kGuard), d0(kBox0Elems), d1(8 * kCols), d2(8 * kCols),
      d3(kBox3Rows * kCols);
  for (auto* b : {&dout, &d0, &d1, &d2, &d3}) FA_CUDA_OK(cudaMemset(b->ptr, 0xFF, b->n * sizeof(uint16_t)));

  CUtensorMap m3, m3_out, m2, m4, m5;
  const struct {
    CUtensorMap* map;
    TileMapSpec spec;
  } maps[] = {
      {&m3, dense_map(dt.ptr, 3, {kCols, kRows, kPlanes}, {kCols, kBox0Rows, kBox0Planes}, Swizzle::none)},
      {&m3_out, dense_map(dout.ptr, 3, {kCols, kRows, kPlanes}, {kCols, kBox0Rows, kBox0Planes}, Swizzle::none)},
      {&m2, dense_map(dt.ptr, 2, {kCols, kRows * kPlanes}, {kCols, 8}, Swizzle::b128)},
      {&m4, dense_map(dt.ptr, 4, {kCols, 8, kRows / 8, kPlanes}, {kCols, 8, 1, 1}, Swizzle::none)},
      {&m5, dense_map(dt.ptr, 5, {32, 2, 8, kRows / 8, kPlanes}, {32, 2, kBox3Rows, 1, 1}, Swizzle::none)},
  };
  for (const auto& m : maps) {
    const flashattn::Status s = make_tile_map(m.map, DType::bf16, m.spec, "tma test");
    ASSERT_TRUE(s.ok()) << s.message;
  }
  const int smem = kSmemAlign + 1024 + (kBox0Elems + 8 * kCols + kBox3Rows * kCols) * 2;
  tma_kernel<<<1, kWarpgroup, smem>>>(m3, m3_out, m2, m4, m5, TmaArgs{d0.ptr, d1.ptr, d2.ptr, d3.ptr});
  FA_KERNEL_OK();

  // Phase 0: in-bounds elements +1, out-of-bounds ones zero-filled (+1).
  const auto box0 = d0.download();
  for (int p = 0; p < kBox0Planes; ++p) {
    for (int r = 0; r < kBox0Rows; ++r) {
      for (int c = 0; c < kCols; ++c) {
        const int plane = kBox0Plane + p, row = kBox0Row + r;
        const bool inside = plane < kPlanes && row < kRows;
        const uint16_t want = static_cast<uint16_t>((inside ? at(plane, row, c) : 0) + 1);
        ASSERT_EQ(box0[(p * kBox0Rows + r) * kCols + c], want) << "3-D box plane " << p << " row " << r << " col " << c;
      }
    }
  }
  // The store: exactly the part of the box inside the tensor (box ∩ tensor in every dimension: the
  // box's columns are the whole row), nothing around it, nothing past the tensor.
  const auto out = dout.download();
  int stored_count = 0;
  for (int i = 0; i < kTElems + kGuard; ++i) {
    const int plane = i / (kRows * kCols), row = (i / kCols) % kRows, col = i % kCols;
    const bool in_box = plane >= kBox0Plane && plane < kBox0Plane + kBox0Planes && row >= kBox0Row &&
                        row < kBox0Row + kBox0Rows;
    const bool stored = i < kTElems && in_box;
    stored_count += stored;
    const uint16_t want = stored ? static_cast<uint16_t>(at(plane, row, col) + 1) : uint16_t(0xFFFF);
    ASSERT_EQ(out[i], want) << "store: element " << i << " (plane " << plane << " row " << row << " col " << col
                            << (i < kTElems ? "" : ", past the tensor") << (stored ? ": in the box)" : ": must stay poisoned)");
  }
  EXPECT_EQ(stored_count, (kPlanes - kBox0Plane) * (kRows - kBox0Row) * kCols);  // the expectation itself
  // Phase 1: the 128B swizzle of ptx/swizzle.hpp: chunk c of row r at chunk c ^ (r % 8).
  const auto raw = d1.download();
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < kCols; ++c) {
      const int chunk = c / 8, stored_chunk = chunk ^ (r % 8);
      ASSERT_EQ(raw[r * kCols + stored_chunk * 8 + c % 8], t[(kBox1Row + r) * kCols + c]) << "row " << r << " col " << c;
    }
  }
  // Phases 2, 3: the 4-D and 5-D views.
  const auto box2 = d2.download(), box3 = d3.download();
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < kCols; ++c) ASSERT_EQ(box2[r * kCols + c], at(1, 16 + r, c)) << "4-D row " << r << " col " << c;
  }
  for (int r = 0; r < kBox3Rows; ++r) {
    for (int c = 0; c < kCols; ++c) ASSERT_EQ(box3[r * kCols + c], at(2, 28 + r, c)) << "5-D row " << r << " col " << c;
  }
}

// ---- named barriers and setmaxnreg ----------------------------------------------------------------

// FlashAttention-3's split: one producer warpgroup (24 registers) hands rounds of data to two
// consumer warpgroups (240 each) through shared memory: barrier 1 "full" (the producer arrives, the
// consumers sync), barrier 2 "empty" (the consumers arrive, the producer syncs before overwriting).
constexpr int kHandoffThreads = 3 * kWarpgroup;
constexpr int kRounds = 4;
constexpr uint32_t kFull = 1, kEmpty = 2;

__global__ void __launch_bounds__(kHandoffThreads, 1) handoff_kernel(int* out) {
  using namespace flashattn::ptx;
  __shared__ int buf[kWarpgroup];
  const int warpgroup = threadIdx.x / kWarpgroup, i = threadIdx.x % kWarpgroup;
  if (warpgroup == 0) {
    setmaxnreg_dec<24>();
    for (int r = 0; r < kRounds; ++r) {
      if (r > 0) named_barrier_sync(kEmpty, kHandoffThreads);
      buf[i] = 1000 * (r + 1) + i;
      named_barrier_arrive(kFull, kHandoffThreads);
    }
  } else {
    setmaxnreg_inc<240>();
    for (int r = 0; r < kRounds; ++r) {
      named_barrier_sync(kFull, kHandoffThreads);
      // Another warp's write: ordered by the barrier, not by the warp.
      out[(r * 2 + warpgroup - 1) * kWarpgroup + i] = buf[(i + 37) % kWarpgroup];
      if (r + 1 < kRounds) named_barrier_arrive(kEmpty, kHandoffThreads);
    }
  }
}

// make_tile_map reuses the maps a thread encoded last: the reuse must key on everything that
// defines a map (here the address and the box), and survive evictions.
TEST(CudaPtxSm90, TileMapReuseKeysOnAddressAndShape) {
  FA_REQUIRE_SM90();
  fa_test::DeviceBuffer<uint16_t> a(64 * 256), b(64 * 256);
  auto encode = [](const TileMapSpec& spec, CUtensorMap* map) {
    const flashattn::Status s = make_tile_map(map, DType::bf16, spec, "reuse test");
    ASSERT_TRUE(s.ok()) << s.message;
  };
  auto same = [](const CUtensorMap& x, const CUtensorMap& y) { return std::memcmp(&x, &y, sizeof(CUtensorMap)) == 0; };
  CUtensorMap a1, b1, c1, a2, a3;
  encode(map_2d(a.ptr, 64, 256, 64, 128, Swizzle::b128), &a1);
  encode(map_2d(b.ptr, 64, 256, 64, 128, Swizzle::b128), &b1);
  encode(map_2d(a.ptr, 64, 256, 64, 64, Swizzle::b128), &c1);
  encode(map_2d(a.ptr, 64, 256, 64, 128, Swizzle::b128), &a2);
  EXPECT_FALSE(same(a1, b1)) << "another address gave the same map";
  EXPECT_FALSE(same(a1, c1)) << "another box gave the same map";
  EXPECT_TRUE(same(a1, a2));
  for (int rows = 1; rows <= 40; ++rows) {  // more maps than are kept
    CUtensorMap other;
    encode(map_2d(b.ptr, 64, rows, 64, 8, Swizzle::b128), &other);
  }
  encode(map_2d(a.ptr, 64, 256, 64, 128, Swizzle::b128), &a3);
  EXPECT_TRUE(same(a1, a3));
}

TEST(CudaPtxSm90, NamedBarriersAndSetmaxnreg) {
  FA_REQUIRE_SM90();
  fa_test::DeviceBuffer<int> out(kRounds * 2 * kWarpgroup);
  FA_CUDA_OK(cudaMemset(out.ptr, 0xFF, out.n * sizeof(int)));
  handoff_kernel<<<1, kHandoffThreads>>>(out.ptr);
  FA_KERNEL_OK();
  const auto o = out.download();
  for (int r = 0; r < kRounds; ++r) {
    for (int c = 0; c < 2; ++c) {
      for (int i = 0; i < kWarpgroup; ++i) {
        ASSERT_EQ(o[(r * 2 + c) * kWarpgroup + i], 1000 * (r + 1) + (i + 37) % kWarpgroup)
            << "round " << r << " consumer " << c << " thread " << i;
      }
    }
  }
}

// ---- host only ----------------------------------------------------------------------------------------

TEST(CudaPtxSm90Host, WgmmaDescriptorBits) {
  using namespace flashattn::ptx;
  // Start 0x12340 → field 0x1234; LBO 16 → 1; SBO 1024 → 64; 128B swizzle → 1 in bits 62..63.
  constexpr uint64_t want = 0x1234ull | (1ull << 16) | (64ull << 32) | (1ull << 62);
  static_assert(make_wgmma_desc(0x12340, Swizzle::b128, 16, 1024) == want);
  static_assert(wgmma_desc_k_major(0x12340, Swizzle::b128) == want);
  // MN-major, 64B: LBO = the chunk stride (4096 → 256), SBO = 8 rows of 64 B (512 → 32), code 2.
  static_assert(wgmma_desc_mn_major(0x400, Swizzle::b64, 4096) == (0x40ull | (256ull << 16) | (32ull << 32) | (2ull << 62)));
  static_assert(wgmma_swizzle_code(Swizzle::b32) == 3 && wgmma_swizzle_code(Swizzle::none) == 0);
  // Only address bits 4..17 are kept; a k-step of 32 bytes adds 2 to the start field, nothing else.
  static_assert((make_wgmma_desc(0x40100, Swizzle::none, 0, 0) & 0x3FFF) == 0x10);
  static_assert(wgmma_desc_advance(want, 96) == want + 6);
  EXPECT_EQ(make_wgmma_desc(0x12340, Swizzle::b128, 16, 1024), want);  // and at run time
}

TEST(CudaPtxSm90Host, TileMapChecks) {
  using flashattn::cuda::sm90::check_tile_map;
  void* const fake = reinterpret_cast<void*>(uintptr_t(1) << 20);  // aligned; never dereferenced
  const TileMapSpec good = map_2d(fake, 128, 1000, 64, 128, Swizzle::b128);
  EXPECT_TRUE(check_tile_map(DType::bf16, good, "t").ok()) << check_tile_map(DType::bf16, good, "t").message;
  EXPECT_TRUE(check_tile_map(DType::f16, good, "t").ok());

  auto code = [&](DType dt, TileMapSpec s) { return check_tile_map(dt, s, "t").code; };
  EXPECT_EQ(code(DType::f32, good), StatusCode::invalid_argument);
  TileMapSpec s = good;
  s.data = static_cast<const char*>(fake) + 2;
  EXPECT_EQ(code(DType::bf16, s), StatusCode::not_supported) << "misaligned pointer";
  s = good;
  s.strides[1] = 100;  // 200 bytes: not a multiple of 16
  EXPECT_EQ(code(DType::bf16, s), StatusCode::not_supported) << "stride";
  const std::string msg = check_tile_map(DType::bf16, s, "who").message;
  EXPECT_NE(msg.find("who"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dimension 1"), std::string::npos) << msg;
  s = good;
  s.strides[0] = 2;
  EXPECT_EQ(code(DType::bf16, s), StatusCode::not_supported) << "innermost stride";
  s = good;
  s.box[1] = 257;
  EXPECT_EQ(code(DType::bf16, s), StatusCode::invalid_argument) << "box > 256";
  s = good;
  s.box[0] = 72;  // 144 bytes: wider than the 128B swizzle
  EXPECT_EQ(code(DType::bf16, s), StatusCode::invalid_argument) << "box wider than the swizzle";
  s.swizzle = Swizzle::none;
  EXPECT_TRUE(check_tile_map(DType::bf16, s, "t").ok()) << "no swizzle: any multiple of 8 elements";
  s.box[0] = 4;
  EXPECT_EQ(code(DType::bf16, s), StatusCode::invalid_argument) << "box of 8 bytes";
  s = good;
  s.rank = 1;
  EXPECT_EQ(code(DType::bf16, s), StatusCode::invalid_argument);
  s.rank = 6;
  EXPECT_EQ(code(DType::bf16, s), StatusCode::invalid_argument);
  s = good;
  s.dims[1] = 0;
  EXPECT_EQ(code(DType::bf16, s), StatusCode::not_supported) << "empty dimension";
}

// The sm90 forward's maps of a varlen call: the packed tensors {d, total rows, heads, 1} (batch
// stride 0 never stepped), in the contiguous packed layout and with padded row strides.
TEST(CudaPtxSm90Host, ForwardVarlenMapSpecs) {
  using namespace flashattn::cuda::sm90;
  void* const fake = reinterpret_cast<void*>(uintptr_t(1) << 20);  // aligned; never dereferenced
  flashattn::FwdParams p;
  p.dtype = DType::bf16;
  p.q = p.k = p.v = p.out = fake;
  static const int32_t cu[3] = {0, 0, 0};  // only compared with null
  p.cu_seqlens_q = p.cu_seqlens_k = cu;
  p.batch = 2;
  p.seqlen_q = 300;  // the maxima
  p.seqlen_k = 500;
  p.total_q = 1001;
  p.total_k = 777;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.hdim_qk = p.hdim_v = 128;
  p.q_row_stride = 4 * 128;
  p.q_head_stride = 128;
  p.k_row_stride = p.v_row_stride = 2 * 128 + 64;  // padded rows
  p.k_head_stride = p.v_head_stride = 128;
  const FwdMapSpecs m = fwd_map_specs(p, fwd_shape(128, /*masked=*/true));
  const int64_t q_dims[4] = {128, 1001, 4, 1}, q_strides[4] = {1, 512, 128, 8};
  const int64_t k_dims[4] = {128, 777, 2, 1}, k_strides[4] = {1, 320, 128, 8};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(m.q.dims[i], q_dims[i]) << i;
    EXPECT_EQ(m.q.strides[i], q_strides[i]) << i;
    EXPECT_EQ(m.k.dims[i], k_dims[i]) << i;
    EXPECT_EQ(m.k.strides[i], k_strides[i]) << i;
    EXPECT_EQ(m.v.dims[i], k_dims[i]) << i;
  }
  EXPECT_EQ(m.q.box[1], 128);
  EXPECT_EQ(m.k.box[1], 128);
  for (const TileMapSpec* s : {&m.q, &m.k, &m.v}) {
    const flashattn::Status st = check_tile_map(DType::bf16, *s, "t");
    EXPECT_TRUE(st.ok()) << st.message;
  }
  EXPECT_TRUE(fwd_has_keys(p));
  p.total_k = 0;
  EXPECT_FALSE(fwd_has_keys(p)) << "no packed key rows: no K/V map";
  EXPECT_EQ(kMaxPackedRows, 2147483647);
}

}  // namespace
