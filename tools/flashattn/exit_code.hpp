// The tool's exit codes, the same for every command, and the one a library Status maps to.
#pragma once

#include "flashattn/flashattn.hpp"

namespace fa_cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,
  kExitBadOptions = 2,  // a bad option, or a configuration the library does not support
  kExitRunFailed = 3,   // the call or the CUDA runtime failed (cuda_error, internal)
};

// A configuration the library rejects is the caller's to change (2); anything else failed (3).
inline int exit_code_of(const flashattn::Status& s) {
  return s.code == flashattn::StatusCode::invalid_argument || s.code == flashattn::StatusCode::not_supported
             ? kExitBadOptions
             : kExitRunFailed;
}

}  // namespace fa_cli
