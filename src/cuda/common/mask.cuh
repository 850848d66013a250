// The attention mask as the kernels use it: which keys a query row sees, which key blocks a query
// tile must visit (and the converse, for the backward), and which (query tile, key tile) pairs need
// per-element masking (applied to mma fragments by sm80/hooks.cuh).
//
// Rule (flash-attn's, aligned bottom-right; see include/flashattn/flashattn.hpp): within one
// sequence, query row i (0 ≤ i < seqlen_q) may see key j iff
//     0 ≤ j < seqlen_k
//     and (left  < 0 or j ≥ i + diag − left)          diag = seqlen_k − seqlen_q
//     and (right < 0 or j ≤ i + diag + right)         causal is right = 0
// so row i sees exactly the keys [key_begin(i), key_end(i)) (empty when key_begin ≥ key_end: a
// fully masked row, which the kernels turn into out = 0, lse = +inf).
//
// All arithmetic is 32-bit: the host clamps the windows with clamp_window() and requires
// seqlens ≤ kMaxSeqlen, so every sum below stays far from overflow. Everything is usable on the
// host too (FLASHATTN_HD), which is how tests/cuda checks it against brute force.
#pragma once

#include <cstdint>

#include "cuda/common/host_device.cuh"

namespace flashattn::cuda {

// Longest sequence (query or key) the CUDA kernels accept; checked on the host.
inline constexpr int64_t kMaxSeqlen = int64_t{1} << 28;
// A window at least this wide is the same as an unbounded one for any accepted sequence length.
inline constexpr int64_t kWindowUnbounded = int64_t{1} << 29;

// MaskParams' int64 window (< 0: unbounded) → the kernels' int (< 0: unbounded, else ≤ 2^29).
FLASHATTN_HD constexpr int clamp_window(int64_t w) {
  return w < 0 ? -1 : static_cast<int>(w < kWindowUnbounded ? w : kWindowUnbounded);
}

FLASHATTN_HD constexpr int imin(int a, int b) { return a < b ? a : b; }
FLASHATTN_HD constexpr int imax(int a, int b) { return a > b ? a : b; }
// ceil(a / b) for a ≥ 0, b > 0.
FLASHATTN_HD constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

struct Mask {
  int seqlen_q = 0, seqlen_k = 0;  // of this sequence (varlen: per sequence)
  int left = -1, right = -1;       // clamped windows, < 0 unbounded (causal: right = 0)

  FLASHATTN_HD constexpr int diag() const { return seqlen_k - seqlen_q; }

  // Keys visible to query row i: [key_begin(i), key_end(i)). May be empty (begin ≥ end).
  FLASHATTN_HD constexpr int key_begin(int i) const { return left < 0 ? 0 : imax(0, i + diag() - left); }
  FLASHATTN_HD constexpr int key_end(int i) const {
    return right < 0 ? seqlen_k : imax(0, imin(seqlen_k, i + diag() + right + 1));
  }
  FLASHATTN_HD constexpr bool visible(int i, int j) const { return j >= key_begin(i) && j < key_end(i); }

  // Query rows that see key j: [query_begin(j), query_end(j)) within [0, seqlen_q) (the converse
  // of the rule above: j ≤ i + diag + right ⇔ i ≥ j − diag − right, and j ≥ i + diag − left ⇔
  // i ≤ j − diag + left). Empty for j ≥ seqlen_k.
  FLASHATTN_HD constexpr int query_begin(int j) const { return right < 0 ? 0 : imax(0, j - diag() - right); }
  FLASHATTN_HD constexpr int query_end(int j) const {
    if (j >= seqlen_k) return 0;
    return left < 0 ? seqlen_q : imax(0, imin(seqlen_q, j - diag() + left + 1));
  }

  // ---- forward: key blocks of width bn that the query tile [m0, m0 + bm) must visit --------------
  // [n_block_begin, n_block_end); empty (end ≤ begin) when every row of the tile is fully masked.
  // Rows ≥ seqlen_q are ignored (the tile's last row is clipped to the sequence).
  FLASHATTN_HD constexpr int n_block_begin(int m0, int bn) const {
    return left < 0 ? 0 : imax(0, m0 + diag() - left) / bn;
  }
  FLASHATTN_HD constexpr int n_block_end(int m0, int bm, int bn) const {
    const int last_row = imin(m0 + bm, seqlen_q) - 1;
    const int key_stop = right < 0 ? seqlen_k : imax(0, imin(seqlen_k, last_row + diag() + right + 1));
    return ceil_div(key_stop, bn);
  }

  // ---- backward: query blocks of height bm that the key tile [n0, n0 + bn) must visit ------------
  // [m_block_begin, m_block_end); empty when no query row sees any key of the tile.
  FLASHATTN_HD constexpr int m_block_begin(int n0, int bm) const {
    return right < 0 ? 0 : imax(0, n0 - diag() - right) / bm;
  }
  FLASHATTN_HD constexpr int m_block_end(int n0, int bn, int bm) const {
    if (n0 >= seqlen_k) return 0;
    const int last_key = imin(n0 + bn, seqlen_k) - 1;
    const int row_stop = left < 0 ? seqlen_q : imax(0, imin(seqlen_q, last_key - diag() + left + 1));
    return ceil_div(row_stop, bm);
  }
  // How many query blocks the key tile at n0 visits (0 when none): the backward's loop length per
  // query head, as its plan counts it (sm80/bwd_plan.cu; the kernel writes the same difference with
  // its m_block_begin at hand: through this function its PTX changed).
  FLASHATTN_HD constexpr int m_block_count(int n0, int bn, int bm) const {
    return imax(0, m_block_end(n0, bn, bm) - m_block_begin(n0, bm));
  }

  // The highest key block of width bn that visits the query tile at m0 (height bm) under a
  // right-bounded mask, consistent with m_block_begin (key block n visits it only if
  // n·bn ≤ m0 + bm − 1 + diag + right) and m_block_end (monotone in n, so if key block n visits the
  // tile, every key block up to this one does): the backward's deterministic dQ order counts from
  // it. Only for tiles some key block visits, so the division sees a non-negative value.
  FLASHATTN_HD constexpr int last_n_block_visiting(int m0, int bm, int bn) const {
    return imin(ceil_div(seqlen_k, bn) - 1, (m0 + bm - 1 + diag() + right) / bn);
  }

  // Whether the tile pair (queries [m0, m0 + bm), keys [n0, n0 + bn)) holds any invisible element
  // with a query row < seqlen_q, i.e. whether per-element masking is needed there. Conservative in
  // one way only: it may say true for a tile that is all visible, never false for one that isn't.
  // It also reports keys ≥ seqlen_k (the partial last key block).
  FLASHATTN_HD constexpr bool tile_needs_mask(int m0, int bm, int n0, int bn) const {
    if (n0 + bn > seqlen_k) return true;                              // keys past the end
    if (right >= 0 && n0 + bn - 1 > m0 + diag() + right) return true;  // right edge: first row binds
    const int last_row = imin(m0 + bm, seqlen_q) - 1;
    if (left >= 0 && n0 < last_row + diag() - left) return true;       // left edge: last row binds
    return false;
  }
};

// -inf for masked scores; the softmax maps it to probability 0 and never computes −inf − (−inf).
inline constexpr float kMaskedScore = -__builtin_huge_valf();

}  // namespace flashattn::cuda
