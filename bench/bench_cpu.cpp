// bench_cpu: GFLOP/s of flashattn's CPU backend, forward and backward, side by side in one process
// with the naive same-precision reference (reference::forward/backward, Precision::same), on the
// CPU grid of docs/cpu-benchmark.md. Writes one JSON file in the format of BENCHMARK.md (rows with
// "gflops" instead of "tflops") and prints a table.
//
//   bench_cpu [--out FILE] [--seqlens 512,1024,2048,4096,8192] [--hdims 64,128] [--dtype f32[,bf16]]
//             [--reps 5] [--threads N[,M]] [--batch 1] [--heads 2] [--modes fwd,bwd] [--causal both|0|1]
//             [--naive-budget 3] [--target 1] [--max-reps 50] [--check-bwd-max 2048]
//
// FLOPs (BENCHMARK.md): forward 4·b·h·sq·sk·d, halved for causal; backward 2.5 × forward.
// Timing: steady clock around the one call; a warm-up call first; then max(--reps, --target seconds
// worth, ≤ --max-reps) timed calls, median reported. Fresh normal random inputs per cell; outputs
// poisoned with NaN before every flashattn call; the backward is timed alone (its forward runs once,
// untimed). The naive reference runs only while its predicted time per call (scaled from the
// previous seqlen by the FLOP ratio) stays within --naive-budget seconds; other cells are "skipped".
// Each flashattn cell is checked after timing: no NaN left in any output, and the error rule against
// the float64 reference on sampled rows (forward always; backward up to --check-bwd-max, as the
// reference's backward recomputes a full forward).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "api/validate.hpp"
#include "cpu/convert.hpp"
#include "cpu/matmul.hpp"
#include "cpu/tile_math.hpp"
#include "cpu/reference.hpp"
#include "flashattn/flashattn.hpp"

namespace fa = flashattn;
namespace ref = flashattn::reference;

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "bench_cpu: %s\n", msg.c_str());
  std::exit(2);
}

void check(const fa::Status& s, const char* what) {
  if (!s.ok()) die(std::string(what) + ": " + s.message);
}

// ---- options ----------------------------------------------------------------------------------
struct Options {
  std::string out;
  std::vector<int64_t> seqlens{512, 1024, 2048, 4096, 8192};
  std::vector<int64_t> hdims{64, 128};
  std::vector<fa::DType> dtypes{fa::DType::f32};
  std::vector<std::string> modes{"fwd", "bwd"};
  std::vector<bool> causals{false, true};
  int reps = 5;              // at least this many timed calls
  int max_reps = 50;         // at most this many
  double target_s = 1.0;     // timed calls until this much time (within [reps, max_reps])
  std::vector<int> threads;  // thread counts to run, one pass each; empty: OpenMP's default
  int64_t batch = 1, heads = 2;
  double naive_budget_s = 3.0;
  int64_t check_bwd_max = 2048;
  uint64_t seed = 20261201;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) parts.push_back(item);
  }
  return parts;
}

int64_t parse_int(const std::string& s, const char* opt) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || v <= 0) die(std::string("bad value for ") + opt + ": " + s);
  return v;
}

double parse_double(const std::string& s, const char* opt) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !(v >= 0)) die(std::string("bad value for ") + opt + ": " + s);
  return v;
}

