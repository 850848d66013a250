// `flashattn decode`'s problem: a KV cache holding `cached` random keys and values per sequence
// (contiguous, or paged with its pages shuffled over a pool), the queries and the rows the call
// appends, on the host or the device, and the KVCacheArgs over them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "buffer.hpp"
#include "config.hpp"
#include "flashattn/flashattn.hpp"

namespace fa_cli {

// The cache's shape, [slabs, rows, heads_kv, d]: a slab is one sequence's rows (contiguous) or a
// page of the pool (paged).
struct CacheShape {
  int64_t slabs = 0, rows = 0;
};
CacheShape cache_shape(const DecodeConfig& config);

// Every tensor of a decode call, on one device. Inputs: q, the caches, k_new / v_new (with --new),
// cache_seqlens, block_table (paged), the rotary tables (with --rotary); outputs: out, lse; the
// workspace the library asked for.
struct DecodeTensors {
  flashattn::Device device = flashattn::Device::cpu;
  Buffer q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, rotary_cos, rotary_sin, out, lse, workspace;

  std::size_t bytes() const;  // all of them together
};

// Bytes of all the tensors (no workspace), to check they fit before allocating them.
std::size_t decode_tensors_bytes(const DecodeConfig& config);

// Allocates the tensors on `device` (no workspace yet); "" or the error.
std::string allocate_decode_tensors(const DecodeConfig& config, flashattn::Device device, DecodeTensors* tensors);

// Fills host tensors: q, k_new, v_new and the cached rows with normal random numbers (a sequence's
// cached rows are the same whatever the layout and page size), every cache row no sequence holds
// yet with NaN (a read past a sequence's length shows in out), the lengths, the block table (the
// pool's pages in a random order, from the seed) and the rotary tables; out and lse with NaN.
void fill_decode_inputs(const DecodeConfig& config, DecodeTensors* host);

// Copies the inputs from host to device tensors, and the outputs (out, lse) back.
std::string copy_decode_inputs(const DecodeTensors& host, DecodeTensors* device);
std::string copy_decode_outputs(const DecodeTensors& device, DecodeTensors* host);

// The call's arguments over `tensors` (the workspace included).
flashattn::KVCacheArgs kvcache_args(const DecodeConfig& config, const DecodeTensors& tensors, void* stream);

}  // namespace fa_cli
