// Host conversions between the storage dtypes (fp16, bf16) and float, with no dependency.
// Round-to-nearest-even on the way down, as the GPU's __float2half_rn / __float2bfloat16_rn; NaN
// stays NaN, overflow goes to ±inf.
#pragma once

#include <cstdint>
#include <cstring>

#include "flashattn/flashattn.hpp"

namespace flashattn {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// Branch-free (three results, one selected), so that loops over it vectorize (tile_math's
// widen_f16); integer operations and an exact int → float conversion only: subnormal halves come out
// exact even where the FPU flushes subnormal floats (DAZ), since none is ever formed.
inline float f16_to_float(uint16_t h) {
  const uint32_t exp = h & 0x7c00u, man = h & 0x3ffu, sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t normal = (static_cast<uint32_t>(h & 0x7fffu) << 13) + (112u << 23);  // exponent rebiased 15 → 127
  const uint32_t special = 0x7f800000u | (man << 13);                                // inf / NaN, payload kept
  const uint32_t subnormal = float_to_bits(static_cast<float>(man) * (1.0f / 16777216.0f));  // man · 2^-24, or 0
  return bits_to_float(sign | (exp == 0x7c00u ? special : exp == 0 ? subnormal : normal));
}

inline uint16_t float_to_f16(float f) {
  uint32_t u = float_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // ≥ 65520 rounds to inf
  if (a < 0x38800000u) {  // below the smallest normal (2^-14): subnormal or zero
    // value in units of 2^-24, rounded to nearest even by the float addition trick
    float v = bits_to_float(a) + 0.5f;  // 0.5 = 2^-1; ulp of v at this magnitude is 2^-24
    return static_cast<uint16_t>(sign | (float_to_bits(v) - float_to_bits(0.5f)));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);  // rebias 127 → 15, round to even
  return static_cast<uint16_t>(sign | (r >> 13));
}

// Load element i of a buffer of `dtype` (f32, f16, bf16) as float.
inline float load_as_float(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// Store a float as element i of a buffer of `dtype`, rounding to nearest even.
inline void store_from_float(void* base, DType dtype, int64_t i, float x) {
  switch (dtype) {
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_f16(x); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16(x); break;
    default: static_cast<float*>(base)[i] = x; break;
  }
}

// Round a float to the precision of `dtype` (identity for f32).
inline float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::f16: return f16_to_float(float_to_f16(x));
    case DType::bf16: return bf16_to_float(float_to_bf16(x));
    default: return x;
  }
}

}  // namespace flashattn