void usage() {
  std::printf(
      "usage: bench_cpu [--out FILE] [--seqlens 512,1024,2048,4096,8192] [--hdims 64,128]\n"
      "                 [--dtype f32|bf16|f32,bf16] [--reps 5] [--max-reps 50] [--target 1.0]\n"
      "                 [--threads N[,M]] [--batch 1] [--heads 2] [--modes fwd,bwd] [--causal both|0|1]\n"
      "                 [--naive-budget 3.0] [--check-bwd-max 2048] [--seed N]\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    }
    if (i + 1 >= argc) die("missing value for " + a);
    const std::string v = argv[++i];
    if (a == "--out") {
      o.out = v;
    } else if (a == "--seqlens") {
      o.seqlens.clear();
      for (const auto& p : split(v)) o.seqlens.push_back(parse_int(p, "--seqlens"));
    } else if (a == "--hdims") {
      o.hdims.clear();
      for (const auto& p : split(v)) o.hdims.push_back(parse_int(p, "--hdims"));
    } else if (a == "--dtype" || a == "--dtypes") {
      o.dtypes.clear();
      for (const auto& p : split(v)) {
        if (p == "f32")
          o.dtypes.push_back(fa::DType::f32);
        else if (p == "bf16")
          o.dtypes.push_back(fa::DType::bf16);
        else if (p == "f16" || p == "fp16")
          o.dtypes.push_back(fa::DType::f16);
        else
          die("bad --dtype: " + p);
      }
    } else if (a == "--modes") {
      o.modes.clear();
      for (const auto& p : split(v)) {
        if (p != "fwd" && p != "bwd") die("bad --modes: " + p);
        o.modes.push_back(p);
      }
    } else if (a == "--causal") {
      if (v == "both")
        o.causals = {false, true};
      else if (v == "0" || v == "false")
        o.causals = {false};
      else if (v == "1" || v == "true")
        o.causals = {true};
      else
        die("bad --causal: " + v);
    } else if (a == "--reps") {
      o.reps = static_cast<int>(parse_int(v, "--reps"));
    } else if (a == "--max-reps") {
      o.max_reps = static_cast<int>(parse_int(v, "--max-reps"));
    } else if (a == "--target") {
      o.target_s = parse_double(v, "--target");
    } else if (a == "--threads") {
      o.threads.clear();
      for (const auto& p : split(v)) o.threads.push_back(static_cast<int>(parse_int(p, "--threads")));
    } else if (a == "--batch") {
      o.batch = parse_int(v, "--batch");
    } else if (a == "--heads") {
      o.heads = parse_int(v, "--heads");
    } else if (a == "--naive-budget") {
      o.naive_budget_s = parse_double(v, "--naive-budget");
    } else if (a == "--check-bwd-max") {
      o.check_bwd_max = parse_int(v, "--check-bwd-max");
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(parse_int(v, "--seed"));
    } else {
      usage();
      die("unknown option " + a);
    }
  }
  o.max_reps = std::max(o.max_reps, o.reps);
  return o;
}

// ---- machine and run facts ---------------------------------------------------------------------
std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f) != nullptr) out += buf;
  pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string s = line.substr(colon + 1);
        s.erase(0, s.find_first_not_of(" \t"));
        return s;
      }
    }
  }
  return "unknown";
}

std::vector<double> load_avg() {
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  f >> a >> b >> c;
  return {a, b, c};
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&t));
  return buf;
}

// ---- buffers -----------------------------------------------------------------------------------
struct Buffer {
  std::unique_ptr<unsigned char[], void (*)(void*)> mem{nullptr, std::free};
  fa::DType dtype = fa::DType::f32;
  int64_t n = 0;

  Buffer() = default;
  Buffer(fa::DType dt, int64_t count) : dtype(dt), n(count) {
    const std::size_t bytes = (static_cast<std::size_t>(count) * fa::element_size(dt) + 63) / 64 * 64;
    mem.reset(static_cast<unsigned char*>(std::aligned_alloc(64, std::max<std::size_t>(bytes, 64))));
    if (!mem) die("out of memory");
  }
  void* data() const { return mem.get(); }

