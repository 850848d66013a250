// `flashattn run`: set up the problem, time the call, measure memory, check, report.
#pragma once

#include <string>
#include <vector>

#include "exit_code.hpp"

namespace fa_cli {

int run_command(const std::vector<std::string>& args);

}  // namespace fa_cli
