# SPDX-License-Identifier: Apache-2.0
"""What the like-for-like peer scripts share: PyTorch's outputs reused, and the timer."""
import os
import statistics
import sys
import time

# glibc keeps freed memory (set before Python starts), so a PyTorch op without out= reuses
# the previous call's output instead of faulting in fresh pages every call.
_KEEP = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 34)}


def reexec_keeping_freed_memory():
    """Re-executes the script with glibc told to keep freed memory, unless it already is."""
    if any(os.environ.get(k) != v for k, v in _KEEP.items()):
        os.environ.update(_KEEP)
        os.execv(sys.executable, [sys.executable] + sys.argv)


def timed(fn, reps):
    """The median of `reps` calls of fn, in seconds."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