  void fill_normal(std::mt19937_64& rng) {
    std::normal_distribution<float> dist(0.f, 1.f);
    if (dtype == fa::DType::f32) {
      float* p = static_cast<float*>(data());
      for (int64_t i = 0; i < n; ++i) p[i] = dist(rng);
    } else {
      uint16_t* p = static_cast<uint16_t*>(data());
      for (int64_t i = 0; i < n; ++i) {
        const float x = dist(rng);
        p[i] = dtype == fa::DType::bf16 ? fa::float_to_bf16(x) : fa::float_to_f16(x);
      }
    }
  }
  void poison() {
    if (dtype == fa::DType::f32) {
      std::fill_n(static_cast<float*>(data()), n, std::numeric_limits<float>::quiet_NaN());
    } else {
      // Quiet NaN in both 16-bit formats' bit patterns.
      std::fill_n(static_cast<uint16_t*>(data()), n, dtype == fa::DType::bf16 ? uint16_t{0x7fc0} : uint16_t{0x7e00});
    }
  }
  int64_t count_nan() const {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      float x;
      if (dtype == fa::DType::f32)
        x = static_cast<const float*>(data())[i];
      else if (dtype == fa::DType::bf16)
        x = fa::bf16_to_float(static_cast<const uint16_t*>(data())[i]);
      else
        x = fa::f16_to_float(static_cast<const uint16_t*>(data())[i]);
      if (!std::isfinite(x)) ++bad;
    }
    return bad;
  }
};

// ---- timing ------------------------------------------------------------------------------------
using Clock = std::chrono::steady_clock;

struct Timing {
  bool ran = false;
  double median_s = 0, min_s = 0, max_s = 0;
  int reps = 0;
};

