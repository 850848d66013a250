#include "decode_check.hpp"

#include <chrono>
#include <cstring>
#include <numeric>

#include "api/validate.hpp"
#include "cpu/reference.hpp"
#include "progress.hpp"

namespace fa_cli {

namespace ref = flashattn::reference;
using flashattn::DType;
using flashattn::Status;
using flashattn::TensorView;

namespace {

// The sequences to check: all of them, or as many whole sequences as fit kFullCheckEntries.
std::vector<int64_t> sequences_to_check(const DecodeConfig& c, bool* sampled) {
  const double per_sequence = static_cast<double>(c.heads_q) * static_cast<double>(c.seqlen_q) *
                              static_cast<double>(c.seqlen_k());
  *sampled = per_sequence * static_cast<double>(c.batch) > kFullCheckEntries;
  if (!*sampled) {
    std::vector<int64_t> all(static_cast<std::size_t>(c.batch));
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(kFullCheckEntries / per_sequence));
  return ref::sample_rows(c.batch, n, c.seed ^ 0x5eu);
}

// The sequences' slices of a [batch, ...] host tensor, `per_sequence` bytes each, back to back.
void gather(const Buffer& from, std::size_t per_sequence, const std::vector<int64_t>& sequences, Buffer* to) {
  to->allocate(flashattn::Device::cpu, per_sequence * sequences.size());
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    std::memcpy(static_cast<char*>(to->data()) + i * per_sequence,
                static_cast<const char*>(from.data()) + static_cast<std::size_t>(sequences[i]) * per_sequence,
                per_sequence);
  }
}

// The call of the checked sequences alone, over the host tensors: their rows of q, out, lse,
// k_new, v_new, lengths and block table gathered; the caches and rotary tables as they are (a
// contiguous cache reaches the sequences' rows through cache_batch_idx).
struct SampledCall {
  DecodeTensors rows;  // the gathered tensors (the caches stay empty)
  Buffer cache_batch_idx;
  flashattn::KVCacheArgs args;
};

void sampled_call(const DecodeConfig& c, const DecodeTensors& host, const std::vector<int64_t>& sequences,
                  SampledCall* s) {
  DecodeConfig sub = c;
  sub.batch = static_cast<int64_t>(sequences.size());
  DecodeTensors& t = s->rows;
  for (auto [from, to] : {std::pair{&host.q, &t.q}, {&host.k_new, &t.k_new}, {&host.v_new, &t.v_new},
                          {&host.cache_seqlens, &t.cache_seqlens}, {&host.block_table, &t.block_table},
                          {&host.out, &t.out}, {&host.lse, &t.lse}}) {
    gather(*from, from->bytes() / static_cast<std::size_t>(c.batch), sequences, to);
  }
  s->args = kvcache_args(sub, t, nullptr);
  const flashattn::KVCacheArgs all = kvcache_args(c, host, nullptr);  // the caches keep the whole batch's shape
  s->args.k_cache = all.k_cache;
  s->args.v_cache = all.v_cache;
  s->args.rotary_cos = all.rotary_cos;
  s->args.rotary_sin = all.rotary_sin;
  s->args.workspace = nullptr;
  s->args.workspace_bytes = 0;
  if (!c.paged()) {
    const std::vector<int32_t> rows(sequences.begin(), sequences.end());
    s->cache_batch_idx.allocate(flashattn::Device::cpu, rows.size() * sizeof(int32_t));
    std::memcpy(s->cache_batch_idx.data(), rows.data(), s->cache_batch_idx.bytes());
    s->args.cache_batch_idx = TensorView::contiguous(s->cache_batch_idx.data(), DType::i32, flashattn::Device::cpu,
                                                     {sub.batch});
  }
}

}  // namespace

Status check_decode(const DecodeConfig& c, const DecodeTensors& host, DecodeCheckResult* r) {
  const auto t0 = std::chrono::steady_clock::now();
  *r = DecodeCheckResult{};
  r->ran = true;
  r->total_sequences = c.batch;
  const std::vector<int64_t> sequences = sequences_to_check(c, &r->sampled);
  r->sequences = static_cast<int64_t>(sequences.size());

  SampledCall call;
  sampled_call(c, host, sequences, &call);
  flashattn::KVCacheParams params;
  Status s = flashattn::to_params(call.args, &params);
  if (!s.ok()) return s;
  Progress progress(!c.quiet, "reference");
  if (r->sampled || c.seqlen_k() * c.batch > (int64_t{1} << 20)) {
    progress.note("float64 and same-precision attention on " + std::to_string(r->sequences) + " sequences");
  }
  ref::KVCacheResult f64, same;
  s = ref::kvcache_forward(params, ref::Precision::f64, &f64);
  if (s.ok()) s = ref::kvcache_forward(params, ref::Precision::same, &same);
  if (!s.ok()) return s;

  const ref::ForwardResult& want = f64.attention;
  r->tensors.push_back(check_tensor("out", c.hdim_v, ref::read_out(params), same.attention.out, want.out, want.q_rows,
                                    c.heads_q * c.hdim_v, c.dtype, want.out_terms));
  // lse is fp32 whatever the inputs' dtype: its atol is float32's.
  r->tensors.push_back(check_tensor("lse", 1, ref::read_lse(params), same.attention.lse, want.lse, want.q_rows,
                                    c.heads_q, DType::f32));
  for (const TensorCheck& t : r->tensors) r->ok = r->ok && t.error.ok;
  r->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::success();
}

}  // namespace fa_cli
