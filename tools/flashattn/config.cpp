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

// --backend and --path to the device the tensors live on.
bool resolve_device(const Options& o, flashattn::Device* device, std::string* error) {
  using flashattn::Device;
  switch (o.backend) {
    case Backend::cpu: *device = Device::cpu; break;
    case Backend::cuda:
      if (!flashattn::cuda_available()) {
        *error = "--backend cuda: " + no_cuda_reason();
        return false;
      }
      *device = Device::cuda;
      break;
    case Backend::automatic:
      if (o.path == "auto") {
        *device = flashattn::cuda_available() ? Device::cuda : Device::cpu;
      } else {  // a family implies its device (the option parser has checked the name)
        *device = flashattn::family_device(o.path).value_or(Device::cpu);
        if (*device == Device::cuda && !flashattn::cuda_available()) {
          *error = "--path " + o.path + ": " + no_cuda_reason() + " (" + o.path + " runs cuda tensors)";
          return false;
        }
      }
      break;
  }
  return true;
}

// The options every command shares: calls, warm-up, check, seed, output, threads.
void resolve_loop(const Options& o, const Defaults& d, LoopConfig* c) {
  c->repeats = o.repeats.value_or(d.repeats);
  c->warmup = o.warmup.value_or(d.warmup);
  c->check = o.check;
  c->seed = o.seed;
  c->json = o.json;
  c->quiet = o.quiet;
  c->threads = o.threads;
}

}  // namespace

bool resolve(const Options& o, RunConfig* c, std::string* error) {
  if (!resolve_device(o, &c->device, error)) return false;
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
  resolve_loop(o, d, c);

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

DecodeDefaults decode_defaults_for(flashattn::Device device) {
  if (device == flashattn::Device::cuda) return {8, 32, 8, 8192, 128, flashattn::DType::bf16};
  return {4, 8, 2, 4096, 64, flashattn::DType::f32};
}

bool resolve_decode(const Options& o, DecodeConfig* c, std::string* error) {
  if (!resolve_device(o, &c->device, error)) return false;
  const DecodeDefaults d = decode_defaults_for(c->device);
  const Defaults loop = defaults_for(c->device);
  c->dtype = o.dtype.value_or(d.dtype);
  c->batch = o.batch.value_or(d.batch);
  c->heads_q = o.heads.value_or(d.heads);
  c->heads_kv = o.heads_kv.value_or(o.heads ? c->heads_q : d.heads_kv);
  c->seqlen_q = o.seqlen_q.value_or(1);
  c->cached = o.seqlen_k.value_or(d.seqlen_k);
  c->new_rows = o.new_rows.value_or(0);
  c->hdim_qk = o.headdim.value_or(d.headdim);
  c->hdim_v = o.headdim_v.value_or(c->hdim_qk);
  c->page_size = o.page_size.value_or(0);
  c->rotary = o.rotary;
  c->options = o.attention;
  c->num_splits = o.num_splits;
  c->path = o.path;
  resolve_loop(o, loop, c);

  // The int32 index arrays (cache_seqlens, block_table) and the element counts the tool indexes.
  const int64_t hd = std::max(c->hdim_qk, c->hdim_v);
  const int64_t pool = checked_product({c->batch, c->pages_per_sequence()});
  if (c->capacity() > std::numeric_limits<int32_t>::max() || pool < 0 ||
      pool + DecodeConfig::kSparePages > std::numeric_limits<int32_t>::max()) {
    *error = "--batch " + std::to_string(c->batch) + " --seqlen-k " + std::to_string(c->cached) + " --new " +
             std::to_string(c->new_rows) + (c->paged() ? " --page-size " + std::to_string(c->page_size) : "") +
             ": keys per sequence and pages must fit the int32 cache_seqlens and block_table";
    return false;
  }
  const int64_t cache_rows = c->paged() ? checked_product({c->pool_pages(), c->page_size})
                                        : checked_product({c->batch, c->capacity()});
  if (cache_rows < 0 || checked_product({cache_rows, c->heads_kv, hd, 4}) < 0 ||
      checked_product({c->batch, c->seqlen_q, c->heads_q, hd, 4}) < 0) {
    *error = "--batch " + std::to_string(c->batch) + " --heads " + std::to_string(c->heads_q) + " --seqlen-k " +
             std::to_string(c->cached) + (c->paged() ? " --page-size " + std::to_string(c->page_size) : "") +
             ": element counts overflow 64 bits";
    return false;
  }
  return true;
}

}  // namespace fa_cli
