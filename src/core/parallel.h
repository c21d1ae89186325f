// SPDX-License-Identifier: Apache-2.0
// The one parallel loop of the library, over TBB, OpenMP, normkit's own pool or nothing
// (chosen at configure time).
#ifndef NORMKIT_CORE_PARALLEL_H_
#define NORMKIT_CORE_PARALLEL_H_

#include <cstdint>

#include "core/context.h"
#include "core/function_ref.h"

namespace normkit {

// Calls body(task) once for every task in [0, num_tasks), on at most the context's
// threads. Each task must own a disjoint slice of the output. Task boundaries come
// from the shape alone, so results never depend on the thread count; with one task
// or one thread the body runs on the calling thread. An exception a task throws
// (std::bad_alloc of a task's scratch) reaches the caller after the loop, whatever
// the backend; tasks not yet started then do not run, so outputs may be partly
// written. So ops allocate before their first loop, and no loop body allocates
// (ParallelForWorkers gives each worker scratch made beforehand).
void ParallelFor(const normkit_context& context, int64_t num_tasks,
                 FunctionRef<void(int64_t)> body);

// Like ParallelFor, but hands each worker whole runs of consecutive tasks:
// body(begin, end) covers tasks [begin, end). Ops whose per-task setup matters
// (short calls cut into many small blocks) do it once per run, not once per task.
// Runs are contiguous and, with OpenMP, as even as the task count allows.
void ParallelForRuns(const normkit_context& context, int64_t num_tasks,
                     FunctionRef<void(int64_t, int64_t)> body);

// How many workers a loop of num_tasks tasks may run on: the bound of the `worker`
// index ParallelForWorkers passes.
int64_t ParallelWorkers(const normkit_context& context, int64_t num_tasks);

// Like ParallelFor, with body(task, worker): worker is in [0, ParallelWorkers(context,
// num_tasks)), and no two tasks running at once have the same one. An op makes one
// scratch per worker before the loop (a failed allocation then leaves every output
// untouched), and each task uses its worker's. Which worker runs a task depends on the
// threads, so a task must not depend on what its scratch held before it.
void ParallelForWorkers(const normkit_context& context, int64_t num_tasks,
                        FunctionRef<void(int64_t, int64_t)> body);

// "tbb", "openmp", "pool" or "serial".
const char* ThreadingBackendName();

}  // namespace normkit

#endif  // NORMKIT_CORE_PARALLEL_H_
