#include "host_memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace fa_cli {
namespace {

// A "Name:   1234 kB" line of /proc/self/status, in bytes.
int64_t status_field(const char* name) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int64_t bytes = -1;
  const std::size_t n = std::strlen(name);
  while (std::fgets(line, sizeof line, f)) {
    long long kb = 0;
    if (std::strncmp(line, name, n) == 0 && line[n] == ':' && std::sscanf(line + n + 1, "%lld", &kb) == 1) {
      bytes = static_cast<int64_t>(kb) * 1024;
      break;
    }
  }
  std::fclose(f);
  return bytes;
}

}  // namespace

int64_t current_rss_bytes() { return status_field("VmRSS"); }

int64_t peak_rss_bytes() {
  int64_t hwm = status_field("VmHWM");
  if (hwm >= 0) return hwm;
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // kB on Linux
}

bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

bool fits_in_host_memory(std::size_t bytes, std::string* error) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return true;
  const double total = static_cast<double>(pages) * static_cast<double>(page);
  if (static_cast<double>(bytes) <= 0.8 * total) return true;
  char buf[160];
  std::snprintf(buf, sizeof buf, "the tensors need %.2f GiB of host memory, more than 80%% of the %.2f GiB here",
                static_cast<double>(bytes) / (1 << 30), total / (1 << 30));
  *error = buf;
  return false;
}

}  // namespace fa_cli
