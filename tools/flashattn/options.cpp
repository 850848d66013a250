#include "options.hpp"

#include <cerrno>
#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "config.hpp"

namespace fa_cli {
namespace {

using Setter = std::function<bool(const std::string& value, Options* o, std::string* why)>;

struct OptionRow {
  unsigned commands;    // kRun, kDecode or both (below)
  const char* name;     // "--batch"
  const char* metavar;  // nullptr: a flag that takes no value
  std::string help;
  Setter set;
  // A score-level option (score_option_values): the library's name for its field, and its value.
  const char* score_name = nullptr;
  double (*score_value)(const flashattn::AttentionOptions&) = nullptr;
};

bool parse_int(const std::string& s, int64_t* out, std::string* why) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0') return *why = "not an integer", false;
  if (errno == ERANGE) return *why = "out of range", false;
  *out = v;
  return true;
}

bool parse_float(const std::string& s, float* out, std::string* why) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') return *why = "not a number", false;
  if (errno == ERANGE || !std::isfinite(v) || std::fabs(v) > 3.0e38) return *why = "not a finite float", false;
  *out = static_cast<float>(v);
  return true;
}

// A positive size option (--batch, --seqlen, ...).
Setter size_option(std::optional<int64_t> Options::*field) {
  return [field](const std::string& v, Options* o, std::string* why) {
    int64_t x;
    if (!parse_int(v, &x, why)) return false;
    if (x < 1) return *why = "must be >= 1", false;
    o->*field = x;
    return true;
  };
}

Setter count_option(std::optional<int64_t> Options::*field, int64_t min) {
  return [field, min](const std::string& v, Options* o, std::string* why) {
    int64_t x;
    if (!parse_int(v, &x, why)) return false;
    if (x < min) return *why = "must be >= " + std::to_string(min), false;
    o->*field = x;
    return true;
  };
}

Setter flag(bool Options::*field, bool value) {
  return [field, value](const std::string&, Options* o, std::string*) {
    o->*field = value;
    return true;
  };
}

// The values --path takes, from the library: "auto<sep>sm80<sep>cpu".
std::string path_names(const char* sep = ", ") {
  std::string s = "auto";
  for (const std::string& f : flashattn::families()) s += sep + f;
  return s;
}

bool set_dtype(const std::string& v, Options* o, std::string* why) {
  if (v == "f32" || v == "fp32" || v == "float32") o->dtype = flashattn::DType::f32;
  else if (v == "f16" || v == "fp16" || v == "float16") o->dtype = flashattn::DType::f16;
  else if (v == "bf16" || v == "bfloat16") o->dtype = flashattn::DType::bf16;
  else return *why = "not one of f32, f16, bf16", false;
  return true;
}

bool set_backend(const std::string& v, Options* o, std::string* why) {
  if (v == "auto") o->backend = Backend::automatic;
  else if (v == "cpu") o->backend = Backend::cpu;
  else if (v == "cuda") o->backend = Backend::cuda;
  else return *why = "not one of auto, cpu, cuda", false;
  return true;
}

// "auto" or a kernel family of this build, as the library lists them.
bool set_path(const std::string& v, Options* o, std::string* why) {
  const std::vector<std::string> names = flashattn::families();
  if (v != "auto" && std::find(names.begin(), names.end(), v) == names.end()) {
    return *why = "not a kernel family of this build (one of " + path_names() + ")", false;
  }
  o->path = v;
  return true;
}

bool set_window(const std::string& v, Options* o, std::string* why) {
  auto comma = v.find(',');
  if (comma == std::string::npos) return *why = "expected L,R (two integers >= -1, -1: unbounded)", false;
  int64_t l, r;
  if (!parse_int(v.substr(0, comma), &l, why) || !parse_int(v.substr(comma + 1), &r, why)) {
    return *why = "expected L,R (two integers >= -1, -1: unbounded)", false;
  }
  if (l < -1 || r < -1) return *why = "each side must be >= -1 (-1: unbounded)", false;
  o->attention.window_left = l;
  o->attention.window_right = r;
  return true;
}

bool set_softcap(const std::string& v, Options* o, std::string* why) {
  float x;
  if (!parse_float(v, &x, why)) return false;
  if (x < 0.f) return *why = "must be >= 0 (0: off)", false;
  o->attention.softcap = x;
  return true;
}

bool set_scale(const std::string& v, Options* o, std::string* why) {
  float x;
  if (!parse_float(v, &x, why)) return false;
  o->attention.softmax_scale = x;
  return true;
}

bool set_seed(const std::string& v, Options* o, std::string* why) {
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || v[0] == '-') return *why = "not a non-negative integer", false;
  if (errno == ERANGE) return *why = "out of range", false;
  o->seed = x;
  return true;
}

