// The backend contract, part 2: a kernel family as data. A family (sm90, sm80, decode, cpu)
// offers plan(params) → Plan or the reason it cannot run them, and run(plan, params). select()
// (src/api/select.cpp) walks one ordered table of families; supports(), the workspace query and the
// run all use the Plan it returns, computed once per call.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "backend/params.hpp"

namespace flashattn {

struct Family;

// What a family decided for one call: itself, the scratch the run needs, and its own details
// (instance, tiles, grid, workspace layout) in `detail`, which only the family reads.
struct Plan {
  static constexpr std::size_t kDetailBytes = 256;

  const Family* family = nullptr;
  std::size_t workspace_bytes = 0;
  // The run also works with no workspace at all (null, 0 bytes), only slower: then a caller that
  // neither passes one nor gives an allocator is served, not refused (the sm90 forward's tile
  // counter: without it, one CTA per tile). A workspace that is given must still be large enough.
  bool workspace_optional = false;
  // What the workspace's address must be a multiple of (the kernels' vector stores, atomics); the
  // API refuses any other by name before the run.
  std::size_t workspace_alignment = 1;
  // false: the family runs this call only when the call names it (path = name); "auto" goes on to
  // the next family. For a family faster than the next one for some of the calls it plans only
  // (the sm90 backward, per head dim): what Direction::in_auto says of all its calls, per call.
  bool in_auto = true;
  std::size_t detail_size = 0;  // bytes of `detail` the family's Detail fills (a family that runs
                                // another's plan inside its own keeps only these)
  alignas(16) unsigned char detail[kDetailBytes] = {};

  template <class Detail>
  void set(const Detail& d) {
    static_assert(std::is_trivially_copyable_v<Detail> && sizeof(Detail) <= kDetailBytes && alignof(Detail) <= 16,
                  "a family's plan detail is a small trivially copyable struct");
    std::memcpy(detail, &d, sizeof(Detail));
    detail_size = sizeof(Detail);
  }
  template <class Detail>
  Detail get() const {
    Detail d;
    std::memcpy(&d, detail, sizeof(Detail));
    return d;
  }
};

template <class Params>
struct Direction {
  // ok with *plan filled (workspace_bytes, detail), or the reason this family cannot run params.
  Status (*plan)(const Params& params, Plan* plan) = nullptr;
  // Runs params as planned; the workspace (params.workspace, ≥ plan.workspace_bytes, aligned to
  // plan.workspace_alignment) is checked (it may be null where plan.workspace_optional).
  Status (*run)(const Plan& plan, const Params& params) = nullptr;
  // false: this direction runs only when a call names the family (as Family::in_auto, for one
  // direction: the sm90 backward until its kernels have passed their tests on a GPU).
  bool in_auto = true;
};

struct Family {
  const char* name;  // what `path` names and reports show: "cpu", "sm80", ...
  Device device;     // whose tensors it runs
  Direction<FwdParams> forward;
  Direction<BwdParams> backward;
  Direction<KVCacheParams> kvcache;  // a family may leave a direction empty: select() skips it
  // false: chosen only when a call names it (path = name), never by "auto" -- a family whose
  // kernels have not yet passed their tests on a GPU stays out of users' way until they have.
  bool in_auto = true;
};

template <class Params>
const Direction<Params>& direction_of(const Family& f) {
  if constexpr (std::is_same_v<Params, BwdParams>) {
    return f.backward;
  } else if constexpr (std::is_same_v<Params, KVCacheParams>) {
    return f.kvcache;
  } else {
    return f.forward;
  }
}

// Whether path = "auto" may try this family for the call (both the family and its direction are in
// "auto"; else only a call naming the family runs it). The family's plan may still decline "auto"
// for the call (Plan::in_auto).
template <class Params>
bool chosen_by_auto(const Family& f) {
  return f.in_auto && direction_of<Params>(f).in_auto;
}

// The call's name in messages ("forward", "backward", "kvcache").
template <class Params>
constexpr const char* direction_name() {
  if constexpr (std::is_same_v<Params, BwdParams>) {
    return "backward";
  } else if constexpr (std::is_same_v<Params, KVCacheParams>) {
    return "kvcache";
  } else {
    return "forward";
  }
}

}  // namespace flashattn
