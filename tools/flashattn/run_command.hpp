// `flashattn run`: set up the problem, time the call, measure memory, check, report.
#pragma once

#include <string>
#include <vector>

namespace fa_cli {

// Exit codes of the tool.
enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,
  kExitBadOptions = 2,  // a bad option, or a configuration the library does not support
  kExitRunFailed = 3,   // the call or the CUDA runtime failed (cuda_error, internal)
};

int run_command(const std::vector<std::string>& args);

}  // namespace fa_cli
