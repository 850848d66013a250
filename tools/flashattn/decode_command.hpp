// `flashattn decode`: one KV-cache call (flash_attn_with_kvcache) of a few query tokens per
// sequence against a cache, timed, its K/V read rate set beside a plain copy's, and checked.
#pragma once

#include <string>
#include <vector>

#include "exit_code.hpp"

namespace fa_cli {

int decode_command(const std::vector<std::string>& args);

}  // namespace fa_cli
