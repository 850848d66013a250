// The vector math of the tile loop, on transposed score tiles: st[j * kBlockM + i] is the score of
// query i (a column) against key j (a row). The keys are the left operand of S = K·Qᵀ as stored, so
// K and V are read in place (tile.hpp's RowBlock), and every per-query quantity (running max, sum,
// rescale factor, LSE, D) is a vector along a tile row: the softmax needs no horizontal reductions.
//
// Defined out of line in tile_math.cpp and compiled for several instruction sets (GCC's
// target_clones; the loader picks the widest the CPU has, once): a wheel built without -march keeps
// AVX2 / AVX-512 speed here. One source of the math for all of them.
#pragma once

#include <cstdint>

namespace flashattn::cpu {

// The score-level options as the tiles apply them (score.hpp: the one place they are read on the
// CPU); the loops here call them per element, inlined into each clone.
struct ScoreTransform;
struct ScoreChain;

// Columns of a transposed score tile (query rows of a block) and its rows (keys of a block).
constexpr int64_t kBlockM = 64;
constexpr int64_t kBlockN = 64;

// st = transform(st) (q·k → the score: scaled, and capped when asked), keys × queries.
void finish_scores(float* st, int64_t keys, int64_t queries, const ScoreTransform& transform);

// Online softmax: fold a masked score tile into each query's running max m, sum ℓ (relative to m)
// and output accumulator acc_t[c * kBlockM + i] (transposed, dv rows), and turn the scores into
// P = exp(S − m_new). ℓ and acc were summed against m_old, so both are rescaled by exp(m_old − m_new).
void fold_scores(float* st, int64_t keys, int64_t queries, float* running_max, float* running_sum, float* acc_t,
                 int64_t dv);

// Epilogue of a query block: out[i * dv + c] = acc_t[c * kBlockM + i] / ℓ_i, and lse_i = m_i + log ℓ_i
// (lse may be null). A query that saw no key has ℓ = 0: out = 0, lse = +inf, as flash-attn.
void finish_output(const float* acc_t, int64_t dv, int64_t queries, const float* running_max,
                   const float* running_sum, float* out, float* lse);

// The same two steps on a score tile laid out the other way, rows × keys (s[i * kBlockN + j]; the
// decode's products, attend_decode.hpp, whose few query rows make the keys the vector dimension)
// with the output accumulator as rows (acc[i * dv + c]): fold_score_rows is fold_scores, P = exp(S −
// m_new) into s; finish_rows is finish_output, O = acc / ℓ in place.
void fold_score_rows(float* s, int64_t rows, int64_t keys, float* running_max, float* running_sum, float* acc,
                     int64_t dv);
void finish_rows(float* acc, int64_t dv, int64_t rows, const float* running_max, const float* running_sum,
                 float* lse);

// Backward recomputation on one tile: P = exp(S − LSE) (masked scores, −inf, give 0) into st, and
// dS = P∘(dP − D) times the score transform's slope d(score)/d(q·k) (chain) into dpt, which holds dP
// on entry.
void probs_and_dscores(float* st, float* dpt, int64_t keys, int64_t queries, const float* lse, const float* delta,
                       const ScoreChain& chain);

// dst[c * kBlockM + i] = src[i * ld + c]: rows [0, queries) × columns [0, cols) of a row-major
// float block transposed into a tile with kBlockM columns. transpose_into_tile (matmul.cpp) runs on
// libxsmm's transpose when the build has it (1.8 × these loops on a 64 × 128 block, AVX-512), on
// transpose_into_tile_loops otherwise.
void transpose_into_tile(float* dst, const float* src, int64_t ld, int64_t queries, int64_t cols);
void transpose_into_tile_loops(float* dst, const float* src, int64_t ld, int64_t queries, int64_t cols);
// The same for 32-bit words (bf16 pairs) read from `src` at word stride ld, on libxsmm only: false
// (nothing written) without it.
bool transpose_words_into_tile(uint32_t* dst, const void* src, int64_t ld, int64_t queries, int64_t cols);

// dst[i * ld + c] = Σ_s parts[s][c * kBlockM + i]: the transposed tiles of `parts` split partial sums
// (in order of s), back to rows.
void sum_transposed_tiles(float* dst, int64_t ld, const float* const* parts, int64_t n_parts, int64_t queries,
                          int64_t cols);

// Probabilities and dS rounded to bf16 for the bf16 products (matmul_acc_bf16), from a float tile of
// `rows` rows × `cols` columns (row stride lds), with zeros where the products' even k pads the tile:
// round_tile_bf16 writes the plain tile dst[r * ldd + c] with columns [cols, cols_even) zero (the
// products' A); pack_pairs_bf16 writes rows in pairs (their B): word dst[(r / 2) * ldd + c] holds
// rows r (low half) and r + 1 (high half) of column c, the row past an odd `rows` zero.
void round_tile_bf16(uint16_t* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols,
                     int64_t cols_even);
void pack_pairs_bf16(uint32_t* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols);

// dst[c] = even[c] | odd[c] << 16 (odd null: 0), c < n: two rows of bf16 interleaved into pairs.
void interleave_bf16(uint32_t* dst, const uint16_t* even, const uint16_t* odd, int64_t n);

// dst[c] = src[c] widened from bf16 / f16 bits, c < n (the f32 case does not come here).
void widen_bf16(float* dst, const uint16_t* src, int64_t n);
void widen_f16(float* dst, const uint16_t* src, int64_t n);

// Which instruction set the dispatched clones run on here: "x86-64-v4" (AVX-512), "x86-64-v3"
// (AVX2 + FMA) or "baseline"; for the benchmark's record.
const char* tile_math_isa();

}  // namespace flashattn::cpu
