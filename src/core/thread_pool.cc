// SPDX-License-Identifier: Apache-2.0
#include "core/thread_pool.h"

#include <pthread.h>

#include <chrono>
#include <mutex>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace normkit {
namespace {

// How long a waiter spins before it sleeps. Long enough to span the gap between the
// calls of an inference loop (so the next call finds its workers awake), short enough
// that an idle worker gives its core back soon; waking a sleeping worker costs a
// futex call and a reschedule (5-50 us on a VM).
constexpr std::chrono::microseconds kSpinTime{100};

// claim_'s fields.
constexpr uint64_t Generation(uint64_t word) {
  return word >> 32;
}
constexpr int64_t Parts(uint64_t word) {
  return static_cast<int64_t>((word >> 16) & 0xffff);
}
constexpr int64_t NextPart(uint64_t word) {
  return static_cast<int64_t>(word & 0xffff);
}
static_assert(ThreadPool::kMaxParts <= 0xffff, "parts are 16-bit fields of the claim word");

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::atomic<ThreadPool*> g_pool{nullptr};
// Set while this thread runs a part of a job (a nested Run must not wait for the pool
// it is part of).
thread_local bool t_in_job = false;

// In a forked child only the forking thread exists: forget the parent's pool (its
// workers are gone, its mutex may be held) and let the next call make a new one.
void ForgetPoolInChild() {
  g_pool.store(nullptr);
}

}  // namespace

void SpinWaiter::Wait(FunctionRef<bool()> ready, bool spin) {
  if (ready()) return;
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  while (spin) {
    for (int i = 0; i < 64; ++i) {
      CpuRelax();
      if (ready()) return;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  sleeping_.store(true);
  while (!ready()) wake_.wait(lock);
  sleeping_.store(false, std::memory_order_relaxed);
}

void SpinWaiter::Wake() {
  if (!sleeping_.load()) return;
  // Taking the mutex orders this after the waiter's wait() began (it held the mutex
  // from setting sleeping_ until then), so the notification cannot be lost.
  { std::lock_guard<std::mutex> lock(mutex_); }
  wake_.notify_one();
}

struct ThreadPool::Worker {
  explicit Worker(int64_t index) : index(index) {}
  const int64_t index;
  // The generation of the last job this worker saw.
  uint64_t seen = 0;
  SpinWaiter waiter;
};

int64_t ThreadPool::HardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int64_t>(n);
}

ThreadPool* ThreadPool::Instance() {
  ThreadPool* pool = g_pool.load(std::memory_order_acquire);
  if (pool != nullptr) return pool;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, ForgetPoolInChild); });
  // Never destroyed: its workers may still be waiting while the process exits.
  ThreadPool* fresh = new (std::nothrow) ThreadPool();
  if (fresh == nullptr) return nullptr;
  if (g_pool.compare_exchange_strong(pool, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;  // another thread made one first (no workers started yet)
  return pool;
}

int64_t ThreadPool::Grow(int64_t count) {
  try {
    if (workers_.empty()) workers_.emplace_back();  // slot 0: the caller
    const uint64_t generation = Generation(claim_.load(std::memory_order_relaxed));
    while (static_cast<int64_t>(workers_.size()) < count) {
      auto worker = std::make_unique<Worker>(static_cast<int64_t>(workers_.size()));
      worker->seen = generation;
      workers_.reserve(workers_.size() + 1);  // so that push_back below cannot throw
      Worker& self = *worker;
      std::thread([this, &self] { WorkerLoop(self); }).detach();
      workers_.push_back(std::move(worker));
    }
  } catch (...) {  // std::bad_alloc or std::system_error: use the workers there are
  }
  return workers_.empty() ? 1 : static_cast<int64_t>(workers_.size());
}

void ThreadPool::RunPart(uint64_t word, int64_t thread) {
  t_in_job = true;
  (*job_.load(std::memory_order_acquire))(NextPart(word), thread);
  t_in_job = false;
  // The last part to return wakes the caller (who may be asleep waiting for it).
  if (finished_.fetch_add(1) + 1 == Parts(word) && thread != 0) caller_.Wake();
}

void ThreadPool::RunParts(uint64_t generation, int64_t thread) {
  uint64_t word = claim_.load();
  while (Generation(word) == generation && NextPart(word) < Parts(word)) {
    if (claim_.compare_exchange_weak(word, word + 1)) {
      RunPart(word, thread);
      word = claim_.load();
    }  // else word was reloaded
  }
}

void ThreadPool::WorkerLoop(Worker& self) {
  const bool spin = self.index < hardware_threads_;
  for (;;) {
    uint64_t word = 0;
    self.waiter.Wait(
        [&] {
          word = claim_.load();
          return Generation(word) != self.seen;
        },
        spin);
    self.seen = Generation(word);
    if (self.index < Parts(word)) RunParts(self.seen, self.index);
  }
}

void ThreadPool::Run(int64_t parts, Job job) {
  std::unique_lock<std::mutex> busy;
  if (parts > 1 && parts <= kMaxParts && !t_in_job) {
    busy = std::unique_lock<std::mutex>(busy_, std::try_to_lock);
  }
  // One part, too many, a nested call, or another caller's job running: this caller
  // runs every part. Parts are fixed by the caller, so the results are the same.
  if (!busy.owns_lock() || Grow(parts) <= 1) {
    for (int64_t part = 0; part < parts; ++part) job(part, 0);
    return;
  }
  job_.store(&job, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  const uint64_t generation = Generation(claim_.load(std::memory_order_relaxed)) + 1;
  // Published with part 0 already claimed by the caller: no compare-and-swap on a
  // line the waiting workers are reading before the caller starts its part.
  const uint64_t word = (generation << 32) | (static_cast<uint64_t>(parts) << 16);
  claim_.store(word + 1);
  const int64_t workers = static_cast<int64_t>(workers_.size());
  for (int64_t i = 1; i < parts && i < workers; ++i) workers_[i]->waiter.Wake();
  RunPart(word, 0);
  RunParts(generation, 0);
  // Every part is claimed now; wait for those the workers still run.
  caller_.Wait([&] { return finished_.load() == parts; }, parts <= hardware_threads_);
  job_.store(nullptr, std::memory_order_relaxed);
}

}  // namespace normkit
