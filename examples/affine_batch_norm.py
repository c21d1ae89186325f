#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Python caller through ctypes: numpy arrays in and out, NCHW and NHWC.

    python3 examples/affine_batch_norm.py [path/to/libnormkit.so]

Checks affine and batch-norm inference against numpy in float64 and shows an error.
"""
import ctypes
import os
import sys

import numpy as np

FLOAT32, CHANNELS_FIRST, CHANNELS_LAST = 1, 0, 1
PER_CHANNEL, PER_SAMPLE_CHANNEL = 0, 1


class Tensor(ctypes.Structure):
    """Room for a normkit_tensor, 8-byte aligned. normkit_tensor_set fills it, so this file
    mirrors none of the struct's fields or padding (load() checks the room is enough)."""

    _fields_ = [("_words", ctypes.c_uint64 * 32)]


_lib = None  # the library describe() fills descriptors with (set by load)


def load(path):
    global _lib
    lib = ctypes.CDLL(path)
    lib.normkit_tensor_struct_size.restype = ctypes.c_size_t
    lib.normkit_tensor_set.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32,
                                       ctypes.c_int32, ctypes.POINTER(ctypes.c_int64)]
    lib.normkit_tensor_set.restype = None
    if lib.normkit_tensor_struct_size() > ctypes.sizeof(Tensor):
        raise RuntimeError("this libnormkit's tensor descriptor is larger than this example's room for it")
    f32p = ctypes.POINTER(ctypes.c_float)
    lib.normkit_affine.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), f32p, f32p, ctypes.c_int32,
                                   ctypes.POINTER(Tensor)]
    lib.normkit_batch_norm_inference.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), f32p, f32p, f32p, f32p,
                                                 ctypes.c_float, ctypes.POINTER(Tensor)]
    for fn in (lib.normkit_affine, lib.normkit_batch_norm_inference):
        fn.restype = ctypes.c_int
    lib.normkit_last_error.restype = ctypes.c_char_p
    lib.normkit_simd_target.restype = ctypes.c_char_p
    lib.normkit_version_string.restype = ctypes.c_char_p
    _lib = lib
    return lib


def describe(array, logical_shape, layout):
    """A descriptor for a C-contiguous float32 array; logical_shape is (N, C, spatial...)."""
    if array.dtype != np.float32:
        raise TypeError(f"normkit: expected a float32 array, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError("normkit: the array must be C-contiguous (np.ascontiguousarray)")
    t = Tensor()
    shape = (ctypes.c_int64 * len(logical_shape))(*logical_shape)
    _lib.normkit_tensor_set(ctypes.byref(t), array.ctypes.data, FLOAT32, layout, len(logical_shape), shape)
    return t


def fptr(a):
    return None if a is None else a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class NormkitError(RuntimeError):
    pass


def check(lib, status):
    if status != 0:
        raise NormkitError(lib.normkit_last_error().decode())


def affine(lib, x, scale, shift, layout=CHANNELS_FIRST, out=None):
    """x: NCHW array, or NHWC array when layout is CHANNELS_LAST. Returns y (new or `out`)."""
    y = np.empty_like(x) if out is None else out
    logical = x.shape if layout == CHANNELS_FIRST else (x.shape[0], x.shape[-1]) + x.shape[1:-1]
    xt, yt = describe(x, logical, layout), describe(y, logical, layout)
    kind = PER_SAMPLE_CHANNEL if scale is not None and scale.ndim == 2 else PER_CHANNEL
    check(lib, lib.normkit_affine(None, ctypes.byref(xt), fptr(scale), fptr(shift), kind, ctypes.byref(yt)))
    return y


def batch_norm(lib, x, gamma, beta, mean, var, eps, layout=CHANNELS_FIRST):
    y = np.empty_like(x)
    logical = x.shape if layout == CHANNELS_FIRST else (x.shape[0], x.shape[-1]) + x.shape[1:-1]
    xt, yt = describe(x, logical, layout), describe(y, logical, layout)
    check(lib, lib.normkit_batch_norm_inference(None, ctypes.byref(xt), fptr(gamma), fptr(beta), fptr(mean),
                                                fptr(var), eps, ctypes.byref(yt)))
    return y


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "build", "libnormkit.so")
    lib = load(path)
    print(f"normkit {lib.normkit_version_string().decode()}, SIMD target {lib.normkit_simd_target().decode()}")
    rng = np.random.default_rng(0)
    n, c, h, w = 2, 5, 7, 9
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    scale = rng.standard_normal(c).astype(np.float32)
    shift = rng.standard_normal(c).astype(np.float32)
    failures = 0

    def expect(name, got, want):
        nonlocal failures
        err = np.max(np.abs(got.astype(np.float64) - want) / (1 + np.abs(want)))
        ok = err < 1e-6
        failures += 0 if ok else 1
        print(f"{name}: max rel err {err:.1e} {'ok' if ok else 'FAILED'}")

    x64 = x.astype(np.float64)
    expect("affine NCHW", affine(lib, x, scale, shift), x64 * scale[:, None, None] + shift[:, None, None])
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    expect("affine NHWC", affine(lib, x_nhwc, scale, shift, CHANNELS_LAST), x_nhwc.astype(np.float64) * scale + shift)
    per_sample = rng.standard_normal((n, c)).astype(np.float32)
    expect("affine per-sample NCHW, scale only", affine(lib, x, per_sample, None),
           x64 * per_sample[:, :, None, None])
    inplace = x.copy()
    affine(lib, inplace, scale, shift, out=inplace)
    expect("affine in place", inplace, x64 * scale[:, None, None] + shift[:, None, None])

    gamma, beta = rng.uniform(0.5, 2, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.uniform(0.1, 2, c).astype(np.float32)
    want = (x64 - mean[:, None, None]) / np.sqrt(var[:, None, None].astype(np.float64) + 1e-5) * gamma[:, None, None] \
        + beta[:, None, None]
    expect("batch_norm NCHW", batch_norm(lib, x, gamma, beta, mean, var, 1e-5), want)
    expect("batch_norm NHWC", batch_norm(lib, x_nhwc, gamma, beta, mean, var, 1e-5, CHANNELS_LAST),
           want.transpose(0, 2, 3, 1))

    try:
        batch_norm(lib, x, gamma, beta, mean, -var, 1e-5)
        failures += 1
        print("negative variance was accepted: FAILED")
    except NormkitError as e:
        print(f"expected error: {e}")
    print("all checks passed" if failures == 0 else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
