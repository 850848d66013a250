// flashattn: the command-line tool. `flashattn run [options]` runs, times and checks one attention
// call on random inputs, `flashattn decode [options]` one KV-cache call; see their --help.
#include <cstdio>
#include <string>
#include <vector>

#include "decode_command.hpp"
#include "flashattn/flashattn.hpp"
#include "options.hpp"
#include "run_command.hpp"

namespace {

const char* kUsage =
    "usage: flashattn <command> [options]\n"
    "\n"
    "Exact attention computed the IO-aware way (FlashAttention): run, time and check it.\n"
    "\n"
    "commands:\n"
    "  run         run one forward (or --backward) call on random inputs, time it, check it\n"
    "              against a float64 reference (see flashattn run --help)\n"
    "  decode      run one KV-cache call (a few query tokens against a contiguous or paged\n"
    "              cache), time it in TB/s beside a plain copy, check it (flashattn decode --help)\n"
    "\n"
    "options:\n"
    "  --help      this text\n"
    "  --version   the version, and whether CUDA is built in and available\n"
    "\n"
    "exit status: 0 ok, 1 the check failed, 2 bad option or unsupported configuration,\n"
    "3 the call or the CUDA runtime failed.\n";

void print_version() {
#ifdef FLASHATTN_CLI_WITH_CUDA
  const char* built = "built with CUDA";
#else
  const char* built = "built without CUDA";
#endif
  std::string families;
  for (const std::string& f : flashattn::families()) families += (families.empty() ? "" : ", ") + f;
  std::printf("flashattn %s (%s; CUDA device %savailable; kernel families %s)\n", FLASHATTN_VERSION_STRING, built,
              flashattn::cuda_available() ? "" : "not ", families.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return fa_cli::kExitBadOptions;
  }
  const std::string& cmd = args[0];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    if (cmd == "help" && args.size() > 1 && args[1] == "run") {
      std::fputs(fa_cli::run_usage().c_str(), stdout);
    } else if (cmd == "help" && args.size() > 1 && args[1] == "decode") {
      std::fputs(fa_cli::decode_usage().c_str(), stdout);
    } else {
      std::fputs(kUsage, stdout);
    }
    return fa_cli::kExitOk;
  }
  if (cmd == "--version" || cmd == "version") {
    print_version();
    return fa_cli::kExitOk;
  }
  if (cmd == "run") return fa_cli::run_command(std::vector<std::string>(args.begin() + 1, args.end()));
  if (cmd == "decode") return fa_cli::decode_command(std::vector<std::string>(args.begin() + 1, args.end()));
  std::fprintf(stderr, "flashattn: %s: unknown command (see flashattn --help)\n", cmd.c_str());
  return fa_cli::kExitBadOptions;
}
