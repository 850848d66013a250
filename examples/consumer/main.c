/* A C user of the installed package: one forward through the C ABI (libflashattn_c.so) on the CPU,
 * checked against a naive softmax(q·kᵀ·scale)·v in double. Exit 0 when they agree, 1 if not. */
#include <flashattn/flashattn_c.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { kSeq = 19, kHeads = 2, kDim = 16 }; /* batch 1, q/k/v/out [1, kSeq, kHeads, kDim] */

static fa_tensor view(void* data, int rank, const int64_t* shape) {
  fa_tensor t = {0};
  t.data = data;
  t.dtype = 0; /* f32 */
  t.device = 0; /* cpu */
  t.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.stride[d] = stride;
    stride *= shape[d];
  }
  return t;
}

/* A standard normal sample (Box-Muller) from rand(). */
static float normal(void) {
  const double u = (rand() + 1.0) / (RAND_MAX + 2.0), w = (rand() + 1.0) / (RAND_MAX + 2.0);
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w));
}

int main(void) {
  static float q[kSeq * kHeads * kDim], k[kSeq * kHeads * kDim], v[kSeq * kHeads * kDim], out[kSeq * kHeads * kDim];
  static float lse[kHeads * kSeq];
  srand(7);
  for (int i = 0; i < kSeq * kHeads * kDim; ++i) q[i] = normal(), k[i] = normal(), v[i] = normal(), out[i] = NAN;

  const int64_t rows[4] = {1, kSeq, kHeads, kDim}, lse_shape[3] = {1, kHeads, kSeq};
  fa_args args;
  fa_args_init(&args);
  args.q = view(q, 4, rows);
  args.k = view(k, 4, rows);
  args.v = view(v, 4, rows);
  args.out = view(out, 4, rows);
  args.lse = view(lse, 3, lse_shape);
  args.path = "cpu";
  char msg[512];
  if (fa_forward(&args, msg, sizeof msg) != 0) {
    fprintf(stderr, "consumer_c: fa_forward failed: %s\n", msg);
    return 1;
  }

  const double scale = 1.0 / sqrt((double)kDim);
  double max_err = 0;
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kSeq; ++i) {
      double p[kSeq], row_max = -INFINITY, sum = 0;
      for (int j = 0; j < kSeq; ++j) {
        double dot = 0;
        for (int d = 0; d < kDim; ++d) dot += (double)q[(i * kHeads + h) * kDim + d] * k[(j * kHeads + h) * kDim + d];
        p[j] = dot * scale;
        if (p[j] > row_max) row_max = p[j];
      }
      for (int j = 0; j < kSeq; ++j) sum += p[j] = exp(p[j] - row_max);
      for (int d = 0; d < kDim; ++d) {
        double o = 0;
        for (int j = 0; j < kSeq; ++j) o += p[j] * v[(j * kHeads + h) * kDim + d];
        const double e = fabs(out[(i * kHeads + h) * kDim + d] - o / sum);
        if (!(e <= max_err)) max_err = isnan(e) ? INFINITY : e;
      }
      const double e = fabs(lse[h * kSeq + i] - (row_max + log(sum)));
      if (!(e <= max_err)) max_err = isnan(e) ? INFINITY : e;
    }
  }
  const int ok = max_err <= 1e-4;
  printf("consumer_c: fa_forward on path %s (families: %s); max error %.2e: %s\n", fa_forward_path(&args),
         fa_families(), max_err, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
