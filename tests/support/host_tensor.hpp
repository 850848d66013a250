// Host tensors with chosen strides, for the library's [.., rows, heads, dim] views.
//
// The storage holds the view plus gaps: guard elements before and after it, and (for the padded
// and permuted layouts) the padding between rows and heads. Gaps are filled with NaN, so a kernel
// that reads outside the view gets NaN into its output, and outputs can be checked for writes
// outside the view (the gap bytes must come back unchanged).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "support/seed.hpp"

namespace fa_test {

using flashattn::DType;
using flashattn::TensorView;

enum class Strides {
  contiguous,  // row-major
  padded,      // row-major, every non-last stride padded (head, row and batch strides)
  permuted,    // rank ≥ 3: heads outside rows in memory ([b, h, s, d] viewed as [b, s, h, d]), padded rows
};
const char* to_string(Strides strides);

class HostTensor {
 public:
  static constexpr int64_t kGuard = 16;  // gap elements before and after the view

  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape, Strides strides = Strides::contiguous);

  bool valid() const { return rank_ > 0; }
  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  int64_t shape(int i) const { return shape_[i]; }
  int64_t stride(int i) const { return stride_[i]; }
  int64_t numel() const;
  std::size_t storage_bytes() const { return bytes_.size(); }
  void* storage() { return bytes_.data(); }
  const void* storage() const { return bytes_.data(); }
  std::size_t view_byte_offset() const;  // where element 0 of the view lies in the storage

  // The view on the host, or (view_at) with the same strides over another copy of the storage.
  TensorView view() const;
  TensorView view_at(void* storage_base, flashattn::Device device) const;

  int64_t offset(std::initializer_list<int64_t> index) const;  // in elements, from element 0
  double get(std::initializer_list<int64_t> index) const;
  void set(std::initializer_list<int64_t> index, double value);  // rounded to the dtype
  int32_t get_i32(int64_t i) const;
  // Element access by offset (from element 0), and the offsets of all view elements in index order.
  double get_at(int64_t offset) const;
  void set_at(int64_t offset, double value);  // rounded to the dtype
  std::vector<int64_t> element_offsets() const;

  void fill_normal(Rng& rng, double stddev = 1.0);  // view ~ N(0, stddev²) in the dtype; gaps NaN
  void fill_i32(const std::vector<int32_t>& values);  // rank-1 i32 tensors
  void poison();                                      // every byte 0xFF: NaN in f32, f16, bf16

  void snapshot();                    // remember the current bytes
  bool unchanged() const;             // all bytes as at snapshot()
  int64_t gap_bytes_changed() const;  // bytes outside the view that differ from the snapshot

 private:
  void for_each_view_element(const std::vector<int64_t>& shape, int dim, int64_t base, std::vector<char>* mark) const;

  DType dtype_ = DType::f32;
  int rank_ = 0;
  int64_t shape_[4] = {0, 0, 0, 0}, stride_[4] = {0, 0, 0, 0};
  std::vector<unsigned char> bytes_, saved_;
  std::vector<char> in_view_;  // per storage element: part of the view
};

}  // namespace fa_test
