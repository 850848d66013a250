// The PTX wrappers of src/cuda/ptx against their written fragment-layout contracts. Each test builds
// or reads fragments exactly as the contract comment says, so a failure names the wrapper (or the
// contract) that is wrong: mma (A/B/C layouts), ldmatrix (.x4/.x2, .trans), cp.async (zero fill),
// pack2 (half order), exp2 (−inf), red.global.add (scalar, .v2, .v4: every element once per call).
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/red.cuh"
#include "test_util.cuh"

namespace {

using flashattn::ptx::BF16;
using flashattn::ptx::F16;

__device__ uint32_t pack_bits(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

// One warp: D = A·B + C with A 16×16 row-major, B 16×8 stored [k][n], C/D 16×8 fp32, fragments
// built from the contract of ptx/mma.cuh.
template <class Tag>
__global__ void mma_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  auto A = [&](int r, int k) { return a[r * 16 + k]; };
  auto B = [&](int k, int n) { return b[k * 8 + n]; };
  const uint32_t af[4] = {pack_bits(A(g, 2 * t), A(g, 2 * t + 1)), pack_bits(A(g + 8, 2 * t), A(g + 8, 2 * t + 1)),
                          pack_bits(A(g, 2 * t + 8), A(g, 2 * t + 9)),
                          pack_bits(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9))};
  const uint32_t bf[2] = {pack_bits(B(2 * t, g), B(2 * t + 1, g)), pack_bits(B(2 * t + 8, g), B(2 * t + 9, g))};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  flashattn::ptx::mma_m16n8k16<Tag>(acc, af, bf);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

template <class Tag>
void check_mma() {
  FA_REQUIRE_DEVICE();
  std::mt19937 rng(7);
  std::vector<uint16_t> ab, bb;
  std::vector<float> av, bv;
  fa_test::random_matrix<Tag>(rng, 16 * 16, &ab, &av);
  fa_test::random_matrix<Tag>(rng, 16 * 8, &bb, &bv);
  std::vector<float> c(16 * 8);
  for (auto& x : c) x = std::normal_distribution<float>()(rng);
  fa_test::DeviceBuffer<uint16_t> da(ab), db(bb);
  fa_test::DeviceBuffer<float> dc(c), dd(16 * 8);
  mma_kernel<Tag><<<1, 32>>>(da.ptr, db.ptr, dc.ptr, dd.ptr);
  FA_KERNEL_OK();
  const std::vector<float> d = dd.download();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      double ref = c[i * 8 + j];
      for (int k = 0; k < 16; ++k) ref += double(av[i * 16 + k]) * bv[k * 8 + j];
      EXPECT_NEAR(d[i * 8 + j], ref, 1e-4 * (1 + std::fabs(ref))) << "D[" << i << "][" << j << "]";
    }
  }
}

TEST(CudaPtx, MmaM16n8k16Bf16) { check_mma<BF16>(); }
TEST(CudaPtx, MmaM16n8k16F16) { check_mma<F16>(); }

// ldmatrix: 4 matrices of 8×8 u16 in shared memory, value = 256·i + 8·row + col (matrix i).
__global__ void ldmatrix_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t m[4][8][8];
  const int lane = threadIdx.x;
  for (int e = lane; e < 256; e += 32) m[e / 64][(e / 8) % 8][e % 8] = static_cast<uint16_t>(256 * (e / 64) + e % 64);
  __syncwarp();
  using namespace flashattn::ptx;
  uint32_t r4[4], r4t[4], r2[2], r2t[2];
  const uint32_t addr4 = smem_addr(&m[lane / 8][lane % 8][0]);
  const uint32_t addr2 = smem_addr(&m[(lane / 8) % 2][lane % 8][0]);  // lanes 0..15 matter
  ldmatrix_x4(r4, addr4);
  ldmatrix_x4_trans(r4t, addr4);
  ldmatrix_x2(r2, addr2);
  ldmatrix_x2_trans(r2t, addr2);
  for (int i = 0; i < 4; ++i) {
    out[(0 * 4 + i) * 32 + lane] = r4[i];
    out[(1 * 4 + i) * 32 + lane] = r4t[i];
  }
  for (int i = 0; i < 2; ++i) {
    out[(2 * 4 + i) * 32 + lane] = r2[i];
    out[(3 * 4 + i) * 32 + lane] = r2t[i];
  }
}

