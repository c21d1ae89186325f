# SPDX-License-Identifier: Apache-2.0
"""Contexts whose loops run on the host's parallel-for: a Python pool and a C one (ctypes)."""
import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import normkit

RNG = np.random.default_rng(11)
# Large enough that group norm and layer norm split into several tasks.
X = RNG.standard_normal((4, 64, 48, 48)).astype(np.float32) * 3 + 1
ROWS = RNG.standard_normal((4096, 96)).astype(np.float32)


def ref_group_norm(x, groups, eps):
    g = x.astype(np.float64).reshape(x.shape[0], groups, -1)
    y = (g - g.mean(axis=2, keepdims=True)) / np.sqrt(g.var(axis=2, keepdims=True) + eps)
    return y.reshape(x.shape)


def run_all(context):
    """Outputs of ops whose large inputs split into tasks, under `context`."""
    return [
        normkit.group_norm(X, 8, context=context),
        normkit.group_norm(np.ascontiguousarray(X.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2),
                           8, context=context),
        normkit.layer_norm(ROWS, context=context),
        normkit.affine(X, np.full(64, 2, np.float32), np.ones(64, np.float32), context=context),
    ]


def assert_bitwise(results, expected):
    for r, e in zip(results, expected):
        assert r.tobytes() == e.tobytes()


class Recorder:
    """A parallel_for on a ThreadPoolExecutor that records what it was asked."""

    def __init__(self, workers):
        self.executor = ThreadPoolExecutor(workers)
        self.sizes, self.threads = [], set()

    def __call__(self, n, run):
        self.sizes.append(n)

        def task(i):
            self.threads.add(threading.get_ident())
            run(i)

        list(self.executor.map(task, range(n)))


def test_python_pool_is_used_and_bitwise_identical():
    expected = run_all(normkit.Context(1))
    pool = Recorder(3)
    context = normkit.Context(3, parallel_for=pool)
    assert context.num_threads == 3 and context.parallel_for is pool
    results = run_all(context)
    assert_bitwise(results, expected)
    np.testing.assert_allclose(results[0], ref_group_norm(X, 8, 1e-5), rtol=1e-5, atol=1e-5)
    assert pool.sizes and max(pool.sizes) <= 3 and max(pool.sizes) > 1
    assert len(pool.threads) > 1  # the tasks ran on the pool's threads


def test_pool_that_skips_or_repeats_tasks_still_gives_the_whole_result():
    expected = run_all(normkit.Context(1))

    def skip_all(n, run):
        pass

    def twice_in_reverse(n, run):
        for i in reversed(range(n)):
            run(i)
            run(i)  # a second run(i) of the same loop does nothing

    for pool in (skip_all, twice_in_reverse):
        assert_bitwise(run_all(normkit.Context(4, parallel_for=pool)), expected)


def test_pool_errors_reach_the_caller_after_a_whole_result():
    expected = normkit.group_norm(X, 8)

    def fails_midway(n, run):
        run(0)
        raise KeyError("pool broke")

    def out_of_range(n, run):
        run(n)

    out = np.empty_like(X)
    with pytest.raises(KeyError, match="pool broke"):
        normkit.group_norm(X, 8, out=out, context=normkit.Context(2, parallel_for=fails_midway))
    assert out.tobytes() == expected.tobytes()  # the skipped tasks ran on the calling thread
    with pytest.raises(IndexError, match="outside"):
        normkit.group_norm(X, 8, context=normkit.Context(2, parallel_for=out_of_range))
    # The error belonged to that call only.
    assert normkit.group_norm(X, 8).tobytes() == expected.tobytes()


def test_run_kept_past_return_raises():
    kept = []

    def keep(n, run):
        kept.append(run)
        for i in range(n):
            run(i)

    normkit.group_norm(X, 8, context=normkit.Context(2, parallel_for=keep))
    with pytest.raises(RuntimeError, match="after return"):
        kept[0](0)


def test_context_arguments_are_checked():
    with pytest.raises(ValueError, match="num_threads"):
        normkit.Context(0, parallel_for=lambda n, run: None)
    with pytest.raises(TypeError):
        normkit.Context(2, parallel_for=3)
    with pytest.raises(ValueError, match="parallel_for"):
        normkit.Context.from_c_parallel_for(2, 0)


# The C form: void (*)(void* pool, int64_t n, void (*task)(void*, int64_t), void* task_context).
TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, TASK, ctypes.c_void_p)


def test_c_parallel_for_through_ctypes():
    calls = []

    @PARALLEL_FOR
    def serial_pool(pool, n, task, task_context):
        calls.append((pool, n))
        for i in range(n):
            task(task_context, i)

    address = ctypes.cast(serial_pool, ctypes.c_void_p).value
    context = normkit.Context.from_c_parallel_for(2, address, pool=1234)
    assert context.num_threads == 2 and context.parallel_for is None
    assert_bitwise(run_all(context), run_all(normkit.Context(1)))
    assert calls and all(pool == 1234 and 1 <= n <= 2 for pool, n in calls)
