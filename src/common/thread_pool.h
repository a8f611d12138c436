// Minimal parallel-for for the CPU backend: splits [0, n) into contiguous chunks over threads.
#pragma once
#include <cstdint>
#include <functional>

namespace dsattn {
namespace detail {

// Threads the CPU backend uses when Exec::num_threads == 0 (hardware concurrency, at least 1;
// overridable with the DSATTN_NUM_THREADS environment variable).
int default_num_threads();

// Calls fn(begin, end) on disjoint chunks covering [0, n). Runs inline when n is small or
// num_threads <= 1. The first exception thrown by a chunk is rethrown on the caller's thread.
void parallel_for(int64_t n, int num_threads, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace detail
}  // namespace dsattn
