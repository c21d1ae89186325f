// SPDX-License-Identifier: Apache-2.0
// One benchmark binary for every op family; each bench_*.cc registers its own.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
