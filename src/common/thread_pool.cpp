#include "common/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dsattn {
namespace detail {

int default_num_threads() {
  if (const char* env = std::getenv("DSATTN_NUM_THREADS")) {
    const int v = std::atoi(env);
    if (v > 0) return v;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

void parallel_for(int64_t n, int num_threads, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (num_threads <= 0) num_threads = default_num_threads();
  const int64_t workers = std::min<int64_t>(num_threads, n);
  if (workers <= 1) {
    fn(0, n);
    return;
  }
  std::exception_ptr first_error;
  std::mutex mu;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers - 1));
  const int64_t chunk = (n + workers - 1) / workers;
  auto run = [&](int64_t b, int64_t e) {
    try {
      fn(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!first_error) first_error = std::current_exception();
    }
  };
  for (int64_t w = 1; w < workers; ++w) {
    const int64_t b = w * chunk, e = std::min(n, b + chunk);
    if (b < e) threads.emplace_back(run, b, e);
  }
  run(0, std::min(n, chunk));
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace detail
}  // namespace dsattn
