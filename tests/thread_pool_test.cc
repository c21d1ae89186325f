// SPDX-License-Identifier: Apache-2.0
// The POOL backend's thread pool (src/core/thread_pool.h), tested directly in every
// backend's build: every part of a job runs exactly once and no thread index runs two
// parts at once, callers racing for the pool each get their whole job done, a nested
// call runs on its caller, sleeping workers wake, and a forked child gets a working pool.
#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace normkit_test {
namespace {

using normkit::ThreadPool;

// Runs one job of `parts` parts and checks it; returns how many distinct thread
// indices ran parts.
int64_t RunAndCheck(ThreadPool& pool, int64_t parts) {
  const size_t n = static_cast<size_t>(parts);
  std::vector<std::atomic<int>> ran(n), used(n), inside(n);
  std::atomic<bool> bad_thread{false}, overlap{false};
  pool.Run(parts, [&](int64_t part, int64_t thread) {
    if (thread < 0 || thread >= parts) {
      bad_thread = true;
      return;
    }
    const size_t t = static_cast<size_t>(thread);
    // A thread index is one thread's: its scratch must never be used twice at once.
    if (inside[t].exchange(1) != 0) overlap = true;
    ran[static_cast<size_t>(part)].fetch_add(1);
    used[t] = 1;
    inside[t] = 0;
  });
  EXPECT_FALSE(bad_thread) << parts << " parts";
  EXPECT_FALSE(overlap) << parts << " parts";
  int64_t threads = 0;
  for (size_t p = 0; p < n; ++p) {
    EXPECT_EQ(ran[p].load(), 1) << "part " << p << " of " << parts;
    threads += used[p].load();
  }
  return threads;
}

TEST(ThreadPool, EveryPartRunsOnce) {
  ThreadPool* pool = ThreadPool::Instance();
  ASSERT_NE(pool, nullptr);
  // Alternating sizes, so workers beyond a small job's parts skip it and still take
  // the next large one.
  int64_t most_threads = 0;
  for (int round = 0; round < 300; ++round) {
    for (int64_t parts : {1, 2, 3, 8, 2, 5, 300}) {
      const int64_t threads = RunAndCheck(*pool, parts);
      if (threads > most_threads) most_threads = threads;
    }
  }
  // Not asserted: how many threads took parts depends on the scheduler.
  std::printf("most threads in one job: %lld\n", static_cast<long long>(most_threads));
}

TEST(ThreadPool, SleepingWorkersWake) {
  ThreadPool* pool = ThreadPool::Instance();
  ASSERT_NE(pool, nullptr);
  for (int round = 0; round < 5; ++round) {
    // Well past the spin time: the workers go to sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    RunAndCheck(*pool, 3);
  }
  // Parts long enough that the caller sleeps before a worker's part is done.
  std::atomic<int> ran{0};
  pool->Run(4, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ran.fetch_add(1);
  });
  EXPECT_EQ(ran.load(), 4);
}

TEST(ThreadPool, CallersRacingForThePoolEachGetTheirWholeJob) {
  ThreadPool* pool = ThreadPool::Instance();
  ASSERT_NE(pool, nullptr);
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < 400; ++i) RunAndCheck(*pool, 2 + (c + i) % 3);
    });
  }
  for (auto& caller : callers) caller.join();
}

TEST(ThreadPool, NestedRunRunsOnItsCaller) {
  ThreadPool* pool = ThreadPool::Instance();
  ASSERT_NE(pool, nullptr);
  std::atomic<int> inner_parts{0};
  std::atomic<bool> inner_elsewhere{false};
  pool->Run(2, [&](int64_t, int64_t) {
    const auto outer = std::this_thread::get_id();
    pool->Run(4, [&](int64_t, int64_t thread) {
      inner_parts.fetch_add(1);
      if (thread != 0 || std::this_thread::get_id() != outer) inner_elsewhere = true;
    });
  });
  EXPECT_EQ(inner_parts.load(), 8);
  EXPECT_FALSE(inner_elsewhere);
}

#if defined(__SANITIZE_THREAD__)
#define NORMKIT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NORMKIT_TSAN 1
#endif
#endif

TEST(ThreadPool, ForkedChildGetsAWorkingPool) {
#if defined(NORMKIT_TSAN)
  GTEST_SKIP() << "ThreadSanitizer does not support threads started after a multi-threaded fork";
#else
  ThreadPool* pool = ThreadPool::Instance();
  ASSERT_NE(pool, nullptr);
  RunAndCheck(*pool, 2);  // the parent's workers exist
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The parent's workers are not in this process: a job must neither wait for them
    // nor lose parts to them.
    ThreadPool* mine = ThreadPool::Instance();
    std::atomic<int> ran{0};
    if (mine != nullptr && mine != pool) mine->Run(2, [&](int64_t, int64_t) { ran.fetch_add(1); });
    _exit(ran.load() == 2 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's pool did not run a 2-part job";
#endif
}

}  // namespace
}  // namespace normkit_test
