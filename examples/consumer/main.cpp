// A user of the installed package: one causal GQA forward on the CPU through the C++ API, checked
// against a naive softmax(q·kᵀ·scale)·v in double in this file. Exit 0 when they agree, 1 if not.
#include <flashattn/flashattn.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

namespace fa = flashattn;

constexpr int64_t kBatch = 2, kSeqQ = 33, kSeqK = 47, kHeadsQ = 4, kHeadsKV = 2, kDim = 40;
constexpr double kTolerance = 1e-4;  // f32 inputs and accumulation at these sizes: ~1e-6

// Row-major [batch, seq, heads, dim] index.
int64_t at(int64_t b, int64_t s, int64_t h, int64_t d, int64_t seq, int64_t heads) {
  return ((b * seq + s) * heads + h) * kDim + d;
}

// out and lse of one (batch, query head, query row), the plain way: every score, then softmax.
void naive_row(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int64_t b,
               int64_t h, int64_t i, double scale, double* out, double* lse) {
  const int64_t hk = h / (kHeadsQ / kHeadsKV);
  const int64_t last_visible = i + kSeqK - kSeqQ;  // causal, aligned bottom-right
  std::vector<double> s(kSeqK, -std::numeric_limits<double>::infinity());
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= last_visible && j < kSeqK; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < kDim; ++d) dot += double(q[at(b, i, h, d, kSeqQ, kHeadsQ)]) * k[at(b, j, hk, d, kSeqK, kHeadsKV)];
    s[j] = dot * scale;
    row_max = std::max(row_max, s[j]);
  }
  double sum = 0;
  for (double& x : s) sum += x = std::exp(x - row_max);
  for (int64_t d = 0; d < kDim; ++d) {
    double o = 0;
    for (int64_t j = 0; j < kSeqK; ++j) o += s[j] * v[at(b, j, hk, d, kSeqK, kHeadsKV)];
    out[d] = o / sum;
  }
  *lse = row_max + std::log(sum);
}

int main() {
  std::mt19937 rng(2024);
  std::normal_distribution<float> normal;
  std::vector<float> q(kBatch * kSeqQ * kHeadsQ * kDim), k(kBatch * kSeqK * kHeadsKV * kDim), v(k.size());
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = normal(rng);
  std::vector<float> out(q.size(), NAN), lse(kBatch * kHeadsQ * kSeqQ, NAN);

  fa::ForwardArgs args;
  args.q = fa::TensorView::contiguous(q.data(), fa::DType::f32, fa::Device::cpu, {kBatch, kSeqQ, kHeadsQ, kDim});
  args.k = fa::TensorView::contiguous(k.data(), fa::DType::f32, fa::Device::cpu, {kBatch, kSeqK, kHeadsKV, kDim});
  args.v = fa::TensorView::contiguous(v.data(), fa::DType::f32, fa::Device::cpu, {kBatch, kSeqK, kHeadsKV, kDim});
  args.out = fa::TensorView::contiguous(out.data(), fa::DType::f32, fa::Device::cpu, {kBatch, kSeqQ, kHeadsQ, kDim});
  args.lse = fa::TensorView::contiguous(lse.data(), fa::DType::f32, fa::Device::cpu, {kBatch, kHeadsQ, kSeqQ});
  args.options.causal = true;

  std::size_t workspace_bytes = 0;
  fa::Status s = fa::forward_workspace_size(args, &workspace_bytes);
  std::vector<unsigned char> workspace(workspace_bytes);
  args.workspace = workspace.data();
  args.workspace_bytes = workspace_bytes;
  const std::string path = fa::forward_path(args);
  if (s.ok()) s = fa::forward(args);
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: forward failed: %s\n", s.message.c_str());
    return 1;
  }

  const double scale = 1.0 / std::sqrt(double(kDim));
  double max_out_err = 0, max_lse_err = 0;
  std::vector<double> ref(kDim);
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeadsQ; ++h)
      for (int64_t i = 0; i < kSeqQ; ++i) {
        double ref_lse;
        naive_row(q, k, v, b, h, i, scale, ref.data(), &ref_lse);
        for (int64_t d = 0; d < kDim; ++d) {
          // NaN (an unwritten element) compares false: count it as an infinite error.
          const double e = std::fabs(out[at(b, i, h, d, kSeqQ, kHeadsQ)] - ref[d]);
          max_out_err = e <= max_out_err ? max_out_err : (std::isnan(e) ? INFINITY : e);
        }
        const double e = std::fabs(lse[(b * kHeadsQ + h) * kSeqQ + i] - ref_lse);
        max_lse_err = e <= max_lse_err ? max_lse_err : (std::isnan(e) ? INFINITY : e);
      }

  std::string families;
  for (const std::string& f : fa::families()) families += (families.empty() ? "" : ",") + f;
  const bool ok = max_out_err <= kTolerance && max_lse_err <= kTolerance;
  std::printf("consumer: forward on path %s (families of this build: %s); max error out %.2e, lse %.2e: %s\n",
              path.c_str(), families.c_str(), max_out_err, max_lse_err, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
