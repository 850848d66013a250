#include "api/select.hpp"

#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"

namespace flashattn {

// Fastest first. Adding a family: its folder, one line here, its sources in the build. sm90 runs
// only on compute capability 9.0; its backward in "auto" only for the calls its plan lets "auto"
// have (Plan::in_auto: where it measured faster than sm80's); whatever it refuses, "auto" finds in
// the next family.
const std::vector<const Family*>& family_table() {
  static const std::vector<const Family*> kFamilies = {&cuda::sm90_family(), &cuda::sm80_family(),
                                                       &cuda::decode_family(), &cpu::family()};
  return kFamilies;
}

namespace {

bool is_auto(std::string_view path) { return path.empty() || path == "auto"; }

std::string known_paths(const std::vector<const Family*>& table) {
  std::string s = "auto";
  for (const Family* f : table) s += std::string(", ") + f->name;
  return s;
}

template <class Params>
Status select_in(const std::vector<const Family*>& table, const Params& p, std::string_view path, Plan* plan) {
  *plan = Plan{};
  Status first_reason = Status::unsupported(std::string("device: no kernel family runs ") + to_string(p.device) +
                                            " tensors in this build");
  bool named = false, tried = false;
  for (const Family* f : table) {
    if (!is_auto(path) && path != f->name) continue;
    if (is_auto(path) && !chosen_by_auto<Params>(*f)) continue;
    named = true;
    if (f->device != p.device) {
      if (!is_auto(path)) {
        return Status::unsupported("path = \"" + std::string(path) + "\" runs " + to_string(f->device) +
                                   " tensors; these are on " + to_string(p.device));
      }
      continue;
    }
    const Direction<Params>& d = direction_of<Params>(*f);
    if (d.plan == nullptr) {  // this family does not offer the call at all
      Status none = Status::unsupported("path = \"" + std::string(f->name) + "\" has no " +
                                        direction_name<Params>() + " kernels");
      if (!is_auto(path)) return none;
      if (!tried) first_reason = none;
      tried = true;
      continue;
    }
    *plan = Plan{};  // nothing of a family that refused reaches the next one's plan
    Status s = d.plan(p, plan);
    if (s.ok() && (plan->in_auto || !is_auto(path))) {
      plan->family = f;
      return s;
    }
    if (s.ok()) {
      s = Status::unsupported("path = \"auto\": the " + std::string(f->name) + " " + direction_name<Params>() +
                              " runs this call only when named (path = \"" + f->name + "\")");
    }
    if (!tried) first_reason = s;
    tried = true;
  }
  if (!named) {
    return Status::invalid("path = \"" + std::string(path) + "\" is not a kernel family of this build (" +
                           known_paths(table) + ")");
  }
  *plan = Plan{};
  return first_reason;
}

}  // namespace

Status select(const FwdParams& p, std::string_view path, Plan* plan) { return select_in(family_table(), p, path, plan); }
Status select(const BwdParams& p, std::string_view path, Plan* plan) { return select_in(family_table(), p, path, plan); }
Status select(const KVCacheParams& p, std::string_view path, Plan* plan) {
  return select_in(family_table(), p, path, plan);
}

namespace testing {
Status select_from(const std::vector<const Family*>& table, const FwdParams& p, std::string_view path, Plan* plan) {
  return select_in(table, p, path, plan);
}
}  // namespace testing

}  // namespace flashattn
