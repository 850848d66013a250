#include "config.hpp"

#include <limits>
#include <vector>

namespace fa_cli {

Defaults defaults_for(flashattn::Device device) {
  if (device == flashattn::Device::cuda) return {4, 16, 4096, 128, flashattn::DType::bf16, 30, 5};
  // f32 on the CPU: it has no bf16 arithmetic here, so f32 is both the faster and the more common
  // CPU dtype; pass --dtype bf16 to exercise the conversions.
  return {1, 8, 1024, 64, flashattn::DType::f32, 5, 1};
}

namespace {

// a * b * ... without overflow, or -1.
int64_t checked_product(std::initializer_list<int64_t> factors) {
  __int128 p = 1;
  for (int64_t f : factors) {
    p *= f;
    if (p > std::numeric_limits<int64_t>::max()) return -1;
  }
  return static_cast<int64_t>(p);
}

std::string no_cuda_reason() {
#ifdef FLASHATTN_CLI_WITH_CUDA
  return "no CUDA device is visible";
#else
  return "flashattn was built without CUDA";
#endif
}

}  // namespace

bool resolve(const RunOptions& o, RunConfig* c, std::string* error) {
  using flashattn::Device;
  switch (o.backend) {
    case Backend::cpu: c->device = Device::cpu; break;
    case Backend::cuda:
      if (!flashattn::cuda_available()) {
        *error = "--backend cuda: " + no_cuda_reason();
        return false;
      }
      c->device = Device::cuda;
      break;
    case Backend::automatic:
      if (o.path == "auto") {
        c->device = flashattn::cuda_available() ? Device::cuda : Device::cpu;
      } else {  // a family implies its device (the option parser has checked the name)
        c->device = flashattn::family_device(o.path).value_or(Device::cpu);
        if (c->device == Device::cuda && !flashattn::cuda_available()) {
          *error = "--path " + o.path + ": " + no_cuda_reason() + " (" + o.path + " runs cuda tensors)";
          return false;
        }
      }
      break;
  }
  const Defaults d = defaults_for(c->device);
  c->dtype = o.dtype.value_or(d.dtype);
  c->batch = o.batch.value_or(d.batch);
  c->heads_q = o.heads.value_or(d.heads);
  c->heads_kv = o.heads_kv.value_or(c->heads_q);
  c->seqlen_q = o.seqlen_q.value_or(o.seqlen.value_or(d.seqlen));
  c->seqlen_k = o.seqlen_k.value_or(o.seqlen.value_or(d.seqlen));
  c->hdim_qk = o.headdim.value_or(d.headdim);
  c->hdim_v = o.headdim_v.value_or(c->hdim_qk);
  c->options = o.attention;
  c->path = o.path;
  c->varlen = o.varlen;
  c->backward = o.backward;
  c->deterministic = o.deterministic;
  c->repeats = o.repeats.value_or(d.repeats);
  c->warmup = o.warmup.value_or(d.warmup);
  c->check = o.check;
  c->seed = o.seed;
  c->json = o.json;
  c->quiet = o.quiet;
  c->threads = o.threads;

  // Sizes the tool itself must be able to index (the library rejects the rest with its Status).
  const int64_t hd = std::max(c->hdim_qk, c->hdim_v);
  if (checked_product({c->batch, c->seqlen_q, c->heads_q, hd, 4}) < 0 ||
      checked_product({c->batch, c->seqlen_k, c->heads_kv, hd, 4}) < 0 ||
      checked_product({c->batch, c->heads_q, c->seqlen_q, c->seqlen_k}) < 0) {
    *error = "--batch " + std::to_string(c->batch) + " --heads " + std::to_string(c->heads_q) + " --seqlen-q " +
             std::to_string(c->seqlen_q) + " --seqlen-k " + std::to_string(c->seqlen_k) +
             ": element counts overflow 64 bits";
    return false;
  }
  if (c->varlen && (checked_product({c->batch, c->seqlen_q}) > std::numeric_limits<int32_t>::max() ||
                    checked_product({c->batch, c->seqlen_k}) > std::numeric_limits<int32_t>::max())) {
    *error = "--varlen: batch * seqlen must fit the int32 cu_seqlens (at most 2^31 - 1 tokens)";
    return false;
  }
  return true;
}

}  // namespace fa_cli
