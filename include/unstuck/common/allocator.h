// Process-wide memory allocator settings.
#pragma once

namespace unstuck {

// Keeps freed heap memory for reuse instead of returning it to the kernel: glibc's malloc serves
// blocks up to 32 MiB from the heap (not fresh mmap()s) and trims the heap only past 1 GiB free.
// libtorch's CPU tensors of a training or decode step are allocated and freed every step; with
// glibc's defaults the larger ones are new mappings each time, and the page faults that zero them
// cost 6-15% of a CPU decode step (`unstuck bench generate`, FP32, 1 thread). Called once at the
// start of `unstuck`; skipped when GLIBC_TUNABLES already sets glibc.malloc.* or
// UNSTUCK_MALLOC=default (UNSTUCK_MALLOC=reuse or unset: applied). Returns whether it changed the
// settings; throws UserError naming any other UNSTUCK_MALLOC value.
bool keep_freed_memory();

// Returns the heap's free pages to the kernel (glibc's malloc_trim): for a phase that frees large
// transient buffers the run will not need again (precision.compute: auto's probe), which the settings
// above would otherwise keep resident, outside the memory plan, for the rest of the run.
void release_freed_memory();

}  // namespace unstuck
