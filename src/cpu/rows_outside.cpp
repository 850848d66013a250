// Zeroes the packed rows no sequence covers (AttentionArgs::zero_rows_outside_sequences) in host
// tensors; the offsets were checked by validation (PackedRows clamps them as on the GPU).
#include <cstring>

#include "cpu/cpu_backend.hpp"

namespace flashattn::cpu {

Status zero_rows_outside(const PackedRows* rows, int count) {
  for (int i = 0; i < count; ++i) {
    const PackedRows& t = rows[i];
    const int64_t first = t.first(), last = t.last(first);
    auto* base = static_cast<char*>(t.base);
    const auto zero = [&](int64_t from, int64_t to) {
      for (int64_t row = from; row < to; ++row) {
        for (int64_t h = 0; h < t.heads; ++h) std::memset(base + row * t.row_stride + h * t.head_stride, 0, t.row_bytes);
      }
    };
    zero(0, first);
    zero(last, t.total);
  }
  return Status::success();
}

}  // namespace flashattn::cpu