bool set_threads(const std::string& v, Options* o, std::string* why) {
  int64_t x;
  if (!parse_int(v, &x, why)) return false;
  if (x < 1 || x > 4096) return *why = "must be between 1 and 4096", false;
  o->threads = x;
  return true;
}

// Which commands take an option (OptionRow::commands).
enum : unsigned { kRun = 1u << 0, kDecode = 1u << 1, kBoth = kRun | kDecode };

unsigned bit_of(Command command) { return command == Command::run ? kRun : kDecode; }

bool set_rotary(const std::string& v, Options* o, std::string* why) {
  if (v == "interleaved") o->rotary = Rotary::interleaved;
  else if (v == "half") o->rotary = Rotary::half;
  else if (v == "none") o->rotary = Rotary::none;
  else return *why = "not one of interleaved, half, none", false;
  return true;
}

bool set_num_splits(const std::string& v, Options* o, std::string* why) {
  int64_t x;
  if (!parse_int(v, &x, why)) return false;
  if (x < 0 || x > 1024) return *why = "must be between 0 and 1024 (0: chosen from the shapes)", false;
  o->num_splits = x;
  return true;
}

// Both commands' rows, in the order each command's --help lists its own. An option whose help
// differs between the commands has one row per command.
const std::vector<OptionRow>& table() {
  static const std::vector<OptionRow> rows = {
      {kBoth, "--batch", "N", "batch size (sequences)", size_option(&Options::batch)},
      {kBoth, "--heads", "N", "query heads", size_option(&Options::heads)},
      {kRun, "--heads-kv", "N", "key/value heads (divides --heads; fewer = GQA/MQA; default: --heads)",
       size_option(&Options::heads_kv)},
      {kDecode, "--heads-kv", "N", "key/value heads of the cache (divides --heads; fewer = GQA/MQA)",
       size_option(&Options::heads_kv)},
      {kRun, "--seqlen", "N", "query and key sequence length", size_option(&Options::seqlen)},
      {kRun, "--seqlen-q", "N", "query sequence length (overrides --seqlen)", size_option(&Options::seqlen_q)},
      {kRun, "--seqlen-k", "N", "key/value sequence length (overrides --seqlen)", size_option(&Options::seqlen_k)},
      {kDecode, "--seqlen-k", "N", "keys cached per sequence before the call (cache capacity: N + --new)",
       size_option(&Options::seqlen_k)},
      {kDecode, "--seqlen-q", "N", "query tokens per sequence (default 1; 2..8: speculative decoding)",
       size_option(&Options::seqlen_q)},
      {kDecode, "--new", "N", "rows of k_new/v_new appended to the cache by the call (default 0, as\n"
       "                      flash_attn_with_kvcache without k, v)", count_option(&Options::new_rows, 0)},
      {kBoth, "--headdim", "D", "head dim of q, k (and v unless --headdim-v)", size_option(&Options::headdim)},
      {kBoth, "--headdim-v", "D", "head dim of v and out (default: --headdim)", size_option(&Options::headdim_v)},
      {kBoth, "--dtype", "T", "f32 | f16 | bf16 (default: f32 on cpu, bf16 on cuda)", set_dtype},
      {kDecode, "--page-size", "N", "0: a contiguous cache (default); N: paged, pages of N keys shuffled\n"
       "                      over the pool (block_table)", count_option(&Options::page_size, 0)},
      {kDecode, "--rotary", "R", "interleaved | half | none: rotary embedding of q and the appended keys\n"
       "                      (half: GPT-NeoX pairs i, i + d/2; default none)", set_rotary},
      {kBoth, "--causal", nullptr, "causal mask, aligned bottom-right when seqlen_q != seqlen_k",
       [](const std::string&, Options* o, std::string*) {
         o->attention.causal = true;
         return true;
       }},
      {kBoth, "--window", "L,R", "local attention: keys i+diag-L .. i+diag+R (-1: unbounded side)", set_window},
      {kBoth, "--softcap", "X", "soft cap: S = X*tanh(S/X) (0: off)", set_softcap, "softcap",
       [](const flashattn::AttentionOptions& o) { return static_cast<double>(o.softcap); }},
      {kBoth, "--scale", "X", "softmax scale (default: 1/sqrt(headdim))", set_scale},
      {kRun, "--varlen", nullptr,
       "variable lengths: each sequence 1..seqlen tokens (random), packed with cu_seqlens",
       flag(&Options::varlen, true)},
      {kRun, "--backward", nullptr, "time the backward (the forward runs once, untimed, for out and lse)",
       flag(&Options::backward, true)},
      {kRun, "--deterministic", nullptr, "deterministic backward (bitwise reproducible dq, dk, dv)",
       flag(&Options::deterministic, true)},
      {kDecode, "--num-splits", "N", "key-range splits of a split-KV family (0: chosen from the shapes;\n"
       "                      the cpu family ignores it)", set_num_splits},
      {kBoth, "--backend", "B", "auto | cpu | cuda (auto: cuda when a CUDA device is available, else cpu)",
       set_backend},
      {kBoth, "--path", "F", "kernel family: " + path_names(" | ") +
       " (auto: the first that runs the call; a family\n"
       "                      implies its backend when --backend is auto)", set_path},
      {kBoth, "--repeats", "N", "timed calls (default: 5 on cpu, 30 on cuda)", count_option(&Options::repeats, 1)},
      {kBoth, "--warmup", "N", "untimed calls before them (default: 1 on cpu, 5 on cuda)",
       count_option(&Options::warmup, 0)},
      {kBoth, "--check", nullptr, "compare with the float64 reference (default)", flag(&Options::check, true)},
      {kBoth, "--no-check", nullptr, "skip the comparison", flag(&Options::check, false)},
      {kBoth, "--seed", "N", "random seed of the inputs (default 0)", set_seed},
      {kBoth, "--threads", "N", "CPU threads (OpenMP) for the cpu backend and the check", set_threads},
      {kBoth, "--json", nullptr, "print one JSON object on stdout instead of text", flag(&Options::json, true)},
      {kBoth, "--quiet", nullptr, "no progress lines on stderr", flag(&Options::quiet, true)},
      {kBoth, "--help", nullptr, "this text", flag(&Options::help, true)},
  };
  return rows;
}

