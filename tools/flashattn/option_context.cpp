#include "option_context.hpp"

#include "options.hpp"

namespace fa_cli {

std::string option_context(const std::string& message, OptionNeedles needles,
                           const flashattn::AttentionOptions& attention) {
  for (const ScoreOptionValue& s : score_option_values(attention)) needles.emplace_back(s.name, s.flag);
  // The argument named first in the message wins.
  std::size_t best = std::string::npos;
  std::string option;
  for (const auto& [needle, opt] : needles) {
    const std::size_t at = message.find(needle);
    if (at < best) best = at, option = opt;
  }
  return option.empty() ? "" : option + ": ";
}

}  // namespace fa_cli