TEST(CudaPtx, LdmatrixLayouts) {
  FA_REQUIRE_DEVICE();
  fa_test::DeviceBuffer<uint32_t> out(4 * 4 * 32);
  ldmatrix_kernel<<<1, 32>>>(out.ptr);
  FA_KERNEL_OK();
  const std::vector<uint32_t> r = out.download();
  auto val = [](int i, int row, int col) { return uint32_t(256 * i + 8 * row + col); };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      // plain: r[i] = matrix i, row g, cols 2t (low), 2t + 1 (high)
      EXPECT_EQ(r[(0 * 4 + i) * 32 + lane], val(i, g, 2 * t) | (val(i, g, 2 * t + 1) << 16)) << "x4 lane " << lane << " reg " << i;
      // trans: r[i] = matrix i, column g, rows 2t (low), 2t + 1 (high)
      EXPECT_EQ(r[(1 * 4 + i) * 32 + lane], val(i, 2 * t, g) | (val(i, 2 * t + 1, g) << 16)) << "x4.trans lane " << lane << " reg " << i;
    }
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(r[(2 * 4 + i) * 32 + lane], val(i, g, 2 * t) | (val(i, g, 2 * t + 1) << 16)) << "x2 lane " << lane << " reg " << i;
      EXPECT_EQ(r[(3 * 4 + i) * 32 + lane], val(i, 2 * t, g) | (val(i, 2 * t + 1, g) << 16)) << "x2.trans lane " << lane << " reg " << i;
    }
  }
}

