// Resident memory of this process (Linux /proc), to measure what a CPU call uses beyond its tensors.
#pragma once

#include <cstdint>

namespace fa_cli {

int64_t current_rss_bytes();  // VmRSS; -1 when unknown
int64_t peak_rss_bytes();     // VmHWM (getrusage's ru_maxrss as a fallback); -1 when unknown
// Resets the peak to the current RSS (writes 5 to /proc/self/clear_refs); false when the kernel
// does not allow it, in which case the peak covers the whole process lifetime.
bool reset_peak_rss();

}  // namespace fa_cli
