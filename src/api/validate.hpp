// Validation: public arguments → backend params. Every rule of the API lives here, once; a
// failure names the argument and the value at fault.
#pragma once

#include "backend/params.hpp"

namespace flashattn {

Status to_params(const ForwardArgs& args, FwdParams* params);
Status to_params(const BackwardArgs& args, BwdParams* params);
Status to_params(const KVCacheArgs& args, KVCacheParams* params);

}  // namespace flashattn
