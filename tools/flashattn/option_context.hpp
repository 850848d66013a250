// The command-line option behind the argument a library message names, so an error says which
// option to change ("--headdim 12: hdim_qk ... = 12 is not supported: ...").
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace fa_cli {

// (a word of the library's messages, the options that set it as the user typed them)
using OptionNeedles = std::vector<std::pair<std::string, std::string>>;

// "OPTION: " for the needle found first in `message` (the score options of the option table
// included), or "" when none is there.
std::string option_context(const std::string& message, OptionNeedles needles,
                           const flashattn::AttentionOptions& attention);

}  // namespace fa_cli
