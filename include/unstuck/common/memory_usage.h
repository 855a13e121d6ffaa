// This process's memory as the kernel counts it (what an out-of-memory kill looks at): the resident
// set now, its high-water mark, and resetting that mark so a step's own peak can be read; and the
// time since the process was started (loading libtorch and static initialization included).
#pragma once

#include <cstdint>

namespace unstuck {

// Resident set size now (VmRSS of /proc/self/status), in bytes; 0 when unknown.
int64_t current_rss_bytes();
// Highest resident set size since the process started or since the last reset_peak_rss()
// (VmHWM), in bytes; 0 when unknown.
int64_t peak_rss_bytes();
// Resets the high-water mark to the current resident set (writes 5 to /proc/self/clear_refs, Linux
// 4.0+). Returns false when the kernel refuses (the mark then keeps counting from the start).
bool reset_peak_rss();
// Seconds since this process was started (/proc/self/stat's start time against CLOCK_BOOTTIME,
// 10 ms resolution); -1 when unknown.
double seconds_since_process_start();

}  // namespace unstuck
