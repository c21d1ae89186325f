#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""normkit's CUDA path against PyTorch CUDA on the seed shapes, in one process.

    python3 bench/cuda_torch_peer.py path/to/libnormkit.so [--quick]

Both libraries work on the same torch CUDA tensors (normkit through ctypes on their
device pointers, on the legacy default stream that torch also uses). Each op is timed
with CUDA events, interleaved with a device-to-device copy of the same bytes, median of
the rounds. Columns: milliseconds, and each one's ratio = copy time / op time. normkit's
result is compared with torch's (float32, relative 1e-4) before anything is timed.
PyTorch is the peer here, never a dependency of normkit.
"""
import ctypes
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from affine_batch_norm import CHANNELS_FIRST, CHANNELS_LAST, FLOAT32, Tensor  # noqa: E402
from group_norm_shift_sum import MASK_HW, ShiftSumParams  # noqa: E402

CUDA = 1
SILU = 2
ROUNDS = 5 if "--quick" in sys.argv else 15
failures = 0


def load(path):
    lib = ctypes.CDLL(path)
    vp, tp, pp = ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.POINTER(ShiftSumParams)
    sig = {
        "normkit_affine": [vp, tp, vp, vp, ctypes.c_int32, tp],
        "normkit_batch_norm_inference": [vp, tp, vp, vp, vp, vp, ctypes.c_float, tp],
        "normkit_group_norm": [vp, tp, ctypes.c_int64, vp, vp, ctypes.c_float, ctypes.c_int32, tp, vp, vp],
        "normkit_layer_norm": [vp, tp, vp, vp, ctypes.c_float, tp, vp, vp],
        "normkit_rms_norm": [vp, tp, vp, ctypes.c_float, tp, vp],
        "normkit_shift_sum": [vp, tp, pp, tp],
        "normkit_shift_sum_adjoint": [vp, tp, pp, tp],
    }
    for name, args in sig.items():
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int
    lib.normkit_last_error.restype = ctypes.c_char_p
    return lib


def desc(t, layout=CHANNELS_FIRST):
    """A descriptor of a CUDA float32 tensor; NHWC tensors are torch channels_last."""
    d = Tensor()
    d.struct_size = ctypes.sizeof(Tensor)
    d.dtype, d.layout, d.device, d.device_index = FLOAT32, layout, CUDA, t.device.index or 0
    d.rank = t.dim()
    for i, s in enumerate(t.shape):  # torch's shape is the logical N, C, spatial...
        d.shape[i] = s
    d.data = t.data_ptr()
    return d


def call(lib, fn, *args):
    st = fn(*args)
    if st != 0:
        raise RuntimeError(lib.normkit_last_error().decode())


def median_ms(fn):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(ROUNDS):
        a.record()
        for _ in range(5):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 5)
    times.sort()
    return times[len(times) // 2]


def row(op, shape, layout, nbytes, ours, theirs, ours_out, theirs_out):
    global failures
    ok = torch.allclose(ours_out, theirs_out, rtol=1e-4, atol=1e-4)
    failures += not ok
    src = torch.empty(nbytes // 8, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ours(), theirs(), dst.copy_(src)  # warm up
    t_ours, t_theirs, t_copy = median_ms(ours), median_ms(theirs), median_ms(lambda: dst.copy_(src))
    print(f"| {op:<22} | {shape:<22} | {layout} | {t_ours:7.3f} | {t_copy / t_ours:5.2f} "
          f"| {t_theirs:7.3f} | {t_copy / t_theirs:5.2f} | {t_theirs / t_ours:5.2f} | {'ok' if ok else 'FAIL'} |",
          flush=True)


def tensor(shape, layout, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    t = torch.randn(shape, device="cuda", generator=g)
    return t.contiguous(memory_format=torch.channels_last) if layout == CHANNELS_LAST else t


def shape_name(s):
    return "x".join(map(str, s))


def layout_name(layout):
    return "NHWC" if layout == CHANNELS_LAST else "NCHW"


def bench_affine(lib, shape, layout):
    x = tensor(shape, layout, 1)
    y = torch.empty_like(x)
    c = shape[1]
    w, b = torch.randn(c, device="cuda"), torch.randn(c, device="cuda")
    mean, var = torch.randn(c, device="cuda"), torch.rand(c, device="cuda") + 0.1
    xd, yd = desc(x, layout), desc(y, layout)
    bshape = (1, c) + (1,) * (len(shape) - 2)
    nbytes = 2 * x.numel() * 4

    def ours():
        call(lib, lib.normkit_affine, None, xd, w.data_ptr(), b.data_ptr(), 0, yd)

    ours()
    ref = x * w.view(bshape) + b.view(bshape)
    row("affine x*w+b", shape_name(shape), layout_name(layout), nbytes, ours,
        lambda: torch.addcmul(b.view(bshape), x, w.view(bshape)), y.clone(), ref)

    def ours_bn():
        call(lib, lib.normkit_batch_norm_inference, None, xd, w.data_ptr(), b.data_ptr(), mean.data_ptr(),
             var.data_ptr(), 1e-5, yd)

    ours_bn()
    row("batch_norm (eval)", shape_name(shape), layout_name(layout), nbytes, ours_bn,
        lambda: F.batch_norm(x, mean, var, w, b, False, 0.0, 1e-5), y.clone(),
        F.batch_norm(x, mean, var, w, b, False, 0.0, 1e-5))


def bench_group_norm(lib, shape, groups, layout, silu):
    x = tensor(shape, layout, 2)
    y = torch.empty_like(x)
    c = shape[1]
    w, b = torch.randn(c, device="cuda"), torch.randn(c, device="cuda")
    xd, yd = desc(x, layout), desc(y, layout)

    def ours():
        call(lib, lib.normkit_group_norm, None, xd, groups, w.data_ptr(), b.data_ptr(), 1e-5,
             SILU if silu else 0, yd, None, None)

    def theirs():
        r = F.group_norm(x, groups, w, b, 1e-5)
        return F.silu(r) if silu else r

    ours()
    name = f"group_norm G={groups}" + (" +SiLU" if silu else "")
    row(name, shape_name(shape), layout_name(layout), 2 * x.numel() * 4, ours, theirs, y.clone(), theirs())


def bench_rows(lib, rows, d, rms):
    x = tensor((rows, d), CHANNELS_FIRST, 3)
    y = torch.empty_like(x)
    w, b = torch.randn(d, device="cuda"), torch.randn(d, device="cuda")
    xd, yd = desc(x), desc(y)
    if rms:
        def ours():
            call(lib, lib.normkit_rms_norm, None, xd, w.data_ptr(), 1e-5, yd, None)

        def theirs():
            return F.rms_norm(x, (d,), w, 1e-5)
    else:
        def ours():
            call(lib, lib.normkit_layer_norm, None, xd, w.data_ptr(), b.data_ptr(), 1e-5, yd, None, None)

        def theirs():
            return F.layer_norm(x, (d,), w, b, 1e-5)
    ours()
    row("rms_norm" if rms else "layer_norm", f"{rows}x{d}", "rows", 2 * x.numel() * 4, ours, theirs, y.clone(),
        theirs())


def bench_shift_sum(lib, B, C, H, W, S):
    """Against the seed's loop form in torch (slice-add per channel; mask applied first)."""
    wo = W + (C - 1) * S
    x = tensor((B, C, H, W), CHANNELS_FIRST, 4)
    mask = torch.rand(H, W, device="cuda")
    y = torch.empty(B, 1, H, wo, device="cuda")
    xt = torch.empty_like(x)
    p = ShiftSumParams()
    p.struct_size, p.axis, p.step, p.scale = ctypes.sizeof(ShiftSumParams), 0, S, 1.0
    p.mask_kind, p.mask = MASK_HW, mask.data_ptr()
    xd, yd, xtd = desc(x), desc(y), desc(xt)

    def ours():
        call(lib, lib.normkit_shift_sum, None, xd, ctypes.byref(p), yd)

    def theirs():
        out = torch.zeros(B, 1, H, wo, device="cuda")
        mx = x * mask
        for c in range(C):
            out[:, 0, :, c * S:c * S + W] += mx[:, c]
        return out

    ours()
    nbytes = (x.numel() + y.numel()) * 4
    name = f"{B}x{C}x{H}x{W} S={S}"
    row("shift_sum (A)", name, "NCHW", nbytes, ours, theirs, y.clone(), theirs())

    def ours_t():
        call(lib, lib.normkit_shift_sum_adjoint, None, yd, ctypes.byref(p), xtd)

    def theirs_t():
        return torch.stack([y[:, 0, :, c * S:c * S + W] for c in range(C)], 1) * mask

    ours_t()
    row("shift_sum_adjoint (A^T)", name, "NCHW", nbytes, ours_t, theirs_t, xt.clone(), theirs_t())


