// Test-only knobs, set explicitly by a test binary (tests/support/main.cpp takes them as flags),
// never read from the environment by the library: plan as if the GPU were another one, so that
// paths a given GPU would not take (the A100's tiles on a Hopper GPU, a split tail on 3 SMs) are
// tested too. Zero keeps the device's own value. The CPU's choice of products for bf16 inputs can be
// forced the same way, so both of its paths run on every machine, and so can the decode family's
// choice between its own kernel and the forward for a KV-cache call, so both run every case, and how
// its kernel loads K/V.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>

namespace flashattn::testing {

struct DeviceOverrides {
  int num_sms = 0;     // plan grids for this many multiprocessors
  int smem_optin = 0;  // plan tiles for this much opt-in shared memory per block (bytes)
};

// Which products the CPU backend runs bf16 inputs on: automatic (bf16 where the CPU multiplies bf16
// natively, float elsewhere), always float (the tiles widened), or always bf16 (on a float loop where
// the CPU has no bf16 kernels: slow, for tests).
enum class CpuProducts { automatic = 0, f32 = 1, bf16 = 2 };

// Which attention the decode family gives a KV-cache call the forward can run (decode/forward_route.hpp):
// chosen by the number of query rows, always the forward, or always the decode kernel.
enum class KVCacheRoute { automatic = 0, forward = 1, decode = 2 };

// How the decode family's attention kernel loads K/V (decode/shape.cuh's AttendLoads): its own
// choice, cp.async chunks by every thread, TMA boxes (sm_90), or cp.async chunks by a producer
// warpgroup (sm_90).
enum class DecodeLoads { automatic = 0, cp_async = 1, tma = 2, producer_cp_async = 3 };

// Each knob's values by name, one table for the test binaries' flags (tests/support/main.cpp) and
// Python's setters (python/csrc/binding.cpp).
template <class Value>
struct Named {
  const char* name;
  Value value;
};
inline constexpr Named<CpuProducts> kCpuProductsNames[] = {
    {"auto", CpuProducts::automatic}, {"f32", CpuProducts::f32}, {"bf16", CpuProducts::bf16}};
inline constexpr Named<KVCacheRoute> kKVCacheRouteNames[] = {
    {"auto", KVCacheRoute::automatic}, {"forward", KVCacheRoute::forward}, {"decode", KVCacheRoute::decode}};
inline constexpr Named<DecodeLoads> kDecodeLoadsNames[] = {
    {"auto", DecodeLoads::automatic}, {"cp_async", DecodeLoads::cp_async}, {"tma", DecodeLoads::tma},
    {"producer_cp_async", DecodeLoads::producer_cp_async}};

// The value called `name` in `table`, or nullptr.
template <class Value, std::size_t N>
const Value* value_named(const Named<Value> (&table)[N], std::string_view name) {
  for (const Named<Value>& n : table) {
    if (name == n.name) return &n.value;
  }
  return nullptr;
}

// The table's names, quoted and comma-separated (for the message that refuses any other).
template <class Value, std::size_t N>
std::string names_of(const Named<Value> (&table)[N]) {
  std::string names;
  for (const Named<Value>& n : table) names += std::string(names.empty() ? "\"" : ", \"") + n.name + "\"";
  return names;
}

inline std::atomic<int>& override_slot(int which) {
  static std::atomic<int> slots[5] = {};
  return slots[which];
}
inline void set_device_overrides(const DeviceOverrides& o) {
  override_slot(0).store(o.num_sms, std::memory_order_relaxed);
  override_slot(1).store(o.smem_optin, std::memory_order_relaxed);
}
inline DeviceOverrides device_overrides() {
  return {override_slot(0).load(std::memory_order_relaxed), override_slot(1).load(std::memory_order_relaxed)};
}

inline void set_cpu_products(CpuProducts c) { override_slot(2).store(static_cast<int>(c), std::memory_order_relaxed); }
inline CpuProducts cpu_products() { return static_cast<CpuProducts>(override_slot(2).load(std::memory_order_relaxed)); }

inline void set_kvcache_route(KVCacheRoute r) { override_slot(3).store(static_cast<int>(r), std::memory_order_relaxed); }
inline KVCacheRoute kvcache_route() { return static_cast<KVCacheRoute>(override_slot(3).load(std::memory_order_relaxed)); }

inline void set_decode_loads(DecodeLoads l) { override_slot(4).store(static_cast<int>(l), std::memory_order_relaxed); }
inline DecodeLoads decode_loads() { return static_cast<DecodeLoads>(override_slot(4).load(std::memory_order_relaxed)); }

}  // namespace flashattn::testing
