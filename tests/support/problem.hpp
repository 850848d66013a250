// A test case: its shape and options (Case), its host tensors (Problem), and running the library
// on a backend with every output poisoned beforehand.
//
// Adding a differential case is one line in a case list, e.g.
//   Case::padded(2, 113, 203, 4, 2, 64).with(DType::f16).causal_mask().layout(Strides::padded)
//   Case::varlen({5, 0, 130}, {9, 40, 0}, 4, 1, 128).window(32, 8)
// Every case runs on every backend (cpu, cuda); a backend that is absent or does not support it
// skips with the reason.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "backend/params.hpp"
#include "support/device.hpp"
#include "support/host_tensor.hpp"

namespace fa_test {

using flashattn::Status;
using flashattn::StatusCode;

struct Case {
  int64_t batch = 1, seqlen_q = 1, seqlen_k = 1;  // varlen: seqlen_* are the maxima
  int64_t heads_q = 1, heads_kv = 1, hdim_qk = 64, hdim_v = 64;
  std::vector<int32_t> lens_q, lens_k;  // varlen when set: one entry per sequence
  int64_t extra_rows = 0;               // varlen: packed q and k rows after the last sequence
  int64_t page_size = 0;                // varlen: 0 packed keys; else the forward reads them paged
                                        // (block_table), pages shuffled over a pool, unused rows NaN
  DType dtype = DType::bf16;
  Strides strides = Strides::contiguous;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  std::optional<float> softmax_scale;
  bool deterministic = false;
  bool with_lse = true;              // the forward writes lse (the backward always needs it)
  bool zero_outside = false;         // varlen: zero_rows_outside_sequences (else those rows stay poisoned)
  int64_t sample_q = 0, sample_k = 0;  // compare on this many sampled rows (0: all rows)
  double input_stddev = 1.0;

  static Case padded(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q, int64_t heads_kv,
                     int64_t hdim_qk, int64_t hdim_v = -1);
  static Case varlen(std::vector<int32_t> lens_q, std::vector<int32_t> lens_k, int64_t heads_q, int64_t heads_kv,
                     int64_t hdim_qk, int64_t hdim_v = -1);
  Case with(DType d) const { Case c = *this; c.dtype = d; return c; }
  Case layout(Strides s) const { Case c = *this; c.strides = s; return c; }
  Case causal_mask() const { Case c = *this; c.causal = true; return c; }
  Case window(int64_t left, int64_t right) const { Case c = *this; c.window_left = left; c.window_right = right; return c; }
  Case cap(float softcap_) const { Case c = *this; c.softcap = softcap_; return c; }
  Case scale(float s) const { Case c = *this; c.softmax_scale = s; return c; }
  Case det() const { Case c = *this; c.deterministic = true; return c; }
  Case no_lse() const { Case c = *this; c.with_lse = false; return c; }
  Case zero_rows_outside() const { Case c = *this; c.zero_outside = true; return c; }
  Case extra(int64_t rows) const { Case c = *this; c.extra_rows = rows; return c; }
  Case paged(int64_t page) const { Case c = *this; c.page_size = page; return c; }
  Case sample(int64_t q_rows, int64_t k_rows) const { Case c = *this; c.sample_q = q_rows; c.sample_k = k_rows; return c; }
  Case stddev(double s) const { Case c = *this; c.input_stddev = s; return c; }

  bool is_varlen() const { return !lens_q.empty(); }
  bool is_paged() const { return page_size > 0; }
  int64_t total_q() const;
  int64_t total_k() const;
  std::string name() const;  // unique, GoogleTest-safe: b2_q113_k203_h4x2_d64_bf16_causal_padded
};
std::ostream& operator<<(std::ostream& os, const Case& c);

struct Problem {
  Case c;
  HostTensor q, k, v, dout;          // inputs, ~ N(0, stddev²)
  HostTensor cu_q, cu_k;             // varlen offsets
  HostTensor out, lse, dq, dk, dv;   // outputs, poisoned before each call
  // A paged case: k and v copied into page pools [num_pages, page_size, heads_kv, d] (pages in a
  // shuffled order, rows no sequence uses NaN) and the block_table [batch, max_pages] that maps them
  // (entries past a sequence's pages hold out-of-range indices: they must never be read).
  HostTensor k_pages, v_pages, block_table;

  // The call as the case makes it (paged k, v when the case is paged).
  flashattn::ForwardArgs forward_args(DeviceMirror& m) const;
  // The same call on the packed keys: what the reference reads (a paged case's gathered keys).
  flashattn::ForwardArgs packed_forward_args(DeviceMirror& m) const;
  flashattn::BackwardArgs backward_args(DeviceMirror& m) const;
  // Validated params over the host tensors (packed keys), for the reference and for reading results.
  flashattn::FwdParams host_forward_params() const;
  flashattn::BwdParams host_backward_params() const;
};
Problem make_problem(const Case& c, Rng& rng);

// What a call on a backend returned: supports(), the call (only run when supported), and any
// asynchronous device error seen after it.
struct CallResult {
  Status support;
  Status status;
  std::string device_error;
};
// Poisons out and lse, runs forward() on `backend`, brings the outputs back to the host tensors.
CallResult run_forward(Backend backend, Problem& p);
// Poisons dq, dk, dv, runs backward() with the host out, lse (from run_forward) and dout.
CallResult run_backward(Backend backend, Problem& p);

}  // namespace fa_test

// In a test body: run a call; skip when the backend does not support the case, fail on an error.
#define FA_RUN_OR_SKIP(call)                                                                        \
  do {                                                                                              \
    const ::fa_test::CallResult fa_r_ = (call);                                                     \
    if (fa_r_.support.code == ::flashattn::StatusCode::not_supported) GTEST_SKIP() << fa_r_.support.message; \
    ASSERT_TRUE(fa_r_.support.ok()) << "supports(): " << fa_r_.support.message;                     \
    ASSERT_TRUE(fa_r_.status.ok()) << #call ": code " << static_cast<int>(fa_r_.status.code) << ", "   \
                                   << fa_r_.status.message;                                        \
    ASSERT_EQ(fa_r_.device_error, "");                                                              \
  } while (0)