// The row of `name` that `command` takes; nullptr when none (*other: another command takes it).
const OptionRow* find_row(Command command, const std::string& name, bool* other) {
  *other = false;
  for (const auto& r : table()) {
    if (name != r.name) continue;
    if (r.commands & bit_of(command)) return &r;
    *other = true;
  }
  return nullptr;
}

// The option lines of a command's --help.
std::string option_lines(Command command) {
  std::ostringstream s;
  for (const auto& r : table()) {
    if (!(r.commands & bit_of(command))) continue;
    std::string left = std::string("  ") + r.name + (r.metavar ? std::string(" ") + r.metavar : "");
    s << left << std::string(left.size() < 22 ? 22 - left.size() : 1, ' ') << r.help << "\n";
  }
  return s.str();
}

const char* kExitCodes =
    "exit status: 0 ok, 1 the check failed, 2 bad option or unsupported configuration,\n"
    "3 the call or the CUDA runtime failed.\n";

}  // namespace

const char* command_name(Command command) { return command == Command::run ? "run" : "decode"; }

bool parse_options(Command command, const std::vector<std::string>& args, Options* options, std::string* error) {
  const std::string see = std::string(" (see flashattn ") + command_name(command) + " --help)";
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    bool inline_value = false;
    if (auto eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (name == "-h") name = "--help";
    bool other_command = false;
    const OptionRow* row = find_row(command, name, &other_command);
    if (row == nullptr) {
      if (other_command) {
        *error = name + ": not an option of flashattn " + command_name(command) + see;
      } else {
        *error = name.rfind("-", 0) == 0 ? name + ": unknown option" + see
                                         : name + ": unexpected argument (options start with --)";
      }
      return false;
    }
    if (row->metavar == nullptr && inline_value) {
      *error = name + ": takes no value";
      return false;
    }
    if (row->metavar != nullptr && !inline_value) {
      if (i + 1 >= args.size()) {
        *error = name + ": missing value " + row->metavar;
        return false;
      }
      value = args[++i];
    }
    std::string why;
    if (!row->set(value, options, &why)) {
      *error = name + " " + value + ": " + why;
      return false;
    }
  }
  return true;
}

std::vector<ScoreOptionValue> score_option_values(const flashattn::AttentionOptions& options) {
  std::vector<ScoreOptionValue> values;
  for (const auto& r : table()) {
    if (r.score_value != nullptr) values.push_back({r.score_name, r.name, r.score_value(options)});
  }
  return values;
}