// One warm-up call, then reps timed calls, reps = clamp(target / warm-up time, min_reps, max_reps).
// `setup` (poisoning) runs before every call, outside the timed region.
template <class Setup, class Call>
Timing time_calls(Setup&& setup, Call&& call, int min_reps, int max_reps, double target_s, double* warm_s) {
  setup();
  auto t0 = Clock::now();
  call();
  *warm_s = std::chrono::duration<double>(Clock::now() - t0).count();
  int reps = min_reps;
  if (*warm_s > 0) reps = static_cast<int>(std::ceil(target_s / *warm_s));
  reps = std::min(std::max(reps, min_reps), max_reps);
  std::vector<double> times;
  times.reserve(reps);
  for (int r = 0; r < reps; ++r) {
    setup();
    t0 = Clock::now();
    call();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  Timing t;
  t.ran = true;
  t.reps = reps;
  t.median_s = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
  t.min_s = times.front();
  t.max_s = times.back();
  return t;
}

// ---- the results -------------------------------------------------------------------------------
struct Row {
  std::string impl, path, mode, dtype;
  bool causal = false;
  int64_t hdim = 0, seqlen = 0, batch = 0, heads = 0;
  int threads = 0;
  Timing timing;
  double flops = 0;
  std::string skipped;  // non-empty: not run, and why
  std::string check;    // flashattn: "ok", "ok (no-NaN only)", or the failure
  double vs_naive = 0;  // flashattn: its GFLOP/s over the naive one (0: none)
  double gflops() const { return flops / timing.median_s * 1e-9; }
  double gflops_best() const { return flops / timing.min_s * 1e-9; }
};

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

std::string num(double x, int prec = 6) {
  if (!std::isfinite(x)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", prec, x);
  return buf;
}

std::string row_json(const Row& r) {
  std::ostringstream o;
  o << "{\"impl\": \"" << r.impl << "\", \"path\": \"" << r.path << "\", \"mode\": \"" << r.mode
    << "\", \"causal\": " << (r.causal ? "true" : "false") << ", \"dtype\": \"" << r.dtype << "\", \"hdim\": " << r.hdim
    << ", \"seqlen\": " << r.seqlen << ", \"batch\": " << r.batch << ", \"heads\": " << r.heads
    << ", \"threads\": " << r.threads;
  if (!r.skipped.empty()) {
    o << ", \"gflops\": null, \"skipped\": \"" << json_escape(r.skipped) << "\"";
  } else {
    o << ", \"gflops\": " << num(r.gflops(), 5) << ", \"gflops_best\": " << num(r.gflops_best(), 5)
      << ", \"ms\": " << num(r.timing.median_s * 1e3, 5) << ", \"ms_min\": " << num(r.timing.min_s * 1e3, 5)
      << ", \"ms_max\": " << num(r.timing.max_s * 1e3, 5) << ", \"reps\": " << r.timing.reps;
  }
  if (r.impl == "flashattn") {
    o << ", \"vs_naive\": " << (r.vs_naive > 0 ? num(r.vs_naive, 4) : "null");
    o << ", \"check\": \"" << json_escape(r.check) << "\"";
  }
  o << "}";
  return o.str();
}

// ---- one cell ----------------------------------------------------------------------------------
struct Cell {
  fa::DType dtype;
  int64_t hdim, seqlen;
  bool causal;
};

// The tensors of one cell, contiguous [batch, seqlen, heads, hdim].
struct Problem {
  Buffer q, k, v, out, dout, dq, dk, dv;
  fa::ForwardArgs fargs;
  fa::BackwardArgs bargs;
  std::vector<unsigned char> fwork, bwork;
  Buffer lse_buf;  // poisoned as a float Buffer

  Problem(const Options& o, const Cell& c, std::mt19937_64& rng) {
    const int64_t n = o.batch * c.seqlen * o.heads * c.hdim;
    for (Buffer* b : {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) *b = Buffer(c.dtype, n);
    lse_buf = Buffer(fa::DType::f32, o.batch * o.heads * c.seqlen);
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
    dout.fill_normal(rng);
    auto view = [&](const Buffer& b) {
      return fa::TensorView::contiguous(b.data(), c.dtype, fa::Device::cpu, {o.batch, c.seqlen, o.heads, c.hdim});
    };
    const fa::TensorView lse_view =
        fa::TensorView::contiguous(lse_buf.data(), fa::DType::f32, fa::Device::cpu, {o.batch, o.heads, c.seqlen});
    fargs.q = view(q);
    fargs.k = view(k);
    fargs.v = view(v);
    fargs.options.causal = c.causal;
    fargs.out = view(out);
    fargs.lse = lse_view;
    std::size_t bytes = 0;
    check(fa::forward_workspace_size(fargs, &bytes), "forward_workspace_size");
    fwork.resize(std::max<std::size_t>(bytes, 1));
    fargs.workspace = bytes ? fwork.data() : nullptr;
    fargs.workspace_bytes = bytes;

    static_cast<fa::AttentionArgs&>(bargs) = static_cast<const fa::AttentionArgs&>(fargs);
    bargs.out = view(out);
    bargs.lse = lse_view;
    bargs.dout = view(dout);
    bargs.dq = view(dq);
    bargs.dk = view(dk);
    bargs.dv = view(dv);
    check(fa::backward_workspace_size(bargs, &bytes), "backward_workspace_size");
    bwork.resize(std::max<std::size_t>(bytes, 1));
    bargs.workspace = bytes ? bwork.data() : nullptr;
    bargs.workspace_bytes = bytes;
  }
};

std::string error_rule(const std::vector<double>& got, const std::vector<double>& same, const std::vector<double>& f64,
                       const std::vector<int64_t>& rows, int64_t width, int64_t dim, fa::DType dtype,
                       const char* name) {
  const ref::ErrorReport rep = ref::check_error_rule(got, same, f64, rows, width, dtype);
  if (rep.ok) return "";
  return std::string(name) + ": " + rep.describe(dim) + "; ";
}

// Forward check: the error rule against the float64 reference on sampled query rows.
std::string check_forward(const Problem& P, const Cell& c, uint64_t seed) {
  if (int64_t bad = P.out.count_nan() + P.lse_buf.count_nan(); bad > 0) {
    return "FAIL: " + std::to_string(bad) + " non-finite outputs";
  }
  fa::FwdParams fp;
  check(fa::to_params(P.fargs, &fp), "to_params");
  const std::vector<int64_t> rows = ref::sample_rows(fp.total_q, 64, seed);
  ref::ForwardResult f64, same;
  check(ref::forward(fp, ref::Precision::f64, &f64, &rows), "reference f64");
  check(ref::forward(fp, ref::Precision::same, &same, &rows), "reference same");
  std::string err =
      error_rule(ref::read_out(fp), same.out, f64.out, f64.q_rows, fp.heads_q * fp.hdim_v, fp.hdim_v, c.dtype, "out") +
      error_rule(ref::read_lse(fp), same.lse, f64.lse, f64.q_rows, fp.heads_q, 1, fa::DType::f32, "lse");
  return err.empty() ? "ok" : "FAIL: " + err;
}

std::string check_backward(const Problem& P, const Cell& c, uint64_t seed, bool full) {
  if (int64_t bad = P.dq.count_nan() + P.dk.count_nan() + P.dv.count_nan(); bad > 0) {
    return "FAIL: " + std::to_string(bad) + " non-finite gradients";
  }
  if (!full) return "ok (no-NaN only)";
  fa::BwdParams bp;
  check(fa::to_params(P.bargs, &bp), "to_params");
  const std::vector<int64_t> qr = ref::sample_rows(bp.total_q, 64, seed);
  const std::vector<int64_t> kr = ref::sample_rows(bp.total_k, 64, seed + 1);
  ref::BackwardResult f64, same;
  check(ref::backward(bp, ref::Precision::f64, &f64, &qr, &kr), "reference f64");
  check(ref::backward(bp, ref::Precision::same, &same, &qr, &kr), "reference same");
  const int64_t d = bp.hdim_qk, dv = bp.hdim_v;
  std::string err = error_rule(ref::read_dq(bp), same.dq, f64.dq, f64.q_rows, bp.heads_q * d, d, c.dtype, "dq") +
                    error_rule(ref::read_dk(bp), same.dk, f64.dk, f64.k_rows, bp.heads_kv * d, d, c.dtype, "dk") +
                    error_rule(ref::read_dv(bp), same.dv, f64.dv, f64.k_rows, bp.heads_kv * dv, dv, c.dtype, "dv");
  return err.empty() ? "ok" : "FAIL: " + err;
}

double cell_flops(const Options& o, const Cell& c, const std::string& mode) {
  double f = 4.0 * o.batch * o.heads * double(c.seqlen) * double(c.seqlen) * c.hdim;
  if (c.causal) f *= 0.5;
  if (mode == "bwd") f *= 2.5;
  return f;
}

std::string fmt_gflops(const Row& r) {
  if (!r.skipped.empty()) return "skipped";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", r.gflops());
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::vector<int> thread_counts = o.threads;
  if (thread_counts.empty()) thread_counts.push_back(omp_get_max_threads());
  std::string threads_str;
  for (int t : thread_counts) threads_str += (threads_str.empty() ? "" : ",") + std::to_string(t);

  const std::string src = FLASHATTN_SOURCE_DIR;
  const std::string commit = run_command("git -C '" + src + "' rev-parse --short HEAD 2>/dev/null");
  // Uncommitted changes in what the CPU build compiles: the binary may differ from the commit.
  const std::string dirty =
      run_command("git -C '" + src + "' status --porcelain -- src/cpu src/api include CMakeLists.txt 2>/dev/null");
  const std::vector<double> load_start = load_avg();
  const std::string cpu = cpu_model();
  const std::string matmul = fa::cpu::matmul_engine();  // what runs the tile products (matmul.hpp)
  const std::string tile_math = fa::cpu::tile_math_isa();  // which clone runs the tile math (tile_math.hpp)
  const unsigned cores = static_cast<unsigned>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));

  std::printf("bench_cpu: %s, %u cores, tile products on %s, tile math on %s, threads %s, commit %s%s, load %.2f %.2f %.2f\n",
              cpu.c_str(), cores, matmul.c_str(), tile_math.c_str(), threads_str.c_str(), commit.c_str(),
              dirty.empty() ? "" : " (+ uncommitted CPU-side changes)",
              load_start[0], load_start[1], load_start[2]);
  std::printf(
      "batch %lld, heads %lld; GFLOP/s = (4·b·h·s²·d, /2 causal, ×2.5 bwd) / median time; naive = "
      "reference::Precision::same, budget %.1f s/call\n\n",
      static_cast<long long>(o.batch), static_cast<long long>(o.heads), o.naive_budget_s);
  std::printf("%-3s %-5s %-4s %-6s %5s %6s | %10s %10s %5s | %10s %5s | %7s | %s\n", "thr", "dtype", "mode", "causal",
              "hdim", "seqlen", "flash GF/s", "(best)", "reps", "naive GF/s", "reps", "ratio", "check");
  std::fflush(stdout);

  std::vector<Row> rows;
  const auto wall0 = Clock::now();
  uint64_t cell_seed = o.seed;
  for (int threads : thread_counts) {
    omp_set_num_threads(threads);
    for (fa::DType dtype : o.dtypes) {
      for (int64_t hdim : o.hdims) {
        for (bool causal : o.causals) {
          // The naive reference's last measured time per mode, to predict the next seqlen's.
          std::map<std::string, std::pair<double, double>> naive_last;  // mode → (seconds, flops)
          std::map<std::string, std::string> naive_stop;                // mode → reason it stopped
          for (int64_t seqlen : o.seqlens) {
            const Cell c{dtype, hdim, seqlen, causal};
            std::mt19937_64 rng(++cell_seed);
            Problem P(o, c, rng);
            fa::FwdParams fp;
            fa::BwdParams bp;
            check(fa::to_params(P.fargs, &fp), "to_params(forward)");
            check(fa::to_params(P.bargs, &bp), "to_params(backward)");
            const std::string fpath = fa::forward_path(P.fargs), bpath = fa::backward_path(P.bargs);
            if (fpath != "cpu" || bpath != "cpu") die("the CPU backend was not selected (" + fpath + ")");

            bool have_forward = false;
            for (const std::string& mode : o.modes) {
              Row fr;
              fr.impl = "flashattn";
              fr.path = "cpu";
              fr.mode = mode;
              fr.dtype = fa::to_string(dtype);
              fr.causal = causal;
              fr.hdim = hdim;
              fr.seqlen = seqlen;
              fr.batch = o.batch;
              fr.heads = o.heads;
              fr.threads = threads;
              fr.flops = cell_flops(o, c, mode);
              Row nr = fr;
              nr.impl = "naive";
              nr.path = "reference-same";

              double warm = 0;
              if (mode == "fwd") {
                fr.timing = time_calls(
                    [&] {
                      P.out.poison();
                      P.lse_buf.poison();
                    },
                    [&] { check(fa::forward(P.fargs), "forward"); }, o.reps, o.max_reps, o.target_s, &warm);
                have_forward = true;
                fr.check = check_forward(P, c, cell_seed);
              } else {
                if (!have_forward) check(fa::forward(P.fargs), "forward");  // out, lse for the backward
                fr.timing = time_calls(
                    [&] {
                      P.dq.poison();
                      P.dk.poison();
                      P.dv.poison();
                    },
                    [&] { check(fa::backward(P.bargs), "backward"); }, o.reps, o.max_reps, o.target_s, &warm);
                fr.check = check_backward(P, c, cell_seed, seqlen <= o.check_bwd_max);
              }

              // The naive reference, while its predicted time per call is within the budget.
              double predicted = 0;
              if (auto it = naive_last.find(mode); it != naive_last.end()) {
                predicted = it->second.first * fr.flops / it->second.second;
              }
              if (naive_stop.count(mode)) {
                nr.skipped = naive_stop[mode];
              } else if (predicted > o.naive_budget_s) {
                char buf[128];
                std::snprintf(buf, sizeof buf, "predicted %.1f s/call > budget %.1f s", predicted, o.naive_budget_s);
                nr.skipped = naive_stop[mode] = buf;
              } else {
                ref::ForwardResult fres;
                ref::BackwardResult bres;
                double nwarm = 0;
                if (mode == "fwd") {
                  nr.timing = time_calls([] {}, [&] { check(ref::forward(fp, ref::Precision::same, &fres), "naive"); },
                                         o.reps, o.max_reps, o.target_s, &nwarm);
                } else {
                  nr.timing = time_calls([] {}, [&] { check(ref::backward(bp, ref::Precision::same, &bres), "naive"); },
                                         o.reps, o.max_reps, o.target_s, &nwarm);
                }
                naive_last[mode] = {nr.timing.median_s, nr.flops};
                fr.vs_naive = fr.gflops() / nr.gflops();
              }

              char ratio[32] = "-";
              if (fr.vs_naive > 0) std::snprintf(ratio, sizeof ratio, "%.1fx", fr.vs_naive);
              std::printf("%-3d %-5s %-4s %-6s %5lld %6lld | %10s %10.2f %5d | %10s %5s | %7s | %s\n", threads,
                          fr.dtype.c_str(), mode.c_str(), causal ? "yes" : "no", static_cast<long long>(hdim),
                          static_cast<long long>(seqlen), fmt_gflops(fr).c_str(), fr.gflops_best(), fr.timing.reps,
                          fmt_gflops(nr).c_str(), nr.skipped.empty() ? std::to_string(nr.timing.reps).c_str() : "-",
                          ratio, fr.check.c_str());
              std::fflush(stdout);
              rows.push_back(fr);
              rows.push_back(nr);
            }
          }
        }
      }
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
  const std::vector<double> load_end = load_avg();
  std::printf("\n%zu rows in %.0f s; load %.2f %.2f %.2f at the end\n", rows.size(), wall, load_end[0], load_end[1],
              load_end[2]);

  bool all_ok = true;
  for (const Row& r : rows) {
    if (r.impl == "flashattn" && r.check.rfind("ok", 0) != 0) all_ok = false;
  }

  if (!o.out.empty()) {
    std::ofstream f(o.out);
    if (!f) die("cannot write " + o.out);
    f << "{\"gpu\": null, \"cpu\": \"" << json_escape(cpu) << "\", \"cpu_matmul\": \"" << json_escape(matmul)
      << "\", \"cpu_tile_math\": \"" << tile_math << "\", \"cores\": " << cores << ", \"threads\": ["
      << threads_str << "]"
      << ",\n \"commit\": \"" << commit << "\", \"tree_dirty\": " << (dirty.empty() ? "false" : "true")
      << ", \"date\": \"" << today() << "\",\n \"load_avg\": [" << num(load_start[0], 3) << ", "
      << num(load_start[1], 3) << ", " << num(load_start[2], 3) << "], \"load_avg_end\": [" << num(load_end[0], 3)
      << ", " << num(load_end[1], 3) << ", " << num(load_end[2], 3) << "],\n \"batch\": " << o.batch
      << ", \"heads\": " << o.heads << ", \"min_reps\": " << o.reps << ", \"naive_budget_s\": " << num(o.naive_budget_s)
      << ", \"wall_s\": " << num(wall, 4)
      << ",\n \"flops\": \"forward 4*b*h*s*s*d, halved for causal; backward 2.5x forward\""
      << ",\n \"naive\": \"reference::forward/backward with Precision::same (naive float32 row-by-row, OpenMP)\""
      << ",\n \"rows\": [\n";
    for (std::size_t i = 0; i < rows.size(); ++i)
      f << "  " << row_json(rows[i]) << (i + 1 < rows.size() ? ",\n" : "\n");
    f << "]}\n";
    std::printf("wrote %s\n", o.out.c_str());
  }
  if (!all_ok) {
    std::fprintf(stderr, "bench_cpu: some flashattn outputs failed their check (see the table)\n");
    return 1;
  }
  return 0;
}
