// Fork-join chunked loop on OpenMP. libtorch's CPU ops run on OpenMP too (the same libgomp.so.1 is
// loaded once per process), so our kernels reuse its worker threads instead of competing with them:
// with separate std::threads, libtorch's spin-waiting workers starved our kernels between ops.
#include "unstuck/common/parallel.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <cstdlib>
#include <thread>
#include <vector>

namespace unstuck {

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  // Ranks started on this machine by `unstuck launch` or torchrun share its cores evenly.
  const char* local_world = std::getenv("LOCAL_WORLD_SIZE");
  const int ranks = local_world ? std::max(1, std::atoi(local_world)) : 1;
  return std::max(1, (hw == 0 ? 1 : static_cast<int>(hw)) / ranks);
}

void parallel_chunks(std::size_t n, int chunks, std::size_t align,
                     const std::function<void(std::size_t, std::size_t, int)>& fn) {
  if (align == 0) align = 1;
  const std::size_t units = (n + align - 1) / align;
  chunks = static_cast<int>(std::min<std::size_t>(std::max(chunks, 1), std::max<std::size_t>(units, 1)));
  if (chunks <= 1) {
    fn(0, n, 0);
    return;
  }
  std::vector<std::exception_ptr> errors(chunks);
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int c = 0; c < chunks; ++c) {
    const std::size_t begin = std::min(n, units * c / chunks * align);
    const std::size_t end = std::min(n, units * (c + 1) / chunks * align);
    try {  // exceptions must not leave an OpenMP region
      fn(begin, end, c);
    } catch (...) {
      errors[c] = std::current_exception();
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace unstuck