std::string run_usage() {
  std::ostringstream s;
  s << "usage: flashattn run [options]\n\n"
       "Runs one attention call (forward, or backward with --backward) on random normal inputs,\n"
       "times it, and checks it against a float64 reference.\n\n"
       "options:\n"
    << option_lines(Command::run);
  const Defaults cpu = defaults_for(flashattn::Device::cpu), gpu = defaults_for(flashattn::Device::cuda);
  auto shape = [](const Defaults& d) {
    std::ostringstream t;
    t << "--batch " << d.batch << " --heads " << d.heads << " --seqlen " << d.seqlen << " --headdim " << d.headdim
      << " --dtype " << flashattn::to_string(d.dtype);
    return t.str();
  };
  s << "\ndefaults: cpu  " << shape(cpu) << "\n"
    << "          cuda " << shape(gpu) << "\n"
    << "\n"
       "FLOPs count exactly the (query, key) pairs the mask leaves visible (so causal with\n"
       "seqlen_q = seqlen_k counts n(n+1)/2 pairs, a little over half): forward 2*pairs*(d_qk + d_v),\n"
       "backward 2*pairs*(3*d_qk + 2*d_v) (= 2.5x forward when d_qk = d_v); per head, summed.\n"
       "\n"
       "The check compares out and lse (and dq, dk, dv with --backward) with a float64 reference.\n"
       "Rule: max|out - ref| <= 2 * max|naive - ref| + atol, where naive is the plain algorithm in the\n"
       "same precision as the inputs and atol = 2 * the rounding error of the dtype near 0.3.\n"
       "Above 2^26 score entries (batch*heads*seqlen_q*seqlen_k) it checks 256 sampled query rows\n"
       "(out, lse, dq) and 256 key rows (dk, dv), every head of each; the backward reference still\n"
       "evaluates every query row once (for its lse), so it takes a while at long lengths.\n"
       "\n"
       "Memory: cpu reports peak RSS during the calls, the tensors the tool allocated, and the\n"
       "extra the library used (peak RSS during the calls - RSS before them); cuda reports device\n"
       "bytes allocated and the device memory in use. Both print the N x N fp32 score matrix a\n"
       "naive implementation would need, for comparison.\n"
       "\n"
    << kExitCodes;
  return s.str();
}

std::string decode_usage() {
  std::ostringstream s;
  s << "usage: flashattn decode [options]\n\n"
       "Runs one KV-cache call (flash_attn_with_kvcache) on random normal inputs: --seqlen-q query\n"
       "tokens per sequence against a cache of --seqlen-k keys per sequence (plus --new rows the call\n"
       "appends), times it, reports the rate it reads K and V at beside a plain copy's, and checks\n"
       "out and lse against a float64 reference.\n\n"
       "options:\n"
    << option_lines(Command::decode);
  auto shape = [](const DecodeDefaults& d) {
    std::ostringstream t;
    t << "--batch " << d.batch << " --heads " << d.heads << " --heads-kv " << d.heads_kv << " --seqlen-k "
      << d.seqlen_k << " --headdim " << d.headdim << " --dtype " << flashattn::to_string(d.dtype);
    return t.str();
  };
  s << "\ndefaults: cpu  " << shape(decode_defaults_for(flashattn::Device::cpu)) << "\n"
    << "          cuda " << shape(decode_defaults_for(flashattn::Device::cuda)) << "\n"
    << "          (--heads without --heads-kv: as many kv heads as query heads)\n"
       "\n"
       "TB/s = bytes of K and V read / time per call: the keys some query of a sequence sees (all\n"
       "--seqlen-k + --new of them unless a window cuts them) x heads_kv x (d_qk + d_v) x element size,\n"
       "summed over the sequences. Once per run the tool also times a plain copy on the same device\n"
       "(cuda: cudaMemcpyAsync of 1 GiB device to device; cpu: memcpy of 256 MiB over the threads),\n"
       "bytes read + written per second, and prints the call's rate as a percentage of it. A cache\n"
       "that fits the GPU's L2 (about 50 MB on an H200) may be read from L2 across calls: such a\n"
       "rate is not HBM bandwidth.\n"
       "\n"
       "The cache is contiguous [batch, capacity, heads_kv, d], or with --page-size N a pool of pages\n"
       "[pages, N, heads_kv, d], each sequence's pages drawn at random from it (block_table). Rows no\n"
       "sequence holds are NaN, so a read past a sequence's length fails the check. Each call is\n"
       "timed alone, its outputs poisoned with NaN before it (outside the timed region): CUDA events\n"
       "on a stream, or the wall clock; the median over --repeats is reported.\n"
       "\n"
       "The check compares out and lse with the float64 reference (reference::kvcache_forward) by\n"
       "run's rule: max|out - ref| <= 2 * max|naive - ref| + atol. Above 2^26 score entries\n"
       "(batch*heads*seqlen_q*keys) it checks whole sequences sampled (the first, the last, random\n"
       "ones), every query row and head of each.\n"
       "\n"
    << kExitCodes;
  return s.str();
}

}  // namespace fa_cli
