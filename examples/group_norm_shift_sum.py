#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Python caller through ctypes: group norm (+ fused SiLU), layer norm of [rows, D], and
the CASSI shift-sum operators (forward, adjoint, pseudo-inverse, one GAP iteration).

    python3 examples/group_norm_shift_sum.py [path/to/libnormkit.so]

Each result is checked against numpy in float64.
"""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import affine_batch_norm  # noqa: E402
from affine_batch_norm import (CHANNELS_FIRST, CHANNELS_LAST, NormkitError, Tensor, check,  # noqa: E402
                               describe, fptr)

SILU = 2
ALONG_W = 0
MASK_HW = 1
PINV_MOORE_PENROSE = 0


class ShiftSumParams(ctypes.Structure):
    """Room for a normkit_shift_sum_params, filled by normkit_shift_sum_params_set (no fields
    mirrored here); `step` is kept beside it for the shapes this file computes."""

    _fields_ = [("_words", ctypes.c_uint64 * 16)]


def load(path):
    lib = affine_batch_norm.load(path)  # the descriptor helpers
    lib.normkit_shift_sum_params_struct_size.restype = ctypes.c_size_t
    lib.normkit_shift_sum_params_set.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_double,
                                                 ctypes.c_int32, ctypes.c_void_p]
    lib.normkit_shift_sum_params_set.restype = None
    if lib.normkit_shift_sum_params_struct_size() > ctypes.sizeof(ShiftSumParams):
        raise RuntimeError("this libnormkit's shift-sum params are larger than this example's room for them")
    f32p, tp = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(Tensor)
    pp = ctypes.POINTER(ShiftSumParams)
    lib.normkit_group_norm.argtypes = [ctypes.c_void_p, tp, ctypes.c_int64, f32p, f32p, ctypes.c_float,
                                       ctypes.c_int32, tp, f32p, f32p]
    lib.normkit_layer_norm.argtypes = [ctypes.c_void_p, tp, f32p, f32p, ctypes.c_float, tp, f32p, f32p]
    lib.normkit_shift_sum.argtypes = [ctypes.c_void_p, tp, pp, tp]
    lib.normkit_shift_sum_adjoint.argtypes = [ctypes.c_void_p, tp, pp, tp]
    lib.normkit_shift_sum_pinv.argtypes = [ctypes.c_void_p, tp, pp, ctypes.c_int32, ctypes.c_void_p, tp]
    lib.normkit_shift_sum_gap_step.argtypes = [ctypes.c_void_p, tp, tp, pp, ctypes.c_double, ctypes.c_double,
                                               ctypes.c_void_p]
    for fn in (lib.normkit_group_norm, lib.normkit_layer_norm, lib.normkit_shift_sum,
               lib.normkit_shift_sum_adjoint, lib.normkit_shift_sum_pinv, lib.normkit_shift_sum_gap_step):
        fn.restype = ctypes.c_int
    lib.normkit_last_error.restype = ctypes.c_char_p
    return lib


def group_norm(lib, x, groups, gamma, beta, eps=1e-5, activation=0, layout=CHANNELS_FIRST):
    y = np.empty_like(x)
    logical = x.shape if layout == CHANNELS_FIRST else (x.shape[0], x.shape[-1]) + x.shape[1:-1]
    xt, yt = describe(x, logical, layout), describe(y, logical, layout)
    check(lib, lib.normkit_group_norm(None, ctypes.byref(xt), groups, fptr(gamma), fptr(beta), eps, activation,
                                      ctypes.byref(yt), None, None))
    return y


def shift_sum_params(lib, step, scale, mask):
    p = ShiftSumParams()
    kind, data = (MASK_HW, mask.ctypes.data) if mask is not None else (0, None)
    lib.normkit_shift_sum_params_set(ctypes.byref(p), step, ALONG_W, scale, kind, data)
    p.step = step
    p.mask_array = mask  # keeps the mask alive while the params point at it
    return p


def shift_sum(lib, x, params):
    b, c, h, w = x.shape
    y = np.empty((b, 1, h, w + (c - 1) * abs(params.step)), np.float32)
    xt, yt = describe(x, x.shape, CHANNELS_FIRST), describe(y, y.shape, CHANNELS_FIRST)
    check(lib, lib.normkit_shift_sum(None, ctypes.byref(xt), ctypes.byref(params), ctypes.byref(yt)))
    return y


def shift_sum_pinv(lib, y, params, x_shape):
    x = np.empty(x_shape, np.float32)
    xt, yt = describe(x, x.shape, CHANNELS_FIRST), describe(y, y.shape, CHANNELS_FIRST)
    check(lib, lib.normkit_shift_sum_pinv(None, ctypes.byref(yt), ctypes.byref(params), PINV_MOORE_PENROSE, None,
                                          ctypes.byref(xt)))
    return x


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "build", "libnormkit.so")
    lib = load(path)
    rng = np.random.default_rng(1)
    failures = 0

    def expect(name, got, want, tol=1e-5):
        nonlocal failures
        err = np.max(np.abs(got.astype(np.float64) - want) / (1 + np.abs(want)))
        failures += 0 if err < tol else 1
        print(f"{name}: max rel err {err:.1e} {'ok' if err < tol else 'FAILED'}")

    # Group norm, NCHW and NHWC, with a large mean (where E[x^2] - E[x]^2 would fail).
    n, c, h, w, g = 2, 16, 9, 11, 4
    x = (rng.standard_normal((n, c, h, w)) + 1e3).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    xg = x.astype(np.float64).reshape(n, g, -1)
    norm = ((xg - xg.mean(2, keepdims=True)) / np.sqrt(xg.var(2, keepdims=True) + 1e-5)).reshape(x.shape)
    want = norm * gamma[:, None, None] + beta[:, None, None]
    expect("group_norm NCHW", group_norm(lib, x, g, gamma, beta), want)
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    silu = want / (1 + np.exp(-want))
    expect("group_norm NHWC + SiLU", group_norm(lib, x_nhwc, g, gamma, beta, 1e-5, SILU, CHANNELS_LAST),
           silu.transpose(0, 2, 3, 1))

    # Layer norm over the last dim of [rows, D].
    rows = rng.standard_normal((64, 96)).astype(np.float32)
    out = np.empty_like(rows)
    rt, ot = describe(rows, rows.shape, CHANNELS_FIRST), describe(out, out.shape, CHANNELS_FIRST)
    check(lib, lib.normkit_layer_norm(None, ctypes.byref(rt), None, None, 1e-5, ctypes.byref(ot), None, None))
    r64 = rows.astype(np.float64)
    expect("layer_norm [64, 96]", out,
           (r64 - r64.mean(1, keepdims=True)) / np.sqrt(r64.var(1, keepdims=True) + 1e-5))

    # Shift-sum with the seed's [H, W] mask and s = 2/C: A, then pinv, then A(pinv(y)) == y.
    b, c, h, w, s = 2, 28, 32, 48, 2
    x = rng.random((b, c, h, w), dtype=np.float32)
    mask = (rng.random((h, w)) > 0.3).astype(np.float32)
    params = shift_sum_params(lib, s, 2.0 / c, mask)
    y = shift_sum(lib, x, params)
    want = np.zeros((b, 1, h, w + (c - 1) * s))
    for i in range(c):  # seed 003's loop
        want[:, 0, :, i * s:i * s + w] += (2.0 / c) * x[:, i].astype(np.float64) * mask
    expect("shift_sum A", y, want)
    xp = shift_sum_pinv(lib, y, params, x.shape)
    covered = np.zeros_like(want[0, 0])
    for i in range(c):
        covered[:, i * s:i * s + w] += mask
    expect("A(pinv(y)) == y where covered", shift_sum(lib, xp, params)[..., covered > 0], want[..., covered > 0])

    # One GAP iteration from pinv(y): the residual stays at 0.
    xt, yt = describe(xp, xp.shape, CHANNELS_FIRST), describe(y, y.shape, CHANNELS_FIRST)
    before = xp.copy()
    check(lib, lib.normkit_shift_sum_gap_step(None, ctypes.byref(xt), ctypes.byref(yt), ctypes.byref(params),
                                              1.0, 0.0, None))
    expect("GAP step at a consistent x leaves x unchanged", xp, before.astype(np.float64), 1e-4)

    try:
        group_norm(lib, x_nhwc, 3, gamma, beta, layout=CHANNELS_LAST)
        failures += 1
        print("groups=3 with C=16 was accepted: FAILED")
    except NormkitError as e:
        print(f"expected error: {e}")
    print("all checks passed" if failures == 0 else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
