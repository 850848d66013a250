// The one selection function. supports(), the workspace queries and the run path all call
// select(), so what is reported as supported is exactly what runs.
#pragma once

#include <cstddef>

#include "api/params.hpp"

namespace flashattn {

using ForwardFn = Status (*)(const FwdParams&);
using BackwardFn = Status (*)(const BwdParams&);

struct ForwardPlan {
  Status status;             // ok, or why no kernel can run these params
  const char* path = "";     // kernel family: "cpu", "sm80", ...
  ForwardFn run = nullptr;
  std::size_t workspace_bytes = 0;
};

struct BackwardPlan {
  Status status;
  const char* path = "";
  BackwardFn run = nullptr;
  std::size_t workspace_bytes = 0;
};

ForwardPlan select(const FwdParams& params);
BackwardPlan select(const BwdParams& params);

}  // namespace flashattn
