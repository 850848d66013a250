// The attention mask of one sequence (causal / sliding window, flash-attn's rule) as the CPU tiles
// use it: which keys a query row sees, which key blocks a query block needs (block skipping), which
// query rows a key block is seen by (the backward's dK/dV pass), and the −inf fill of a score tile.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "backend/params.hpp"

namespace flashattn::cpu {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

struct Range {
  int64_t begin = 0, end = 0;  // [begin, end)
  bool empty() const { return end <= begin; }
};

// Query i (of len_q) sees key j (of len_k) iff  i + diag − left ≤ j ≤ i + diag + right,
// diag = len_k − len_q (bottom-right aligned), left/right < 0 meaning unbounded. Both bounds grow
// with i, so the keys of a block of rows are one range from the first row's start to the last
// row's end: that is what lets whole blocks be skipped.
// Rows are queries, or with rows_per_query = g > 1 the query heads of a GQA group packed query by
// query (row r: query r / g of head r % g, attend_decode.hpp): the rows of one query see the same
// keys, and the bounds still grow with the row.
class VisibleKeys {
 public:
  VisibleKeys(const MaskParams& mask, int64_t len_q, int64_t len_k, int64_t rows_per_query = 1)
      : len_q_(len_q),
        len_k_(len_k),
        diag_(len_k - len_q),
        left_(mask.window_left),
        right_(mask.window_right),
        per_query_(rows_per_query) {}

  // Keys row r sees, [first, last + 1) clamped to [0, len_k); empty for a fully masked row.
  Range keys_of_row(int64_t r) const { return {first_key(r / per_query_), last_key(r / per_query_) + 1}; }

  // Keys any of rows [rows.begin, rows.end) sees: the key blocks a query block visits.
  Range keys_of_rows(Range rows) const {
    if (rows.empty()) return {};
    return {first_key(rows.begin / per_query_), last_key((rows.end - 1) / per_query_) + 1};
  }

  // Rows that see any of keys [keys.begin, keys.end): the inverse of keys_of_rows.
  Range rows_of_keys(Range keys) const {
    if (keys.empty()) return {};
    int64_t begin = right_ < 0 ? 0 : std::max<int64_t>(0, keys.begin - diag_ - right_);
    int64_t end = left_ < 0 ? len_q_ : std::min(len_q_, keys.end - 1 - diag_ + left_ + 1);
    return {begin * per_query_, end * per_query_};
  }

  // Masking a transposed score tile: the scores of key j against rows [row0, row0 + rows) (one
  // tile row) become −inf where the row may not see the key.
  void mask_key(float* score_col, int64_t j, int64_t row0, int64_t rows) const {
    Range seen = rows_of_keys({j, j + 1});
    int64_t lo = std::clamp<int64_t>(seen.begin - row0, 0, rows);
    int64_t hi = std::clamp<int64_t>(seen.end - row0, lo, rows);
    std::fill(score_col, score_col + lo, kNegInf);
    std::fill(score_col + hi, score_col + rows, kNegInf);
  }

  // Masking: scores of row r (columns = keys [key0, key0 + cols)) it may not see become −inf.
  void mask_row(float* score_row, int64_t r, int64_t key0, int64_t cols) const {
    Range keys = keys_of_row(r);
    int64_t lo = std::clamp<int64_t>(keys.begin - key0, 0, cols);
    int64_t hi = std::clamp<int64_t>(keys.end - key0, lo, cols);
    std::fill(score_row, score_row + lo, kNegInf);
    std::fill(score_row + hi, score_row + cols, kNegInf);
  }

 private:
  int64_t first_key(int64_t i) const { return left_ < 0 ? 0 : std::max<int64_t>(0, i + diag_ - left_); }
  int64_t last_key(int64_t i) const { return right_ < 0 ? len_k_ - 1 : std::min(len_k_ - 1, i + diag_ + right_); }

  int64_t len_q_, len_k_, diag_, left_, right_, per_query_;
};

}  // namespace flashattn::cpu
