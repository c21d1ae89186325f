// SPDX-License-Identifier: Apache-2.0
// normkit's own thread pool, behind the POOL threading backend.
//
// Why: normkit's calls on edge shapes last 2-5 us, and an `omp parallel` region costs
// about 0.6 us to open and close even when empty (libgomp, this 2-core VM); TBB's
// arena + parallel_for is slower still. A pool whose workers spin on one atomic word
// for a while after each job starts and joins a 2-thread job in about 0.1 us.
#ifndef NORMKIT_CORE_THREAD_POOL_H_
#define NORMKIT_CORE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/function_ref.h"

namespace normkit {

// Lets one thread wait until a condition another thread makes true holds: it spins
// first (cheap when the wait is short, as between the calls of an inference loop),
// then sleeps until Wake(). The waker makes the condition true with a seq_cst store
// before it calls Wake(), and ready() reads it with a seq_cst load: then either the
// waiter sees the condition or the waker sees the waiter asleep, never neither.
class SpinWaiter {
 public:
  // spin = false sleeps at once (for threads beyond the machine's: spinning there
  // only takes the core from the thread being waited for).
  void Wait(FunctionRef<bool()> ready, bool spin);
  void Wake();

 private:
  std::atomic<bool> sleeping_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

class ThreadPool {
 public:
  // job(part, thread): runs one part of a job; `thread` is the index, in [0, threads),
  // of the thread running it (0: the caller), for per-thread scratch.
  using Job = FunctionRef<void(int64_t, int64_t)>;
  // Jobs of more parts run on the calling thread alone (a context may ask for more
  // threads; contexts larger than the machine only oversubscribe it).
  static constexpr int64_t kMaxParts = 256;

  // The process-wide pool, or nullptr when it cannot be made (out of memory). Made on
  // first use; its workers are started as jobs ask for them. A forked child gets a
  // fresh pool (the parent's workers do not exist there).
  static ThreadPool* Instance();

  // Runs job(part, thread) once for every part in [0, parts), on the calling thread and
  // up to parts - 1 workers, and returns when all parts have returned. Each part goes to
  // whichever thread claims it first, so the caller runs parts no worker has started
  // (a worker that wakes late, or not at all, only makes the call slower, never
  // stuck), and a part's thread index may be any in [0, parts). The caller runs every
  // part itself when the pool is busy with another caller's job, when Run is called
  // from inside a job, or for more than kMaxParts parts. The job must not throw.
  void Run(int64_t parts, Job job);

  ThreadPool() = default;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  struct Worker;

  // Starts workers until there are count - 1 of them (or as many as the system
  // allows); returns the number of threads (workers + the caller). Called with busy_
  // held.
  int64_t Grow(int64_t count);
  void WorkerLoop(Worker& self);
  // Claims and runs parts of the job of `generation` as thread `thread` until none is
  // left.
  void RunParts(uint64_t generation, int64_t thread);
  // Runs the part a claim word names (the word as it was claimed) as thread `thread`.
  void RunPart(uint64_t word, int64_t thread);

  // Held by the one caller whose job the workers run.
  std::mutex busy_;
  // The job's generation (bits 32 and up), its part count (bits 16-31) and its next
  // unclaimed part (bits 0-15). Workers wait for the generation to change; worker i
  // joins a job iff i < its part count. A part is claimed by a compare-and-swap on the
  // whole word, so a worker that wakes after its generation's job is over claims
  // nothing and never touches that job.
  alignas(64) std::atomic<uint64_t> claim_{0};
  // The current job: written before claim_ publishes its generation, read only by a
  // thread that has claimed one of its parts.
  std::atomic<const Job*> job_{nullptr};
  // Parts of the current job that have returned.
  alignas(64) std::atomic<int64_t> finished_{0};
  SpinWaiter caller_;
  // Threads past the machine's hardware threads never spin.
  const int64_t hardware_threads_ = HardwareThreads();
  static int64_t HardwareThreads();
  // Index 0 unused (thread 0 is the caller). Grown under busy_; never shrunk.
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace normkit

#endif  // NORMKIT_CORE_THREAD_POOL_H_
