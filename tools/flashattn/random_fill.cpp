#include "random_fill.hpp"

#include <cmath>

#include "cpu/convert.hpp"

namespace fa_cli {
namespace {

constexpr int64_t kChunk = int64_t{1} << 16;  // elements per independently seeded chunk
constexpr double kTwoPi = 6.283185307179586476925286766559;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1]: never 0, so log() below is finite.
double unit_open(Rng& rng) { return (static_cast<double>(rng.next() >> 11) + 1.0) * 0x1.0p-53; }

}  // namespace

Rng::Rng(uint64_t seed, uint64_t stream) : state_(splitmix64(seed ^ splitmix64(stream + 0x5851f42d4c957f2dull))) {}

uint64_t Rng::next() {
  state_ += 0x9e3779b97f4a7c15ull;
  return splitmix64(state_);
}

int64_t Rng::uniform(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(next() % span);
}

void fill_normal(void* data, flashattn::DType dtype, int64_t n, uint64_t seed, uint64_t stream) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    Rng rng(seed, stream * 0x100000000ull + static_cast<uint64_t>(c));
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; i += 2) {
      // Box-Muller: two independent normals from two uniforms.
      const double r = std::sqrt(-2.0 * std::log(unit_open(rng)));
      const double t = kTwoPi * unit_open(rng);
      flashattn::store_from_float(data, dtype, i, static_cast<float>(r * std::cos(t)));
      if (i + 1 < end) flashattn::store_from_float(data, dtype, i + 1, static_cast<float>(r * std::sin(t)));
    }
  }
}

}  // namespace fa_cli
