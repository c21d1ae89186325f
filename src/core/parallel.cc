// SPDX-License-Identifier: Apache-2.0
#include "core/parallel.h"

#include <atomic>
#include <exception>

#if defined(NORMKIT_THREADING_TBB)
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#elif defined(NORMKIT_THREADING_OPENMP)
#include <omp.h>
#include <pthread.h>

#include <vector>
#elif defined(NORMKIT_THREADING_POOL)
#include "core/thread_pool.h"
#endif

namespace normkit {

struct ThreadingState {
#if defined(NORMKIT_THREADING_TBB)
  // execute() on an arena is safe from many threads.
  explicit ThreadingState(int32_t num_threads) : arena(num_threads) {
    arena.initialize();
  }
  tbb::task_arena arena;
#endif
};

void ThreadingStateDeleter::operator()(ThreadingState* state) const {
  delete state;
}

ThreadingState* NewThreadingState(int32_t num_threads) {
#if defined(NORMKIT_THREADING_TBB)
  return new ThreadingState(num_threads);
#else
  (void)num_threads;
  return nullptr;
#endif
}

namespace {

// Carries the first exception a task throws out of an OpenMP region (where an
// exception may not cross the region's end: it would call std::terminate) to the
// calling thread; tasks not yet started are skipped. TBB does the same itself.
class FirstException {
 public:
  template <class F>
  void Run(F&& f) noexcept {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
      if (!failed_.exchange(true)) error_ = std::current_exception();
    }
  }
  // After the region (its join orders error_'s write before this read).
  void Rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

// On the host's parallel-for: tasks [0, num_tasks) cut into `parts` contiguous runs, run
// r = [r * n / parts, (r + 1) * n / parts) as the host's task r, which is also its worker
// index (the host runs each of its tasks once, so no two share one).
void RunOnHost(const normkit_context& context, int64_t num_tasks, int64_t parts,
               FunctionRef<void(int64_t, int64_t, int64_t)> run) {
  struct Call {
    FunctionRef<void(int64_t, int64_t, int64_t)>* run;
    int64_t num_tasks, parts;
    FirstException first;
  } call{&run, num_tasks, parts, {}};
  context.host_parallel_for(
      context.host_pool, parts,
      [](void* p, int64_t r) {
        auto& c = *static_cast<Call*>(p);
        const int64_t begin = c.num_tasks * r / c.parts, end = c.num_tasks * (r + 1) / c.parts;
        if (begin < end) c.first.Run([&] { (*c.run)(begin, end, r); });
      },
      &call);
  call.first.Rethrow();
}

int64_t HostParts(const normkit_context& context, int64_t num_tasks) {
  return num_tasks < context.num_threads ? num_tasks : context.num_threads;
}

#if defined(NORMKIT_THREADING_OPENMP)
// libgomp ends the process (gomp_fatal, exit 1) when it cannot create a thread for a
// region: an address-space or thread limit would take the host down. So before a calling
// thread's regions first ask for more threads than it has proven it can have (libgomp
// keeps a pool of them per calling thread), it starts and joins that many plain threads
// of the default stack size; if the system refuses some, its regions use those that did
// start. Paid once per calling thread and thread count (tens of microseconds). Results
// never depend on the thread count, so running on fewer changes no bit.
int OmpThreads(int64_t wanted) {
  thread_local int64_t proven = 1;
  if (wanted <= proven) return static_cast<int>(wanted);
  std::vector<pthread_t> started;
  started.reserve(static_cast<size_t>(wanted - 1));
  for (int64_t i = 1; i < wanted; ++i) {
    pthread_t thread;
    if (pthread_create(
            &thread, nullptr, [](void*) -> void* { return nullptr; }, nullptr) != 0) {
      break;
    }
    started.push_back(thread);
  }
  for (pthread_t thread : started) pthread_join(thread, nullptr);
  const int64_t available = 1 + static_cast<int64_t>(started.size());
  if (available == wanted) proven = wanted;
  return static_cast<int>(available);
}
#endif

#if defined(NORMKIT_THREADING_POOL)
// Runs tasks [0, num_tasks) cut into `parts` contiguous runs, as even as the count
// allows (as OpenMP's static schedule cuts them): run(begin, end, thread) on the pool,
// or on the calling thread when there is no pool.
void RunOnPool(int64_t num_tasks, int64_t parts, FunctionRef<void(int64_t, int64_t, int64_t)> run) {
  if (parts > ThreadPool::kMaxParts) parts = ThreadPool::kMaxParts;
  const auto part_run = [&](int64_t part, int64_t thread) {
    run(num_tasks * part / parts, num_tasks * (part + 1) / parts, thread);
  };
  if (ThreadPool* pool = ThreadPool::Instance()) {
    pool->Run(parts, part_run);
  } else {
    for (int64_t part = 0; part < parts; ++part) part_run(part, 0);
  }
}
#endif

}  // namespace

void ParallelFor(const normkit_context& context, int64_t num_tasks,
                 FunctionRef<void(int64_t)> body) {
  if (num_tasks <= 0) return;
  if (num_tasks == 1 || context.num_threads <= 1) {
    for (int64_t task = 0; task < num_tasks; ++task) body(task);
    return;
  }
  if (context.host_parallel_for) {
    return RunOnHost(context, num_tasks, HostParts(context, num_tasks),
                     [&](int64_t begin, int64_t end, int64_t) {
                       for (int64_t task = begin; task < end; ++task) body(task);
                     });
  }
#if defined(NORMKIT_THREADING_TBB)
  context.threading->arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, num_tasks, 1),
                      [&](const tbb::blocked_range<int64_t>& range) {
                        for (int64_t task = range.begin(); task < range.end(); ++task) body(task);
                      });
  });
