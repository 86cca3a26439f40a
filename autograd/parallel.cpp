#include "autograd/parallel.h"

#include "autograd/detail/blas.h"
#include "autograd/error.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ag {

namespace {

// Below this much work per thread (about one element of an elementwise loop each), handing work
// to a thread costs more than the work. With the workers spinning between loops (below) a hand-off
// costs ~1 µs; 2^14 made d2l's tiny step at 2 threads 30 % faster than 2^16, which was chosen when
// every hand-off woke a sleeping thread (docs/benchmarks.md, "The thread pool").
constexpr int64_t kMinWorkPerThread = 1 << 14;

thread_local bool t_inside_parallel_loop = false;

// How long a thread of the pool spins, waiting for the next loop (a worker) or for the other
// chunks to finish (the caller), before it sleeps on a condition variable. Waking a sleeping
// thread is a futex call and a trip through the scheduler, 10–50 µs on the benchmark VM; a
// training step of d2l's tiny configuration runs ~200 parallel loops with 10–100 µs of serial
// work between them, so sleeping after each loop made 2 threads slower than 1 (docs/benchmarks.md,
// "The thread pool"). While it spins, a thread keeps its core busy; after this long with nothing
// to do it sleeps and leaves the core to others.
constexpr std::chrono::microseconds kSpinBeforeSleep{100};

// One iteration of a spin-wait: tells the CPU that this thread is waiting (x86's pause), so that
// it spends less power and leaves the core's resources to its sibling hyper-thread.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or until kSpinBeforeSleep has passed; returns done().
template <class Done>
bool spin_until(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  while (!done()) {
    for (int i = 0; i < 64; ++i) {
      spin_pause();
      if (done()) return true;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
  return true;
}

// A fixed set of workers that wait until the caller hands them a job: worker w runs chunk w + 1
// of it, the caller chunk 0; the caller returns when every chunk is done. Waiting is spinning for
// kSpinBeforeSleep, then sleeping on a condition variable: generation_ (a new job) and pending_
// (chunks not yet done) are atomics, so that a spinning thread sees them change without the lock;
// they are changed under the lock as well (or the lock is taken before notifying), so that a
// thread about to sleep cannot miss the change.
class ThreadPool {
 public:
  // Starts threads − 1 workers. If the system refuses one (std::system_error; std::bad_alloc for
  // its bookkeeping), the workers already started are stopped and joined before the exception
  // leaves: a constructor that throws runs no destructor, and destroying the condition variables
  // while workers still wait on them would hang (in pthread_cond_destroy).
  explicit ThreadPool(int threads) {
    try {
      workers_.reserve(static_cast<std::size_t>(threads - 1));
      for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { work(w); });
    } catch (...) {
      stop_workers();
      throw;
    }
  }
  ~ThreadPool() { stop_workers(); }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs chunk(0) .. chunk(chunks − 1), chunks ≤ size().
  void run(int chunks, const std::function<void(int)>& chunk) {
    {
      std::lock_guard lock(mutex_);
      job_ = &chunk;
      chunks_ = chunks;
      pending_.store(chunks - 1, std::memory_order_relaxed);
      error_ = nullptr;
      generation_.fetch_add(1, std::memory_order_release);  // the job above is published with it
    }
    start_.notify_all();  // no system call when every worker is still spinning
    run_chunk(0);
    const auto all_done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
    if (!spin_until(all_done)) {
      std::unique_lock lock(mutex_);
      done_.wait(lock, all_done);
    }
    std::lock_guard lock(mutex_);
    job_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void work(int index) {
    uint64_t seen = 0;
    const auto new_job_or_stop = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    while (true) {
      spin_until(new_job_or_stop);
      std::unique_lock lock(mutex_);
      start_.wait(lock, new_job_or_stop);
      if (stop_.load(std::memory_order_relaxed)) return;
      seen = generation_.load(std::memory_order_relaxed);
      const bool has_chunk = index < chunks_;
      lock.unlock();
      if (!has_chunk) continue;
      run_chunk(index);
      // The last chunk done wakes the caller if it sleeps; taking the lock first means the caller
      // is either still before its check of pending_ or already waiting.
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard done_lock(mutex_);
        done_.notify_one();
      }
    }
  }

  void stop_workers() {
    {
      std::lock_guard lock(mutex_);
      stop_.store(true, std::memory_order_release);
    }
    start_.notify_all();
    for (auto& worker : workers_) worker.join();
    workers_.clear();
  }

  void run_chunk(int index) {
    t_inside_parallel_loop = true;
    try {
      (*job_)(index);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    t_inside_parallel_loop = false;
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_, error_mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int chunks_ = 0;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

std::mutex g_pool_mutex;  // held while the pool runs a loop or is replaced
std::unique_ptr<ThreadPool> g_pool;
std::atomic<int> g_num_threads{0};  // 0: not set yet, the machine's cores

int hardware_threads() { return static_cast<int>(std::thread::hardware_concurrency()); }
int default_threads() { return std::max(1, hardware_threads()); }

// Replaces the pool by one of `threads` threads; the caller holds g_pool_mutex. The old pool's
// threads end before the new ones start, so the two never hold threads at once. On failure the
// exception of ThreadPool's constructor leaves g_pool empty.
void start_pool(int threads) {
  detail::keep_blas_on_one_thread();
  g_pool.reset();
  g_pool = std::make_unique<ThreadPool>(threads);
}

// The pool of get_num_threads() threads, created on first use; the caller holds g_pool_mutex.
ThreadPool& pool() {
  const int threads = get_num_threads();
  if (!g_pool || g_pool->size() != threads) {
    try {
      start_pool(threads);
    } catch (const std::exception& e) {
      fail<RuntimeError>("ag's thread pool: could not start ", threads, " threads (", e.what(),
          "); call ag::set_num_threads with fewer");
    }
  }
  return *g_pool;
}

}  // namespace

int get_num_threads() {
  const int threads = g_num_threads.load(std::memory_order_relaxed);
  return threads > 0 ? threads : default_threads();
}

int max_num_threads() { return std::max(16, 4 * hardware_threads()); }

void set_num_threads(int threads) {
  const int max = max_num_threads();
  if (threads < 1 || threads > max)
    fail<ValueError>("set_num_threads: ", threads, " threads is outside [1, ", max,
        "] (at most 4 times the machine's ", hardware_threads(),
        " hardware threads, and at least 16)");
  std::lock_guard lock(g_pool_mutex);
  const int previous = get_num_threads();
  if (g_pool && g_pool->size() == threads) {
    g_num_threads.store(threads, std::memory_order_relaxed);
    return;
  }
  try {
    start_pool(threads);
  } catch (const std::exception& e) {
    // Back to the previous size; a pool of 1 thread starts no thread, so it cannot fail.
    int kept = previous;
    try {
      start_pool(previous);
    } catch (const std::exception&) {
      kept = 1;
      start_pool(kept);
    }
    g_num_threads.store(kept, std::memory_order_relaxed);
    fail<RuntimeError>("set_num_threads: could not start ", threads, " threads (", e.what(),
        "); ag keeps running on ", kept, kept == 1 ? " thread" : " threads");
  }
  g_num_threads.store(threads, std::memory_order_relaxed);
}

void parallel_for(
    int64_t n, int64_t cost_per_item, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int64_t work = n * std::max<int64_t>(cost_per_item, 1);
  if (t_inside_parallel_loop || work < 2 * kMinWorkPerThread) {
    body(0, n);
    return;
  }
  std::lock_guard lock(
      g_pool_mutex);  // one parallel loop at a time (callers on other threads wait)
  ThreadPool& threads = pool();
  const int64_t chunks = std::min<int64_t>({threads.size(), n, work / kMinWorkPerThread});
  if (chunks <= 1) {
    body(0, n);
    return;
  }
  // Chunk c covers [c·n/chunks, (c+1)·n/chunks): contiguous, by index only.
  threads.run(static_cast<int>(chunks), [&](int c) {
    const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    if (begin < end) body(begin, end);
  });
}

}  // namespace ag
