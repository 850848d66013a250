// The operands of the bf16 products (matmul.hpp's matmul_acc_bf16) read from bf16 rows (tile.hpp's
// row addressings), and the choice of those products. A product's left operand A is a plain bf16
// block (rows as stored, or transposed); its right operand B comes in row pairs, one 32-bit word per
// two rows of a column (the VNNI layout). Where the reduction length k is odd, the products run on
// k + 1 with a zero row of B and a zero column of A, which the loaders here write.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/testing.hpp"
#include "cpu/matmul.hpp"
#include "cpu/tile.hpp"

namespace flashattn::cpu {

// Whether a call multiplies in bf16: bf16 inputs with even head dims on a CPU with native bf16 dot
// products (or where a test forces it). P and dS are then rounded to bf16 before their products, as
// the GPU kernels and the reference's same-precision yardstick do; every sum stays float.
// K and V are read in place by the products, so their rows must not overlap (a stride below the head
// dim, which no real layout has, takes the float path).
inline bool bf16_products(const FwdParams& p) {
  if (p.dtype != DType::bf16 || p.hdim_qk % 2 != 0 || p.hdim_v % 2 != 0) return false;
  if (p.k_row_stride < p.hdim_qk || p.v_row_stride < p.hdim_v) return false;
  switch (testing::cpu_products()) {
    case testing::CpuProducts::f32: return false;
    case testing::CpuProducts::bf16: return true;
    default: return bf16_products_native();
  }
}

constexpr int64_t round_up_even(int64_t n) { return n + (n & 1); }

// A block of bf16 rows as a product's A reads it: row r, column c at data[r * ld + c].
struct Bf16Block {
  const uint16_t* data;
  int64_t ld;
};

template <class Rows>
const uint16_t* bf16_row(const Rows& src, int64_t row) {
  return static_cast<const uint16_t*>(src.data) + src.at(row);
}

// Rows [row0, row0 + rows) × columns [0, cols): in place when they lie at one stride, else gathered
// into `tile` [rows][cols] (pages).
template <class Rows>
Bf16Block bf16_block(const Rows& src, int64_t row0, int64_t rows, int64_t cols, uint16_t* tile) {
  if (src.uniform(row0, rows) && (rows == 1 || src.row_stride >= cols))
    return {bf16_row(src, row0), rows == 1 ? cols : src.row_stride};
  for (int64_t r = 0; r < rows; ++r) std::copy_n(bf16_row(src, row0 + r), cols, tile + r * cols);
  return {tile, cols};
}

// The transpose of rows [row0, row0 + rows) × columns [0, cols): dst[c * ldd + r], with column
// `rows` zero when rows is odd (A of a product whose k is the rows).
template <class Rows>
void load_transposed_bf16(uint16_t* dst, int64_t ldd, const Rows& src, int64_t row0, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = bf16_row(src, row0 + r);
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = row[c];
  }
  if (rows % 2 != 0)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + rows] = 0;
}

// Rows [row0, row0 + rows) in pairs (B of a product whose k is the rows): word dst[(r / 2) * ldd + c]
// holds column c of row r (low half) and of row r + 1 (high half; zero past an odd `rows`).
template <class Rows>
void load_pairs(uint32_t* dst, int64_t ldd, const Rows& src, int64_t row0, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r += 2)
    interleave_bf16(dst + r / 2 * ldd, bf16_row(src, row0 + r), r + 1 < rows ? bf16_row(src, row0 + r + 1) : nullptr,
                    cols);
}

// The transpose of rows [row0, row0 + rows) × columns [0, cols) (cols even) in pairs, as a tile with
// kBlockM columns (B of a product whose k is the columns, e.g. Qᵀ in Sᵀ = K·Qᵀ): word
// dst[(c / 2) * kBlockM + r] holds columns c (low half) and c + 1 (high half) of row r.
// A pair of columns is a 32-bit word of a row, so rows that lie at one even stride from a 4-byte
// boundary (all of them, or each page's run of a paged block) are transposed as words
// (transpose_words_into_tile, on libxsmm); other rows element by element.
template <class Rows>
void load_pairs_transposed(uint32_t* dst, const Rows& src, int64_t row0, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows;) {
    int64_t n = 1;  // the run of rows from r at one stride
    while (r + n < rows && src.uniform(row0 + r, n + 1)) ++n;
    const uint16_t* first = bf16_row(src, row0 + r);
    const bool words = reinterpret_cast<uintptr_t>(first) % 4 == 0 && (n == 1 || src.row_stride % 2 == 0);
    if (!words || !transpose_words_into_tile(dst + r, first, n == 1 ? cols / 2 : src.row_stride / 2, n, cols / 2)) {
      for (int64_t i = r; i < r + n; ++i) {
        const uint16_t* row = bf16_row(src, row0 + i);
        for (int64_t w = 0; w < cols / 2; ++w) dst[w * kBlockM + i] = row[2 * w] | uint32_t{row[2 * w + 1]} << 16;
      }
    }
    r += n;
  }
}

}  // namespace flashattn::cpu
