// Resident memory of this process (Linux /proc), to measure what a CPU call uses beyond its tensors,
// and the machine's memory, to refuse tensors that would not fit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fa_cli {

int64_t current_rss_bytes();  // VmRSS; -1 when unknown
int64_t peak_rss_bytes();     // VmHWM (getrusage's ru_maxrss as a fallback); -1 when unknown
// Resets the peak to the current RSS (writes 5 to /proc/self/clear_refs); false when the kernel
// does not allow it, in which case the peak covers the whole process lifetime.
bool reset_peak_rss();

// Whether `bytes` of tensors fit in this machine's memory (at most 80% of it), checked before
// allocating them: refuse clearly rather than be killed. *error says how much is needed of what.
bool fits_in_host_memory(std::size_t bytes, std::string* error);

}  // namespace fa_cli
