// One run's problem: the sequence layout (padded or varlen), the tensors on the host or the
// device, and the public argument structs built from them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "buffer.hpp"
#include "config.hpp"
#include "flashattn/flashattn.hpp"

namespace fa_cli {

// Sequence lengths and packed sizes. Padded: every sequence has seqlen_q / seqlen_k rows. Varlen:
// random lengths 1..seqlen, packed back to back, with cu_seqlens offsets; seqlen_* are the maxima.
struct Layout {
  int64_t batch = 0, heads_q = 0, heads_kv = 0, hdim_qk = 0, hdim_v = 0;
  bool varlen = false;
  int64_t seqlen_q = 0, seqlen_k = 0;
  std::vector<int32_t> cu_q, cu_k;  // varlen: batch + 1 offsets
  int64_t total_q = 0, total_k = 0;  // rows of the packed tensors (padded: batch * seqlen)

  int64_t len_q(int64_t b) const { return varlen ? cu_q[b + 1] - cu_q[b] : seqlen_q; }
  int64_t len_k(int64_t b) const { return varlen ? cu_k[b + 1] - cu_k[b] : seqlen_k; }
  int64_t start_q(int64_t b) const { return varlen ? cu_q[b] : b * seqlen_q; }
  int64_t start_k(int64_t b) const { return varlen ? cu_k[b] : b * seqlen_k; }
};

Layout make_layout(const RunConfig& config);

// Every tensor of a run, on one device. Inputs: q, k, v (and dout for the backward); outputs:
// out, lse (and dq, dk, dv); cu_q, cu_k for varlen; the workspace the library asked for.
struct Tensors {
  flashattn::Device device = flashattn::Device::cpu;
  Buffer q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k, workspace;

  std::size_t bytes() const;  // all of them together
};

// Allocates the tensors of `layout` on `device` (no workspace yet); "" or the error.
std::string allocate_tensors(const Layout& layout, const RunConfig& config, flashattn::Device device,
                             Tensors* tensors);

// Fills q, k, v, dout with normal random numbers (host tensors) and writes the cu_seqlens.
void fill_inputs(const Layout& layout, const RunConfig& config, Tensors* host);

// Copies the inputs (q, k, v, dout, cu_seqlens) from host to device tensors, and back the outputs.
std::string copy_inputs(const Tensors& host, Tensors* device);
std::string copy_outputs(const Tensors& device, Tensors* host, bool backward);

// The public argument structs over `tensors` (the workspace included).
flashattn::ForwardArgs forward_args(const Layout& layout, const RunConfig& config, const Tensors& t, void* stream);
flashattn::BackwardArgs backward_args(const Layout& layout, const RunConfig& config, const Tensors& t, void* stream);

}  // namespace fa_cli
