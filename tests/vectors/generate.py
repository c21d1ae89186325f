#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the golden vectors shared by the CPU and CUDA tests (tests/vectors/*.txt).

Inputs are float32 (so every backend reads exactly the same values); expected outputs
are computed in float64 by the plain NumPy formulas below. When PyTorch is importable
the group-norm cases are also checked against torch.nn.functional in float64, as an
independent reading of the semantics.

    python3 tests/vectors/generate.py        # rewrites the files next to this script

File format (text, one record per case):
    case <name>
    op <op>                       group_norm | layer_norm | rms_norm | shift_sum |
                                  batch_norm_training | batch_norm_backward |
                                  add_layer_norm | add_rms_norm
    <key> <int or float>          scalars (groups, eps, activation, layout, ...)
    <array> <count> v0 v1 ...     arrays (x, gamma, beta, y, ...), float32 as %.9g,
                                  expected outputs as %.17g
    end
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def silu(v):
    return v / (1.0 + np.exp(-v))


def group_norm_ref(x, groups, gamma, beta, eps, activation, channels_last):
    """x: float32 array in its memory layout; returns float64 y in the same layout."""
    xd = x.astype(np.float64)
    if channels_last:  # N, spatial..., C -> N, C, spatial...
        xd = np.moveaxis(xd, -1, 1)
    n, c = xd.shape[:2]
    g = xd.reshape(n, groups, -1)
    mean = g.mean(axis=2, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(xd.shape)
    shape = (1, c) + (1,) * (xd.ndim - 2)
    if gamma is not None:
        y = y * gamma.astype(np.float64).reshape(shape)
    if beta is not None:
        y = y + beta.astype(np.float64).reshape(shape)
    if activation == 1:
        y = np.maximum(y, 0.0)
    elif activation == 2:
        y = silu(y)
    if channels_last:
        y = np.moveaxis(y, 1, -1)
    return y


def row_norm_ref(x, gamma, beta, eps, rms):
    xd = x.astype(np.float64)
    if rms:
        y = xd / np.sqrt((xd ** 2).mean(axis=1, keepdims=True) + eps)
    else:
        m = xd.mean(axis=1, keepdims=True)
        y = (xd - m) / np.sqrt(((xd - m) ** 2).mean(axis=1, keepdims=True) + eps)
    if gamma is not None:
        y = y * gamma.astype(np.float64)
    if beta is not None and not rms:
        y = y + beta.astype(np.float64)
    return y


def torch_check_group_norm(x, groups, gamma, beta, eps, activation, channels_last, y):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return False
    t = torch.from_numpy(x.astype(np.float64))
    if channels_last:
        # Contiguous NCHW: torch's channels-last GroupNorm kernel uses E[x^2] - E[x]^2
        # and is off by ~5e-7 even in float64 when the mean is 1e4 times the std.
        t = t.movedim(-1, 1).contiguous()
    g = torch.from_numpy(gamma.astype(np.float64)) if gamma is not None else None
    b = torch.from_numpy(beta.astype(np.float64)) if beta is not None else None
    out = F.group_norm(t, groups, g, b, eps)
    if activation == 1:
        out = F.relu(out)
    elif activation == 2:
        out = F.silu(out)
    if channels_last:
        out = out.movedim(1, -1)
    # (float64 summation orders differ by ~1e-10 when the mean is 1e4 times the std)
    diff = float(np.max(np.abs(out.numpy() - y)))
    assert diff < 1e-7, f"torch disagrees by {diff} (shape {x.shape}, groups {groups}, act {activation})"
    return True


def shift_sum_ref(x, s, mask_kind, mask, scale, along_h):
    """x: [B, C, H, W] float32 (channels-first); returns y [B, H', W'] float64."""
    b, c, h, w = x.shape
    spread = (c - 1) * abs(s)
    base = spread if s < 0 else 0
    hp, wp = (h + spread, w) if along_h else (h, w + spread)
    y = np.zeros((b, hp, wp))
    xd = x.astype(np.float64)
    for ch in range(c):
        off = ch * s + base
        if mask_kind == 0:
            m = 1.0
        elif mask_kind == 1:
            m = mask.astype(np.float64)
        elif mask_kind == 2:
            m = mask[ch].astype(np.float64)
        else:  # 4: Phi [C, H', W'], read at the shifted positions
            m = (mask[ch, off:off + h, :] if along_h else mask[ch, :, off:off + w]).astype(np.float64)
        if along_h:
            y[:, off:off + h, :] += scale * m * xd[:, ch]
        else:
            y[:, :, off:off + w] += scale * m * xd[:, ch]
    return y


def shift_sum_cases(rng, w):
    cases = [  # (B, C, H, W, S, mask_kind, along_h, scale)
        (2, 3, 4, 9, 2, 0, False, 1.0), (1, 28, 5, 16, 2, 1, False, 2.0 / 28),
        (2, 5, 3, 7, -1, 2, False, 0.5), (1, 4, 6, 5, 3, 4, False, 1.0),
        (2, 6, 5, 4, 1, 1, True, 1.0), (1, 31, 2, 20, 1, 0, False, 2.0 / 31)]
    for i, (b, c, h, wd, s, kind, along_h, scale) in enumerate(cases):
        x = rng.random((b, c, h, wd), dtype=np.float32)
        spread = (c - 1) * abs(s)
        hp, wp = (h + spread, wd) if along_h else (h, wd + spread)
        mask = None
        if kind == 1:
            mask = (rng.random((h, wd)) > 0.3).astype(np.float32)
        elif kind == 2:
            mask = rng.random((c, h, wd), dtype=np.float32)
        elif kind == 4:
            mask = rng.random((c, hp, wp), dtype=np.float32)
        y = shift_sum_ref(x, s, kind, mask, scale, along_h)
        w.case(f"shift_sum_{i}", "shift_sum",
               {"shape": f"{b} {c} {h} {wd}", "step": s, "mask_kind": kind,
                "axis": 1 if along_h else 0, "scale": repr(scale)},
               {"x": x, "mask": mask}, {"y": y})


def round_to(y, fmt):
    """float64 values rounded to nearest even in `fmt` (their float64 values): float16 by
    numpy's direct conversion, bfloat16 (float32's exponent range, 8 significant bits) by
    rint of the scaled value; float32 outputs keep the exact result."""
    y = np.asarray(y, dtype=np.float64)
    if fmt == "float32":
        return y
    if fmt == "float16":
        return np.float16(y).astype(np.float64)
    _, e = np.frexp(y)
    e = np.maximum(e, -125)  # below 2^-126 the quantum stays 2^-133 (subnormals)
    q = np.ldexp(np.rint(np.ldexp(y, 8 - e)), e - 8)
    return np.where(np.abs(q) > 3.3895313892515355e38, np.copysign(np.inf, y), q)


def half_cases(rng, w):
    """Half storage: inputs exactly representable in x's dtype, outputs the float64 result
    rounded to y's dtype (normkit's float32 result rounded once more may differ from it by
    one unit at the second rounding's ties: the test allows that)."""
    cases = [  # op, x dtype, y dtype, shape, layout, mean offset
        ("affine", "bfloat16", "bfloat16", (2, 5, 7, 9), 0, 0.0),
        ("affine", "float16", "float16", (2, 5, 7, 9), 1, 0.0),
        ("affine", "float32", "bfloat16", (3, 24, 17), 0, 0.0),
        ("affine", "float16", "float32", (1, 16, 6, 6), 1, 0.0),
        ("batch_norm", "bfloat16", "bfloat16", (2, 12, 5, 5), 0, 0.0),
        ("batch_norm", "float16", "float16", (2, 12, 5, 5), 1, 300.0),
        ("batch_norm", "bfloat16", "float32", (2, 12, 13), 0, 0.0),
        ("layer_norm", "bfloat16", "bfloat16", (6, 96), 0, 0.0),
        ("layer_norm", "float32", "float16", (4, 768), 0, 0.0),
        ("rms_norm", "float16", "float16", (5, 33), 0, 0.0),
        ("rms_norm", "bfloat16", "float32", (3, 256), 0, 0.0),
        ("group_norm", "bfloat16", "bfloat16", (2, 8, 5, 5), 0, 0.0),
        ("group_norm", "float16", "float16", (2, 8, 5, 5), 1, 0.0),
        ("group_norm", "float32", "float16", (1, 16, 4, 4), 0, 100.0),
        ("group_norm", "bfloat16", "float32", (2, 6, 7), 1, 0.0),
    ]
    for i, (op, xd, yd, shape, layout, offset) in enumerate(cases):
        c = shape[1] if op in ("affine", "batch_norm", "group_norm") else shape[-1]
        mem_shape = (shape[0],) + shape[2:] + (c,) if layout else shape
        x = round_to(rng.standard_normal(mem_shape) * 2 + offset, xd)
        ch = (lambda a: a.reshape((1,) * (x.ndim - 1) + (c,))) if layout else (
            lambda a: a.reshape((1, c) + (1,) * (x.ndim - 2)))
        scalars = {"x_dtype": xd, "y_dtype": yd, "layout": layout,
                   "shape": " ".join(map(str, shape))}
        inputs = {"x": x.astype(np.float32)}
        if op == "affine":
            scale = rng.uniform(-2, 2, c).astype(np.float32)
            shift = rng.standard_normal(c).astype(np.float32)
            y = x * ch(scale.astype(np.float64)) + ch(shift.astype(np.float64))
            inputs.update(scale=scale, shift=shift)
        elif op == "batch_norm":
            gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
            beta = rng.standard_normal(c).astype(np.float32)
            mean = (rng.standard_normal(c) + offset).astype(np.float32)
            var = rng.uniform(0.5, 2.0, c).astype(np.float32)
            eps = 1e-5
            y = ((x - ch(mean.astype(np.float64))) / np.sqrt(ch(var.astype(np.float64)) + eps)
                 * ch(gamma.astype(np.float64)) + ch(beta.astype(np.float64)))
            scalars["eps"] = eps
            inputs.update(gamma=gamma, beta=beta, mean=mean, var=var)
        elif op == "group_norm":
            groups, act = (2, 2) if i % 2 else (2 if c % 4 else 4, 0)
            gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
            beta = rng.standard_normal(c).astype(np.float32)
            eps = 1e-5
            y = group_norm_ref(x.astype(np.float32), groups, gamma, beta, eps, act, layout)
            scalars.update(eps=eps, groups=groups, activation=act)
            inputs.update(gamma=gamma, beta=beta)
        else:
            rms = op == "rms_norm"
            gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
            beta = None if rms else rng.standard_normal(c).astype(np.float32)
            eps = 1e-6
            y = row_norm_ref(x.astype(np.float32), gamma, beta, eps, rms)
            scalars["eps"] = eps
            inputs.update(gamma=gamma, beta=beta)
        w.case(f"{op}_{xd}_{yd}_{i}", op, scalars, inputs, {"y": round_to(y, yd)})


def add_norm_cases(rng, w):
    """The residual add fused with layer / RMS norm: h = (x + residual) + bias by float32
    adds (NumPy's, IEEE like every backend's), stored in x's dtype (rounded to it: the h
    the op returns, exactly), y the float64 norm of that stored h, rounded to y's dtype."""
    cases = [  # op, x (residual, h) dtype, y dtype, rows, D, bias?, mean offset
        ("add_layer_norm", "float32", "float32", 5, 96, True, 0.0),
        ("add_layer_norm", "float32", "float32", 3, 768, False, 1.0e4),
        ("add_rms_norm", "float32", "float32", 4, 33, True, 0.0),
        ("add_layer_norm", "bfloat16", "bfloat16", 6, 96, True, 0.0),
        ("add_layer_norm", "float16", "float16", 4, 768, False, 0.0),
        ("add_layer_norm", "bfloat16", "float32", 3, 100, True, 50.0),
        ("add_layer_norm", "float32", "bfloat16", 2, 256, True, 0.0),
        ("add_rms_norm", "float16", "float16", 5, 33, True, 0.0),
        ("add_rms_norm", "bfloat16", "bfloat16", 2, 4096, False, 0.0),
        ("add_rms_norm", "float16", "float32", 3, 64, True, 0.0),
    ]
    for i, (op, xd, yd, rows, d, has_bias, offset) in enumerate(cases):
        rms = op == "add_rms_norm"
        x = round_to(rng.standard_normal((rows, d)) * 2 + offset, xd).astype(np.float32)
        r = round_to(rng.standard_normal((rows, d)) - offset / 2, xd).astype(np.float32)
        bias = rng.standard_normal(d).astype(np.float32) if has_bias else None
        h = x + r  # float32 adds
        if bias is not None:
            h = h + bias
        h = round_to(h.astype(np.float64), xd)
        gamma = rng.uniform(0.5, 1.5, d).astype(np.float32)
        beta = None if rms else rng.standard_normal(d).astype(np.float32)
        eps = 1e-5
        y = row_norm_ref(h.astype(np.float32), gamma, beta, eps, rms)
        scalars = {"x_dtype": xd, "y_dtype": yd, "shape": f"{rows} {d}", "eps": eps}
        w.case(f"{op}_{xd}_{yd}_{i}", op, scalars,
               {"x": x, "residual": r, "bias": bias, "gamma": gamma, "beta": beta},
               {"h": h, "y": round_to(y, yd)})


def to_nc(a, channels_last):
    """A memory-layout array as N, C, spatial... (a view)."""
    return np.moveaxis(a, -1, 1) if channels_last else a


def bn_training_ref(xd, gamma, beta, rm, rv, eps, momentum):
    """Training-mode batch norm of xd (float64, N, C, spatial...): the batch mean, biased
    variance, rstd, y and the running averages (unbiased variance) after one step."""
    c = xd.shape[1]
    axes = tuple(k for k in range(xd.ndim) if k != 1)
    count = xd.size // c
    bshape = (1, c) + (1,) * (xd.ndim - 2)
    mean = xd.mean(axis=axes)
    var = ((xd - mean.reshape(bshape)) ** 2).mean(axis=axes)
    rstd = 1.0 / np.sqrt(var + eps)
    y = (xd - mean.reshape(bshape)) * rstd.reshape(bshape) * gamma.reshape(bshape) \
        + beta.reshape(bshape)
    rm_out = (1 - momentum) * rm.astype(np.float64) + momentum * mean
    rv_out = (1 - momentum) * rv.astype(np.float64) + momentum * var * count / (count - 1)
    return mean, var, rstd, y, rm_out, rv_out


def bn_backward_ref(xd, dyd, sm, sr, gamma):
    """The backward from float32 saved statistics sm / sr: dx, sum(dy * xhat), sum(dy)."""
    c = xd.shape[1]
    axes = tuple(k for k in range(xd.ndim) if k != 1)
    count = xd.size // c
    bshape = (1, c) + (1,) * (xd.ndim - 2)
    smd, srd = sm.astype(np.float64).reshape(bshape), sr.astype(np.float64).reshape(bshape)
    xhat = (xd - smd) * srd
    sum_dy = dyd.sum(axis=axes)
    sum_dy_xhat = (dyd * xhat).sum(axis=axes)
    dx = gamma.reshape(bshape) * srd * (dyd - (sum_dy / count).reshape(bshape)
                                        - xhat * (sum_dy_xhat / count).reshape(bshape))
    return dx, sum_dy_xhat, sum_dy


def batch_norm_training_cases(rng, w):
    """Training-mode batch norm: the forward (batch statistics, running averages with the
    unbiased variance, saved mean / rstd) and the backward from the saved statistics, in
    float64 NumPy; checked against PyTorch's F.batch_norm(training=True) and its autograd in
    float64 when PyTorch is importable. Returns how many cases PyTorch checked."""
    checked = 0
    cases = [((4, 3, 5, 7), False, 0.0), ((4, 3, 5, 7), True, 0.0), ((6, 2, 9), False, 1.0e4),
             ((8, 5), False, 0.0), ((2, 4, 3, 4, 5), True, 0.0), ((2, 2, 17, 3), True, 1.0e3)]
    eps, momentum = 1e-5, 0.1
    for i, (shape, cl, offset) in enumerate(cases):
        n, c = shape[:2]
        mem_shape = (n,) + shape[2:] + (c,) if cl else shape
        x = (rng.standard_normal(mem_shape) * 2 + offset).astype(np.float32)
        dy = rng.standard_normal(mem_shape).astype(np.float32)
        gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
        beta = rng.standard_normal(c).astype(np.float32)
        rm = rng.standard_normal(c).astype(np.float32)
        rv = rng.uniform(0.5, 2.0, c).astype(np.float32)
        xd = to_nc(x.astype(np.float64), cl)
        mean, var, rstd, y, rm_out, rv_out = bn_training_ref(xd, gamma, beta, rm, rv, eps,
                                                             momentum)
        layout = {"layout": 1 if cl else 0, "rank": len(shape), "shape": " ".join(map(str, shape))}
        w.case(f"batch_norm_training_{i}", "batch_norm_training",
               dict(layout, eps=eps, momentum=momentum),
               {"x": x, "gamma": gamma, "beta": beta, "running_mean": rm, "running_var": rv},
               {"y": np.moveaxis(y, 1, -1) if cl else y, "running_mean_out": rm_out,
                "running_var_out": rv_out, "save_mean": mean, "save_rstd": rstd})
        # The backward from the saved statistics as float32 (what a forward hands on).
        sm, sr = mean.astype(np.float32), rstd.astype(np.float32)
        dyd = to_nc(dy.astype(np.float64), cl)
        dx, sum_dy_xhat, sum_dy = bn_backward_ref(xd, dyd, sm, sr, gamma)
        w.case(f"batch_norm_backward_{i}", "batch_norm_backward", layout,
               {"x": x, "dy": dy, "save_mean": sm, "save_rstd": sr, "gamma": gamma},
               {"dx": np.moveaxis(dx, 1, -1) if cl else dx, "grad_gamma": sum_dy_xhat,
                "grad_beta": sum_dy})
        try:
            import torch
            import torch.nn.functional as F
        except ImportError:
            continue
        xt = torch.from_numpy(to_nc(x, cl).astype(np.float64))
        gt = torch.from_numpy(gamma.astype(np.float64))
        bt = torch.from_numpy(beta.astype(np.float64))
        rmt, rvt = torch.from_numpy(rm.astype(np.float64)), torch.from_numpy(rv.astype(np.float64))
        yt = F.batch_norm(xt, rmt, rvt, gt, bt, True, momentum, eps).detach()
        assert np.allclose(yt.numpy(), y, rtol=1e-9, atol=1e-9), f"forward {i}"
        assert np.allclose(rmt.numpy(), rm_out, rtol=1e-12)
        assert np.allclose(rvt.numpy(), rv_out, rtol=1e-12)
        # The backward from the same float32-saved statistics, through the kernel PyTorch's
        # autograd runs.
        gx, gg, gb = torch.ops.aten.native_batch_norm_backward(
            torch.from_numpy(dyd), xt.detach(), gt.detach(), None, None,
            torch.from_numpy(sm.astype(np.float64)), torch.from_numpy(sr.astype(np.float64)),
            True, eps, [True, True, True])
        assert np.allclose(gx.numpy(), dx, rtol=1e-9, atol=1e-9), f"backward {i}"
        assert np.allclose(gg.numpy(), sum_dy_xhat, rtol=1e-9, atol=1e-9), f"grad_gamma {i}"
        assert np.allclose(gb.numpy(), sum_dy, rtol=1e-9, atol=1e-9), f"grad_beta {i}"
        checked += 1
    return checked


def half_batch_norm_training_cases(rng, w):
    """Training-mode batch norm on half tensors: x (and dy) exactly representable in their
    dtype, the forward's y and the backward's dx the float64 result rounded to the output's
    dtype; the per-channel arrays (float32 in the API) in float64. The same formulas as
    batch_norm_training_cases, which PyTorch checks."""
    cases = [  # x dtype, y dtype (backward: both x's), shape, channels last, mean offset
        ("bfloat16", "bfloat16", (4, 3, 5, 7), False, 0.0),
        ("float16", "float16", (4, 3, 5, 7), True, 0.0),
        ("bfloat16", "float32", (6, 2, 9), False, 100.0),
        ("float32", "float16", (8, 5), False, 0.0),
        ("float16", "float32", (2, 4, 3, 4, 5), True, 0.0),
        ("bfloat16", "bfloat16", (2, 2, 17, 3), True, 0.0),
    ]
    eps, momentum = 1e-5, 0.1
    for i, (xdt, ydt, shape, cl, offset) in enumerate(cases):
        n, c = shape[:2]
        mem_shape = (n,) + shape[2:] + (c,) if cl else shape
        x = round_to(rng.standard_normal(mem_shape) * 2 + offset, xdt)
        bwd = xdt if xdt != "float32" else ydt  # the backward's one dtype
        xb = round_to(x, bwd)
        dy = round_to(rng.standard_normal(mem_shape), bwd)
        gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
        beta = rng.standard_normal(c).astype(np.float32)
        rm = rng.standard_normal(c).astype(np.float32)
        rv = rng.uniform(0.5, 2.0, c).astype(np.float32)
        mean, var, rstd, y, rm_out, rv_out = bn_training_ref(to_nc(x, cl), gamma, beta, rm, rv,
                                                             eps, momentum)
        layout = {"layout": 1 if cl else 0, "rank": len(shape), "shape": " ".join(map(str, shape))}
        w.case(f"half_batch_norm_training_{i}", "batch_norm_training",
               dict(layout, x_dtype=xdt, y_dtype=ydt, eps=eps, momentum=momentum),
               {"x": x, "gamma": gamma, "beta": beta, "running_mean": rm, "running_var": rv},
               {"y": round_to(np.moveaxis(y, 1, -1) if cl else y, ydt),
                "running_mean_out": rm_out, "running_var_out": rv_out, "save_mean": mean,
                "save_rstd": rstd})
        # The backward in one dtype, from float32 saved statistics of its x.
        xbd = to_nc(xb, cl)
        bmean, _, brstd, _, _, _ = bn_training_ref(xbd, gamma, beta, rm, rv, eps, momentum)
        sm, sr = bmean.astype(np.float32), brstd.astype(np.float32)
        dx, sum_dy_xhat, sum_dy = bn_backward_ref(xbd, to_nc(dy, cl), sm, sr, gamma)
        w.case(f"half_batch_norm_backward_{i}", "batch_norm_backward",
               dict(layout, x_dtype=bwd, y_dtype=bwd),
               {"x": xb, "dy": dy, "save_mean": sm, "save_rstd": sr, "gamma": gamma},
               {"dx": round_to(np.moveaxis(dx, 1, -1) if cl else dx, bwd),
                "grad_gamma": sum_dy_xhat, "grad_beta": sum_dy})


class Writer:
    def __init__(self, path):
        self.f = open(path, "w")
        self.f.write("# Generated by tests/vectors/generate.py; do not edit.\n")

    def case(self, name, op, scalars, inputs, outputs):
        w = self.f.write
        w(f"case {name}\nop {op}\n")
        for k, v in scalars.items():
            w(f"{k} {v}\n")
        for k, a in inputs.items():
            if a is None:
                continue
            a = np.asarray(a, dtype=np.float32).ravel()
            w(f"{k} {a.size} " + " ".join("%.9g" % v for v in a) + "\n")
        for k, a in outputs.items():
            a = np.asarray(a, dtype=np.float64).ravel()
            w(f"{k} {a.size} " + " ".join("%.17g" % v for v in a) + "\n")
        w("end\n")


def main():
    rng = np.random.default_rng(2026)
    torch_checked = 0
    w = Writer(os.path.join(HERE, "group_norm.txt"))
    cases = [
        # (shape N,C,spatial..., groups, activation, channels_last, gamma?, beta?, offset)
        ((2, 6, 5, 7), 3, 0, False, True, True, 0.0),
        ((2, 6, 5, 7), 3, 2, True, True, True, 0.0),
        ((1, 32, 9, 9), 8, 1, True, True, False, 0.0),
        ((3, 20, 17), 5, 0, False, False, True, 0.0),
        ((3, 20, 17), 20, 2, True, True, True, 0.0),
        ((2, 12, 3, 4, 5), 1, 0, False, True, True, 0.0),
        ((2, 12, 3, 4, 5), 4, 0, True, True, True, 0.0),
        ((2, 48), 4, 0, False, True, True, 0.0),
        ((1, 16, 11, 13), 4, 0, False, True, True, 1.0e4),
        ((1, 16, 11, 13), 4, 2, True, True, True, 1.0e4),
    ]
    for i, (shape, groups, act, cl, has_g, has_b, offset) in enumerate(cases):
        n, c = shape[:2]
        spatial = shape[2:]
        mem_shape = (n,) + spatial + (c,) if cl else shape
        x = (rng.standard_normal(mem_shape) + offset).astype(np.float32)
        gamma = rng.uniform(0.5, 1.5, c).astype(np.float32) if has_g else None
        beta = rng.standard_normal(c).astype(np.float32) if has_b else None
        eps = 1e-5
        y = group_norm_ref(x, groups, gamma, beta, eps, act, cl)
        torch_checked += torch_check_group_norm(x, groups, gamma, beta, eps, act, cl, y)
        w.case(f"group_norm_{i}", "group_norm",
               {"layout": 1 if cl else 0, "rank": len(shape),
                "shape": " ".join(map(str, shape)), "groups": groups, "eps": eps,
                "activation": act},
               {"x": x, "gamma": gamma, "beta": beta}, {"y": y})

    w = Writer(os.path.join(HERE, "row_norm.txt"))
    for i, (rows, d, rms, has_g, has_b, offset) in enumerate([
            (5, 33, False, True, True, 0.0), (4, 768, False, True, True, 0.0),
            (3, 100, False, False, False, 1.0e4), (6, 31, True, True, False, 0.0),
            (2, 768, True, False, False, 0.0)]):
        x = (rng.standard_normal((rows, d)) + offset).astype(np.float32)
        gamma = rng.uniform(0.5, 1.5, d).astype(np.float32) if has_g else None
        beta = rng.standard_normal(d).astype(np.float32) if has_b else None
        eps = 1e-6
        y = row_norm_ref(x, gamma, beta, eps, rms)
        w.case(f"{'rms' if rms else 'layer'}_norm_{i}", "rms_norm" if rms else "layer_norm",
               {"shape": f"{rows} {d}", "eps": eps}, {"x": x, "gamma": gamma, "beta": beta},
               {"y": y})
    shift_sum_cases(rng, Writer(os.path.join(HERE, "shift_sum.txt")))
    half_cases(np.random.default_rng(46), Writer(os.path.join(HERE, "half.txt")))
    add_norm_cases(np.random.default_rng(48), Writer(os.path.join(HERE, "add_norm.txt")))
    half_batch_norm_training_cases(np.random.default_rng(51),
                                   Writer(os.path.join(HERE, "half_batch_norm_training.txt")))
    bn_checked = batch_norm_training_cases(
        np.random.default_rng(50), Writer(os.path.join(HERE, "batch_norm_training.txt")))
    print(f"wrote group_norm.txt, row_norm.txt, shift_sum.txt, half.txt, add_norm.txt, "
          f"half_batch_norm_training.txt and batch_norm_training.txt ({torch_checked} group-norm and {bn_checked} batch-norm "
          f"training cases also checked against PyTorch)", file=sys.stderr)


if __name__ == "__main__":
    main()