def main():
    lib = load(sys.argv[1])
    quick = "--quick" in sys.argv
    print(f"normkit CUDA vs PyTorch {torch.__version__} on {torch.cuda.get_device_name()}; "
          "ratio = same-run D2D copy time of the same bytes / op time; x = torch ms / normkit ms\n")
    print("| op | shape | lay | normkit ms | ratio | torch ms | ratio | x | ok |")
    print("|---|---|---|---|---|---|---|---|---|")
    for layout in (CHANNELS_FIRST, CHANNELS_LAST):
        bench_affine(lib, (16, 256, 64, 64) if quick else (64, 256, 64, 64), layout)
        bench_affine(lib, (128, 1024, 4, 4), layout)
    gn = [(8, 256, 28, 28)] if quick else [(128, 256, 28, 28), (32, 512, 56, 56)]
    for s in gn + [(1, 64, 56, 56), (1, 256, 14, 14)]:
        for layout in (CHANNELS_FIRST, CHANNELS_LAST):
            for silu in (False, True):
                bench_group_norm(lib, s, 32, layout, silu)
    bench_rows(lib, 4096, 768, False)
    bench_rows(lib, 4096, 768, True)
    bench_shift_sum(lib, 16, 28, 256, 256, 2)
    if not quick:
        bench_shift_sum(lib, 1, 28, 660, 660, 2)
    print("\n" + ("SOME RESULTS DISAGREE WITH PYTORCH" if failures else "all results agree with PyTorch"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
