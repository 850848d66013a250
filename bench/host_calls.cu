// Host time of the CUDA runtime calls a forward makes before its kernel runs, and of the library's
// forward through the C API, on the machine it runs on (µs per call, best of 7 rounds of N calls;
// launches are not waited for inside a round). What it answers: which part of a short call's
// launch delay is the library's (validation, plan, tensor maps), which the runtime's (the launch,
// a memset, cudaGetDevice), so that host-path work goes where the time is (docs/python.md).
//
//   build/bench/host_calls   (links libflashattn_c; batch 1, seqlen 128, 8 heads, hdim 64, bf16)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>

#include "flashattn/flashattn_c.h"

namespace {

__global__ void empty_kernel() {}

struct Big {
  unsigned char bytes[640];  // about the sm90 forward's parameters: three tensor maps and the params
};
__global__ void empty_kernel_big(const __grid_constant__ Big b) {
  if (b.bytes[0] == 255 && threadIdx.x == 1024) printf("never\n");
}

double us_per_call(const std::function<void()>& fn, int calls = 200, int rounds = 7) {
  for (int i = 0; i < calls / 10; ++i) fn();
  cudaDeviceSynchronize();
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    const auto stop = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    best = std::min(best, std::chrono::duration<double, std::micro>(stop - start).count() / calls);
  }
  return best;
}

fa_tensor view(void* data, int dtype, int rank, const int64_t* shape) {
  fa_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.device = 1;
  t.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.stride[i] = stride;
    stride *= shape[i];
  }
  return t;
}

}  // namespace

int main() {
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  int* counter = nullptr;
  cudaMalloc(&counter, sizeof(int));
  const int64_t b = 1, s = 128, h = 8, d = 64;
  const int64_t qshape[4] = {b, s, h, d}, lshape[3] = {b, h, s};
  void *q, *k, *v, *o, *lse;
  const size_t bytes = b * s * h * d * 2;
  cudaMalloc(&q, bytes);
  cudaMalloc(&k, bytes);
  cudaMalloc(&v, bytes);
  cudaMalloc(&o, bytes);
  cudaMalloc(&lse, b * h * s * 4);
  cudaMemset(q, 0x3c, bytes);  // bf16 0x3c3c ~ 0.0115: finite inputs
  cudaMemset(k, 0x3c, bytes);
  cudaMemset(v, 0x3c, bytes);
  fa_args a;
  fa_args_init(&a);
  a.q = view(q, 2, 4, qshape);
  a.k = view(k, 2, 4, qshape);
  a.v = view(v, 2, 4, qshape);
  a.out = view(o, 2, 4, qshape);
  a.lse = view(lse, 0, 3, lshape);
  a.stream = stream;
  fa_options causal;
  fa_options_init(&causal);
  causal.causal = 1;
  fa_args ac = a;
  ac.options = &causal;
  size_t ws_bytes = 0;
  char msg[512];
  if (fa_forward_workspace_size(&ac, &ws_bytes, msg, sizeof msg) != 0) std::printf("workspace: %s\n", msg);
  void* ws = nullptr;
  cudaMalloc(&ws, ws_bytes > 0 ? ws_bytes : 1);
  ac.workspace = ws;
  ac.workspace_bytes = ws_bytes;
  if (fa_forward(&a, msg, sizeof msg) != 0) std::printf("fa_forward: %s\n", msg);
  if (fa_forward(&ac, msg, sizeof msg) != 0) std::printf("fa_forward causal: %s\n", msg);
  const char* path = fa_forward_path(&a);
  std::printf("forward path: %s\n", path);

  const Big big{};
  int dev = 0;
  cudaGetDevice(&dev);
  struct Row {
    const char* name;
    std::function<void()> fn;
  } rows[] = {
      {"cudaGetDevice", [&] { cudaGetDevice(&dev); }},
      {"cudaSetDevice (the current one)", [&] { cudaSetDevice(dev); }},
      {"cudaGetLastError", [] { cudaGetLastError(); }},
      {"empty kernel <<<1, 32>>>", [&] { empty_kernel<<<1, 32, 0, stream>>>(); }},
      {"empty kernel, 640-byte __grid_constant__ parameter", [&] { empty_kernel_big<<<1, 32, 0, stream>>>(big); }},
      {"cudaMemsetAsync of 4 bytes", [&] { cudaMemsetAsync(counter, 0, sizeof(int), stream); }},
      {"fa_forward_path (validation, family choice, plan)", [&] { fa_forward_path(&a); }},
      {"fa_forward_workspace_size, causal", [&] { fa_forward_workspace_size(&ac, &ws_bytes, msg, sizeof msg); }},
      {"fa_forward (plan, tensor maps, launch)", [&] { fa_forward(&a, msg, sizeof msg); }},
      {"fa_forward, causal (plus the tile counter's memset)", [&] { fa_forward(&ac, msg, sizeof msg); }},
  };
  for (const Row& r : rows) std::printf("%-55s %8.2f us\n", r.name, us_per_call(r.fn));
  return 0;
}
