// The one selection function. supports(), the workspace queries and the run path all call
// select(), so what is reported as supported is exactly what runs, and each call plans once.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "backend/family.hpp"

namespace flashattn {

// The families, in the order "auto" tries them.
const std::vector<const Family*>& family_table();

// Plans params on the family `path` names, or on the first family of the table that runs the
// params' device and accepts them ("auto" or empty). Not ok: why nothing can run them (for "auto",
// the first family's reason for the device: the fastest one's).
Status select(const FwdParams& params, std::string_view path, Plan* plan);
Status select(const BwdParams& params, std::string_view path, Plan* plan);
Status select(const KVCacheParams& params, std::string_view path, Plan* plan);

namespace testing {
// select() over another table than the build's (host tests of the selection rule with stand-in families).
Status select_from(const std::vector<const Family*>& table, const FwdParams& params, std::string_view path, Plan* plan);
}  // namespace testing

}  // namespace flashattn
