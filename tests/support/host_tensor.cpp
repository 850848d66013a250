#include "support/host_tensor.hpp"

#include <cstring>
#include <limits>
#include <stdexcept>

#include "cpu/convert.hpp"

namespace fa_test {

const char* to_string(Strides s) {
  switch (s) {
    case Strides::contiguous: return "contiguous";
    case Strides::padded: return "padded";
    case Strides::permuted: return "permuted";
  }
  return "?";
}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape, Strides strides) : dtype_(dtype) {
  if (shape.empty() || shape.size() > 4) throw std::invalid_argument("HostTensor: rank must be 1..4");
  rank_ = static_cast<int>(shape.size());
  for (int i = 0; i < rank_; ++i) shape_[i] = shape[i];
  const int r = rank_;
  // Row-major order of dimensions, outermost first; `permuted` swaps rows and heads (dims r−3, r−2).
  int order[4] = {0, 1, 2, 3};
  if (strides == Strides::permuted && r >= 3) std::swap(order[r - 3], order[r - 2]);
  int64_t s = 1;
  for (int k = r - 1; k >= 0; --k) {
    const int dim = order[k];
    stride_[dim] = s;
    int64_t pad = 0;
    if (strides != Strides::contiguous && k > 0) pad = 8 * (r - k);  // 8, 16, 24 elements
    s = s * shape_[dim] + pad;
  }
  const int64_t n = numel();
  int64_t extent = 0;
  if (n > 0) {
    for (int i = 0; i < r; ++i) extent += (shape_[i] - 1) * stride_[i];
    extent += 1;
  }
  const int64_t elems = extent + 2 * kGuard;
  bytes_.assign(static_cast<std::size_t>(elems) * flashattn::element_size(dtype), 0xFF);
  in_view_.assign(static_cast<std::size_t>(elems), 0);
  if (n > 0) for_each_view_element(shape, 0, kGuard, &in_view_);
}

void HostTensor::for_each_view_element(const std::vector<int64_t>& shape, int dim, int64_t base,
                                       std::vector<char>* mark) const {
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (dim + 1 == rank_) {
      (*mark)[static_cast<std::size_t>(base + i * stride_[dim])] = 1;
    } else {
      for_each_view_element(shape, dim + 1, base + i * stride_[dim], mark);
    }
  }
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return rank_ == 0 ? 0 : n;
}

std::size_t HostTensor::view_byte_offset() const { return kGuard * flashattn::element_size(dtype_); }

TensorView HostTensor::view_at(void* base, flashattn::Device device) const {
  TensorView t;
  t.data = static_cast<unsigned char*>(base) + view_byte_offset();  // non-null even when empty
  t.dtype = dtype_;
  t.device = device;
  t.rank = rank_;
  for (int i = 0; i < rank_; ++i) {
    t.shape[i] = shape_[i];
    t.stride[i] = stride_[i];
  }
  return t;
}

TensorView HostTensor::view() const {
  return view_at(const_cast<unsigned char*>(bytes_.data()), flashattn::Device::cpu);
}

int64_t HostTensor::offset(std::initializer_list<int64_t> index) const {
  if (static_cast<int>(index.size()) != rank_) throw std::invalid_argument("HostTensor: index rank");
  int64_t o = 0;
  int i = 0;
  for (int64_t x : index) {
    if (x < 0 || x >= shape_[i]) throw std::out_of_range("HostTensor: index out of range");
    o += x * stride_[i++];
  }
  return o;
}

double HostTensor::get(std::initializer_list<int64_t> index) const { return get_at(offset(index)); }

void HostTensor::set(std::initializer_list<int64_t> index, double value) { set_at(offset(index), value); }

double HostTensor::get_at(int64_t off) const {
  const void* base = bytes_.data() + view_byte_offset();
  if (dtype_ == DType::i32) return static_cast<const int32_t*>(base)[off];
  return flashattn::load_as_float(base, dtype_, off);
}

void HostTensor::set_at(int64_t off, double value) {
  void* base = bytes_.data() + view_byte_offset();
  if (dtype_ == DType::i32) {
    static_cast<int32_t*>(base)[off] = static_cast<int32_t>(value);
  } else {
    flashattn::store_from_float(base, dtype_, off, static_cast<float>(value));
  }
}

std::vector<int64_t> HostTensor::element_offsets() const {
  std::vector<int64_t> offsets;
  const int64_t n = numel();
  offsets.reserve(static_cast<size_t>(n));
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat, off = 0;
    for (int i = rank_ - 1; i >= 0; --i) {
      off += (rest % shape_[i]) * stride_[i];
      rest /= shape_[i];
    }
    offsets.push_back(off);
  }
  return offsets;
}

int32_t HostTensor::get_i32(int64_t i) const {
  return reinterpret_cast<const int32_t*>(bytes_.data() + view_byte_offset())[i * stride_[0]];
}

void HostTensor::fill_normal(Rng& rng, double stddev) {
  poison();
  for (std::size_t e = 0; e < in_view_.size(); ++e) {
    if (in_view_[e]) flashattn::store_from_float(bytes_.data(), dtype_, static_cast<int64_t>(e),
                                                 static_cast<float>(stddev * rng.normal()));
  }
}

void HostTensor::fill_i32(const std::vector<int32_t>& values) {
  if (dtype_ != DType::i32 || rank_ != 1 || static_cast<int64_t>(values.size()) != shape_[0]) {
    throw std::invalid_argument("HostTensor::fill_i32: needs a rank-1 i32 tensor of matching size");
  }
  for (std::size_t i = 0; i < values.size(); ++i) set({static_cast<int64_t>(i)}, values[i]);
}

void HostTensor::poison() { std::memset(bytes_.data(), 0xFF, bytes_.size()); }

void HostTensor::snapshot() { saved_ = bytes_; }

bool HostTensor::unchanged() const { return saved_ == bytes_; }

int64_t HostTensor::gap_bytes_changed() const {
  const std::size_t es = flashattn::element_size(dtype_);
  int64_t n = 0;
  for (std::size_t b = 0; b < bytes_.size(); ++b) {
    if (!in_view_[b / es] && (b >= saved_.size() || bytes_[b] != saved_[b])) ++n;
  }
  return n;
}

}  // namespace fa_test
