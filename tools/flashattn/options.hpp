// The options of `flashattn run` and `flashattn decode` as typed on the command line, before
// defaults are resolved (config.hpp). The parser is table-driven: one row per option gives the
// commands that take it, its name, value kind, help and setter, and the same table prints each
// command's --help, so the two cannot drift.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace fa_cli {

enum class Command { run, decode };
const char* command_name(Command command);  // "run", "decode"

enum class Backend { automatic, cpu, cuda };

// Rotary embedding of the decode call (KVCacheArgs::rotary_cos/sin): off, or the pairs it turns.
enum class Rotary { none, interleaved, half };

// Both commands' options; the table says which command takes which (a field the other command
// does not take keeps its default).
struct Options {
  // Sizes: nullopt = not given (the backend's default applies).
  std::optional<int64_t> batch, heads, heads_kv;
  std::optional<int64_t> seqlen, seqlen_q, seqlen_k;
  std::optional<int64_t> headdim, headdim_v;
  std::optional<flashattn::DType> dtype;

  // The score and mask options, filled whole by their flags (the rows of options.cpp's table that
  // set it) and passed to the library as they are: a new option is a field there and a row in the
  // table.
  flashattn::AttentionOptions attention;

  // run only
  bool varlen = false;
  bool backward = false;
  bool deterministic = false;

  // decode only
  std::optional<int64_t> new_rows;   // rows of k_new / v_new appended to the cache (default 0)
  std::optional<int64_t> page_size;  // 0: a contiguous cache; else paged
  Rotary rotary = Rotary::none;
  int64_t num_splits = 0;  // 0: the family chooses

  Backend backend = Backend::automatic;
  std::string path = "auto";  // the kernel family (AttentionArgs::path): "auto" or one of families()
  std::optional<int64_t> repeats, warmup;
  bool check = true;
  uint64_t seed = 0;
  bool json = false;
  int64_t threads = 0;  // 0: OpenMP's default
  bool quiet = false;   // no progress on stderr
  bool help = false;
};

// Parses the arguments after the command's name. On failure returns false and sets *error to a
// message naming the option and value ("--headdim abc: not an integer").
bool parse_options(Command command, const std::vector<std::string>& args, Options* options, std::string* error);

// The text of `flashattn run --help` and `flashattn decode --help`.
std::string run_usage();
std::string decode_usage();

// A score-level option (a field of AttentionOptions that transforms the scores S) as the report
// shows it: its name in the library (the JSON key, and the word the library's messages use for it),
// the flag that sets it, and its value (0: off). The report and the error messages list them from
// the option table, so a new one is a row there and nothing else in the CLI.
struct ScoreOptionValue {
  const char* name;  // the AttentionOptions field
  const char* flag;  // the option that sets it
  double value;
};
std::vector<ScoreOptionValue> score_option_values(const flashattn::AttentionOptions& options);

}  // namespace fa_cli
