// The tensor-map builder (tensor_map.hpp): the driver's rules checked here first, so that a tensor
// TMA cannot tile gets a message that names the dimension at fault, then cuTensorMapEncodeTiled.
#include "cuda/sm90/tensor_map.hpp"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstring>
#include <string>

namespace flashattn::cuda::sm90 {
namespace {

constexpr int64_t kElementBytes = 2;           // f16 / bf16
constexpr int64_t kStrideAlignBytes = 16;      // global strides and the base address
constexpr int64_t kMaxStrideBytes = int64_t(1) << 40;
constexpr int64_t kMaxDim = int64_t(1) << 32;
constexpr int kMaxBox = 256;

std::string where(const char* who, int dim) { return std::string(who) + ": tensor map dimension " + std::to_string(dim); }

CUtensorMapSwizzle driver_swizzle(ptx::Swizzle s) {
  switch (s) {
    case ptx::Swizzle::b32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case ptx::Swizzle::b64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case ptx::Swizzle::b128: return CU_TENSOR_MAP_SWIZZLE_128B;
    case ptx::Swizzle::none: break;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

// The driver functions this file calls, looked up once per process. `error` says why one is missing.
struct DriverEntry {
  PFN_cuTensorMapEncodeTiled_v12000 encode_tiled = nullptr;
  PFN_cuGetErrorName_v6000 error_name = nullptr;
  std::string error;
};

template <class Fn>
void lookup(const char* symbol, unsigned int version, Fn* fn, std::string* error) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, version, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    if (error->empty()) {
      *error = std::string("the driver has no ") + symbol + " (" +
               (e != cudaSuccess ? cudaGetErrorName(e) : found == cudaDriverEntryPointVersionNotSufficent
                                                              ? "driver older than CUDA 12.0"
                                                              : "symbol not found") +
               ")";
    }
    return;
  }
  *fn = reinterpret_cast<Fn>(p);
}

const DriverEntry& driver_entry() {
  static const DriverEntry entry = [] {
    DriverEntry d;
    lookup("cuTensorMapEncodeTiled", 12000, &d.encode_tiled, &d.error);
    std::string unused;
    lookup("cuGetErrorName", 6000, &d.error_name, &unused);  // only for messages
    return d;
  }();
  return entry;
}

}  // namespace

Status check_tile_map(DType dtype, const TileMapSpec& spec, const char* who) {
  if (dtype != DType::f16 && dtype != DType::bf16) {
    return Status::invalid(std::string(who) + ": tensor maps here are for f16/bf16 tiles, not " + to_string(dtype));
  }
  if (spec.rank < 2 || spec.rank > kTileMapMaxRank) {
    return Status::invalid(std::string(who) + ": tensor map rank " + std::to_string(spec.rank) + " (2..5)");
  }
  if (spec.data == nullptr || reinterpret_cast<std::uintptr_t>(spec.data) % kStrideAlignBytes != 0) {
    return Status::unsupported(std::string(who) + ": TMA needs a 16-byte aligned data pointer");
  }
  const int swizzle_span = static_cast<int>(spec.swizzle);
  for (int i = 0; i < spec.rank; ++i) {
    if (spec.dims[i] < 1 || spec.dims[i] > kMaxDim) {
      return Status::unsupported(where(who, i) + ": extent " + std::to_string(spec.dims[i]) + " outside 1 .. 2^32");
    }
    if (spec.box[i] < 1 || spec.box[i] > kMaxBox) {
      return Status::invalid(where(who, i) + ": box " + std::to_string(spec.box[i]) + " outside 1 .. 256");
    }
    if (i == 0) {
      if (spec.strides[0] != 1) {
        return Status::unsupported(where(who, 0) + ": the innermost dimension must be contiguous (stride " +
                                   std::to_string(spec.strides[0]) + ")");
      }
      continue;
    }
    const int64_t bytes = spec.strides[i] * kElementBytes;
    if (spec.strides[i] < 1 || bytes % kStrideAlignBytes != 0 || bytes >= kMaxStrideBytes) {
      return Status::unsupported(where(who, i) + ": stride " + std::to_string(spec.strides[i]) +
                                 " is not a positive multiple of 8 elements (16 bytes) below 2^40 bytes");
    }
  }
  const int box_row_bytes = spec.box[0] * static_cast<int>(kElementBytes);
  if (box_row_bytes % kStrideAlignBytes != 0) {
    return Status::invalid(where(who, 0) + ": box " + std::to_string(spec.box[0]) +
                           " is not a multiple of 8 elements (16 bytes)");
  }
  if (spec.swizzle != ptx::Swizzle::none && box_row_bytes > swizzle_span) {
    return Status::invalid(where(who, 0) + ": box of " + std::to_string(box_row_bytes) + " bytes is wider than the " +
                           std::to_string(swizzle_span) + "-byte swizzle");
  }
  return Status::success();
}

namespace {

Status encode_tile_map(CUtensorMap* map, DType dtype, const TileMapSpec& spec, const char* who) {
  if (Status s = check_tile_map(dtype, spec, who); !s.ok()) return s;
  const DriverEntry& driver = driver_entry();
  if (driver.encode_tiled == nullptr) return {StatusCode::cuda_error, std::string(who) + ": " + driver.error};

  cuuint64_t dims[kTileMapMaxRank], strides_bytes[kTileMapMaxRank - 1];
  cuuint32_t box[kTileMapMaxRank], element_strides[kTileMapMaxRank];
  for (int i = 0; i < spec.rank; ++i) {
    dims[i] = static_cast<cuuint64_t>(spec.dims[i]);
    box[i] = static_cast<cuuint32_t>(spec.box[i]);
    element_strides[i] = 1;
    if (i > 0) strides_bytes[i - 1] = static_cast<cuuint64_t>(spec.strides[i] * kElementBytes);
  }
  // Out-of-bounds elements read as zeros (FLOAT_OOB_FILL_NONE); L2 promotion of 128 bytes: the
  // granularity every tile row here has.
  const CUresult r = driver.encode_tiled(
      map, dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      static_cast<cuuint32_t>(spec.rank), const_cast<void*>(spec.data), dims, strides_bytes, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, driver_swizzle(spec.swizzle), CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    if (driver.error_name == nullptr || driver.error_name(r, &name) != CUDA_SUCCESS || name == nullptr) name = "?";
    return {StatusCode::cuda_error, std::string(who) + ": cuTensorMapEncodeTiled failed: " + name + " (CUresult " +
                                        std::to_string(static_cast<int>(r)) + ")"};
  }
  return Status::success();
}


// The maps a thread encoded last, by everything that defines them (the address included), so that
// a caller reusing its buffers (a training loop, an inference server, a benchmark) skips the
// driver's encoding: a few microseconds per map, three per forward call. Thread-local: no lock.
struct MapKey {
  DType dtype;
  TileMapSpec spec;
  bool operator==(const MapKey& o) const {
    if (dtype != o.dtype || spec.data != o.spec.data || spec.rank != o.spec.rank || spec.swizzle != o.spec.swizzle) {
      return false;
    }
    for (int i = 0; i < spec.rank; ++i) {
      if (spec.dims[i] != o.spec.dims[i] || spec.strides[i] != o.spec.strides[i] || spec.box[i] != o.spec.box[i]) {
        return false;
      }
    }
    return true;
  }
};

class MapCache {
 public:
  const CUtensorMap* find(const MapKey& key) const {
    for (int i = 0; i < kEntries; ++i) {
      if (used_[i] && keys_[i] == key) return &maps_[i];
    }
    return nullptr;
  }
  void insert(const MapKey& key, const CUtensorMap& map) {
    keys_[next_] = key;
    maps_[next_] = map;
    used_[next_] = true;
    next_ = (next_ + 1) % kEntries;
  }

 private:
  static constexpr int kEntries = 16;
  MapKey keys_[kEntries] = {};
  CUtensorMap maps_[kEntries] = {};
  bool used_[kEntries] = {};
  int next_ = 0;
};

}  // namespace

Status make_tile_map(CUtensorMap* map, DType dtype, const TileMapSpec& spec, const char* who) {
  thread_local MapCache cache;
  const MapKey key{dtype, spec};
  if (const CUtensorMap* hit = cache.find(key)) {
    std::memcpy(map, hit, sizeof(CUtensorMap));
    return Status::success();
  }
  const Status s = encode_tile_map(map, dtype, spec, who);
  if (s.ok()) cache.insert(key, *map);
  return s;
}

}  // namespace flashattn::cuda::sm90