// cp.async: a full copy, a zero fill (src_bytes 0) and a partial one (8 bytes) over 0xFF bytes.
__global__ void cp_async_kernel(const uint4* src, uint4* out) {
  __shared__ __align__(16) uint4 s[3];
  if (threadIdx.x < 3) s[threadIdx.x] = make_uint4(~0u, ~0u, ~0u, ~0u);
  __syncthreads();
  using namespace flashattn::ptx;
  if (threadIdx.x == 0) {
    cp_async_16(smem_addr(&s[0]), &src[0]);
    cp_async_16(smem_addr(&s[1]), &src[1], 0);
    cp_async_16(smem_addr(&s[2]), &src[2], 8);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  if (threadIdx.x < 3) out[threadIdx.x] = s[threadIdx.x];
}

// cp.async 4-byte: a gather, thread i copies word (7·i) % 32 of src into shared word i, over 0xFF bytes.
__global__ void cp_async_4_kernel(const uint32_t* src, uint32_t* out) {
  __shared__ uint32_t s[32];
  s[threadIdx.x] = ~0u;
  __syncthreads();
  using namespace flashattn::ptx;
  cp_async_4(smem_addr(&s[threadIdx.x]), &src[(7 * threadIdx.x) % 32]);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(CudaPtx, CpAsync4Gathers) {
  FA_REQUIRE_DEVICE();
  std::vector<uint32_t> src(32);
  for (int i = 0; i < 32; ++i) src[i] = 0x9E3779B9u * (i + 1);
  fa_test::DeviceBuffer<uint32_t> dsrc(src), dout(32);
  cp_async_4_kernel<<<1, 32>>>(dsrc.ptr, dout.ptr);
  FA_KERNEL_OK();
  const std::vector<uint32_t> o = dout.download();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(o[i], src[(7 * i) % 32]) << "word " << i;
}

// red.global.add: 4 blocks × 64 threads add i + 1 (thread i) into a poisoned-free, nonzero start
// vector through each form; integers, so every order gives the same exact sum: start + 4 (i + 1)
// for each element a thread owns. Thread i owns elements [w·i, w·i + w) of the w-wide form.
__global__ void red_kernel(float* scalar, float* v2, float* v4) {
  using namespace flashattn::ptx;
  const int i = threadIdx.x;
  const float x = float(i + 1);
  red_add_f32(scalar + i, x);
  red_add_v2_f32(v2 + 2 * i, x, 2 * x);
  red_add_v4_f32(v4 + 4 * i, x, 2 * x, 3 * x, 4 * x);
}

TEST(CudaPtx, RedGlobalAddForms) {
  FA_REQUIRE_DEVICE();
  constexpr int kThreads = 64, kBlocks = 4;
  std::vector<float> start(4 * kThreads);
  for (std::size_t j = 0; j < start.size(); ++j) start[j] = float(1000 + 7 * j);
  fa_test::DeviceBuffer<float> scalar(std::vector<float>(start.begin(), start.begin() + kThreads)),
      v2(std::vector<float>(start.begin(), start.begin() + 2 * kThreads)), v4(start);
  red_kernel<<<kBlocks, kThreads>>>(scalar.ptr, v2.ptr, v4.ptr);
  FA_KERNEL_OK();
  const auto s = scalar.download(), a = v2.download(), b = v4.download();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(s[i], start[i] + kBlocks * (i + 1)) << "scalar element " << i;
    for (int k = 0; k < 2; ++k) EXPECT_EQ(a[2 * i + k], start[2 * i + k] + kBlocks * (k + 1) * (i + 1)) << ".v2 " << i;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(b[4 * i + k], start[4 * i + k] + kBlocks * (k + 1) * (i + 1)) << ".v4 " << i;
  }
}

TEST(CudaPtx, CpAsyncZeroFillSmall) {
  FA_REQUIRE_DEVICE();
  std::vector<uint32_t> src(12);
  for (int i = 0; i < 12; ++i) src[i] = 0x01010101u * (i + 1);
  fa_test::DeviceBuffer<uint32_t> dsrc(src), dout(12);
  cp_async_kernel<<<1, 32>>>(reinterpret_cast<const uint4*>(dsrc.ptr), reinterpret_cast<uint4*>(dout.ptr));
  FA_KERNEL_OK();
  const std::vector<uint32_t> o = dout.download();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(o[i], src[i]) << "full copy word " << i;
  for (int i = 4; i < 8; ++i) EXPECT_EQ(o[i], 0u) << "src_bytes = 0 must zero-fill, word " << i;
  EXPECT_EQ(o[8], src[8]);
  EXPECT_EQ(o[9], src[9]);
  EXPECT_EQ(o[10], 0u) << "src_bytes = 8 zero-fills the second half";
  EXPECT_EQ(o[11], 0u);
}

template <class Tag>
__global__ void math_kernel(const float* x, uint32_t* packed, float* ex) {
  const int i = threadIdx.x;
  packed[i] = flashattn::ptx::pack2<Tag>(x[2 * i], x[2 * i + 1]);
  ex[i] = flashattn::ptx::exp2_approx(x[2 * i]);
}

template <class Tag>
void check_math() {
  FA_REQUIRE_DEVICE();
  std::vector<float> x = {1.5f, -2.25f, 0.1f, 3.0e4f, -INFINITY, 0.f, 7.f, -0.5f, 10.f, 1.f / 3, -126.5f, 2.f};
  const int n = static_cast<int>(x.size()) / 2;
  fa_test::DeviceBuffer<float> dx(x), dex(n);
  fa_test::DeviceBuffer<uint32_t> dp(n);
  math_kernel<Tag><<<1, n>>>(dx.ptr, dp.ptr, dex.ptr);
  FA_KERNEL_OK();
  const auto p = dp.download();
  const auto e = dex.download();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(p[i] & 0xffffu, fa_test::to_bits<Tag>(x[2 * i])) << "pack2: the first (lo) value goes to the low half";
    EXPECT_EQ(p[i] >> 16, fa_test::to_bits<Tag>(x[2 * i + 1])) << "pack2: the second (hi) value goes to the high half";
    const double ref = std::exp2(double(x[2 * i]));
    if (std::isinf(x[2 * i])) {
      EXPECT_EQ(e[i], 0.f) << "exp2(-inf) must be 0";
    } else if (ref > 1e-37) {  // ftz: results below the normal range flush to 0
      EXPECT_NEAR(e[i], ref, 1e-6 * ref) << "exp2(" << x[2 * i] << ")";
    }
  }
}

TEST(CudaPtx, Pack2AndExp2Bf16) { check_math<BF16>(); }
TEST(CudaPtx, Pack2AndExp2F16) { check_math<F16>(); }

}  // namespace