#elif defined(NORMKIT_THREADING_OPENMP)
  const int threads = OmpThreads(num_tasks < context.num_threads ? num_tasks : context.num_threads);
  FirstException first;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t task = 0; task < num_tasks; ++task) first.Run([&] { body(task); });
  first.Rethrow();
#elif defined(NORMKIT_THREADING_POOL)
  ParallelForWorkers(context, num_tasks, [&](int64_t task, int64_t) { body(task); });
#else
  for (int64_t task = 0; task < num_tasks; ++task) body(task);
#endif
}

void ParallelForRuns(const normkit_context& context, int64_t num_tasks,
                     FunctionRef<void(int64_t, int64_t)> body) {
  if (num_tasks <= 0) return;
  if (num_tasks == 1 || context.num_threads <= 1) {
    body(0, num_tasks);
    return;
  }
  if (context.host_parallel_for) {
    return RunOnHost(context, num_tasks, HostParts(context, num_tasks),
                     [&](int64_t begin, int64_t end, int64_t) { body(begin, end); });
  }
#if defined(NORMKIT_THREADING_TBB)
  context.threading->arena.execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, num_tasks, 1),
        [&](const tbb::blocked_range<int64_t>& range) { body(range.begin(), range.end()); });
  });
#elif defined(NORMKIT_THREADING_OPENMP)
  const int threads = OmpThreads(num_tasks < context.num_threads ? num_tasks : context.num_threads);
  FirstException first;
#pragma omp parallel num_threads(threads)
  {
    // Thread t takes tasks [t * n / threads, (t + 1) * n / threads).
    const int64_t t = omp_get_thread_num();
    const int64_t n = omp_get_num_threads();
    const int64_t begin = num_tasks * t / n;
    const int64_t end = num_tasks * (t + 1) / n;
    if (begin < end) first.Run([&] { body(begin, end); });
  }
  first.Rethrow();
#elif defined(NORMKIT_THREADING_POOL)
  FirstException first;
  RunOnPool(num_tasks, num_tasks < context.num_threads ? num_tasks : context.num_threads,
            [&](int64_t begin, int64_t end, int64_t) {
              if (begin < end) first.Run([&] { body(begin, end); });
            });
  first.Rethrow();
#else
  body(0, num_tasks);
#endif
}

int64_t ParallelWorkers(const normkit_context& context, int64_t num_tasks) {
  if (num_tasks <= 1 || context.num_threads <= 1) return 1;
  if (context.host_parallel_for) return HostParts(context, num_tasks);
#if defined(NORMKIT_THREADING_TBB)
  return context.threading->arena.max_concurrency();  // a thread's slot in the arena
#elif defined(NORMKIT_THREADING_OPENMP) || defined(NORMKIT_THREADING_POOL)
  return num_tasks < context.num_threads ? num_tasks : context.num_threads;
#else
  return 1;
#endif
}

void ParallelForWorkers(const normkit_context& context, int64_t num_tasks,
                        FunctionRef<void(int64_t, int64_t)> body) {
  if (num_tasks <= 0) return;
  if (num_tasks == 1 || context.num_threads <= 1) {
    for (int64_t task = 0; task < num_tasks; ++task) body(task, 0);
    return;
  }
  if (context.host_parallel_for) {
    return RunOnHost(context, num_tasks, HostParts(context, num_tasks),
                     [&](int64_t begin, int64_t end, int64_t worker) {
                       for (int64_t task = begin; task < end; ++task) body(task, worker);
                     });
  }
#if defined(NORMKIT_THREADING_TBB)
  context.threading->arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, num_tasks, 1),
                      [&](const tbb::blocked_range<int64_t>& range) {
                        // The slot of this thread in the context's arena: unique among the
                        // threads running in it (tasks never wait inside a body, so a
                        // thread runs one at a time).
                        const int64_t worker = tbb::this_task_arena::current_thread_index();
                        for (int64_t task = range.begin(); task < range.end(); ++task) {
                          body(task, worker);
                        }
                      });
  });
#elif defined(NORMKIT_THREADING_OPENMP)
  const int threads = OmpThreads(ParallelWorkers(context, num_tasks));
  FirstException first;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t task = 0; task < num_tasks; ++task) {
    first.Run([&] { body(task, omp_get_thread_num()); });
  }
  first.Rethrow();
#elif defined(NORMKIT_THREADING_POOL)
  FirstException first;
  RunOnPool(num_tasks, ParallelWorkers(context, num_tasks),
            [&](int64_t begin, int64_t end, int64_t thread) {
              for (int64_t task = begin; task < end; ++task) {
                first.Run([&] { body(task, thread); });
              }
            });
  first.Rethrow();
#else
  for (int64_t task = 0; task < num_tasks; ++task) body(task, 0);
#endif
}

const char* ThreadingBackendName() {
#if defined(NORMKIT_THREADING_TBB)
  return "tbb";
#elif defined(NORMKIT_THREADING_OPENMP)
  return "openmp";
#elif defined(NORMKIT_THREADING_POOL)
  return "pool";
#else
  return "serial";
#endif
}

}  // namespace normkit
