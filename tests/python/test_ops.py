# SPDX-License-Identifier: Apache-2.0
"""The Python package against float64 numpy references written plainly."""
import numpy as np
import pytest

import normkit

RNG = np.random.default_rng(7)


def channels_last(a):
    """a (N, C, ...) as a channels-last strided view of the same logical shape."""
    perm = (0,) + tuple(range(2, a.ndim)) + (1,)
    inverse = np.argsort(perm)
    return np.ascontiguousarray(a.transpose(perm)).transpose(inverse)


def layouts(a):
    return [("channels_first", np.ascontiguousarray(a)), ("channels_last", channels_last(a))]


def ref_group_norm(x, groups, weight, bias, eps, activation=None):
    x = x.astype(np.float64)
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    mean = g.mean(axis=2, keepdims=True)
    var = g.var(axis=2, keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * weight.astype(np.float64).reshape(shape)
    if bias is not None:
        y = y + bias.astype(np.float64).reshape(shape)
    if activation == "relu":
        y = np.maximum(y, 0)
    elif activation == "silu":
        y = y / (1 + np.exp(-y))
    return y, mean.reshape(n, groups), 1 / np.sqrt(var.reshape(n, groups) + eps)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), b, rtol=tol, atol=tol)


def test_info():
    assert normkit.__version__.count(".") == 2
    assert normkit.simd_target()
    assert normkit.threading_backend() in ("openmp", "tbb", "pool", "serial")
    assert normkit.Context(2).num_threads == 2


@pytest.mark.parametrize("shape", [(2, 6, 5, 7), (3, 4, 9), (1, 8, 2, 3, 4)])
def test_affine_both_layouts_and_in_place(shape):
    x0 = RNG.standard_normal(shape).astype(np.float32)
    c = shape[1]
    scale = RNG.standard_normal(c).astype(np.float32)
    shift = RNG.standard_normal(c).astype(np.float32)
    bshape = (1, c) + (1,) * (len(shape) - 2)
    ref = x0.astype(np.float64) * scale.reshape(bshape) + shift.reshape(bshape)
    for name, x in layouts(x0):
        y = normkit.affine(x, scale, shift)
        assert y.strides == x.strides, name  # the output keeps x's layout
        close(y, ref)
        normkit.affine(x, scale, shift, out=x)  # in place
        close(x, ref)


def test_affine_per_sample_and_missing_terms():
    x = RNG.standard_normal((3, 4, 5, 5)).astype(np.float32)
    scale = RNG.standard_normal((3, 4)).astype(np.float32)
    y = normkit.affine(x, scale, None, per_sample=True)
    close(y, x.astype(np.float64) * scale[:, :, None, None])
    close(normkit.affine(x), x)


def test_batch_norm_and_fold():
    x0 = RNG.standard_normal((2, 5, 4, 6)).astype(np.float32) * 3 + 1
    mean = RNG.standard_normal(5).astype(np.float32)
    var = RNG.uniform(0.5, 2, 5).astype(np.float32)
    w = RNG.standard_normal(5).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    s = (w / np.sqrt(var.astype(np.float64) + 1e-5))[None, :, None, None]
    ref = (x0 - mean[None, :, None, None]) * s + b[None, :, None, None]
    for _, x in layouts(x0):
        close(normkit.batch_norm(x, mean, var, w, b, 1e-5), ref)
    scale, shift = normkit.batch_norm_fold(mean, var, w, b, 1e-5)
    close(x0 * scale[None, :, None, None] + shift[None, :, None, None], ref, 1e-4)


def test_fold_into_conv_and_linear():
    weight = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)  # groups = 2, in = 4
    bias = RNG.standard_normal(6).astype(np.float32)
    mean = RNG.standard_normal(6).astype(np.float32)
    var = RNG.uniform(0.5, 2, 6).astype(np.float32)
    g = RNG.standard_normal(6).astype(np.float32)
    be = RNG.standard_normal(6).astype(np.float32)
    s = g.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
    ref_w = weight.astype(np.float64) * s[:, None, None, None]
    ref_b = (bias - mean) * s + be
    w = weight.copy()
    fb = normkit.fold_batch_norm_into_conv(w, bias, mean, var, g, be, 1e-5, groups=2)
    close(w, ref_w)
    close(fb, ref_b)
    lw = RNG.standard_normal((6, 3)).astype(np.float32)
    ref_lw = lw.astype(np.float64) * s[:, None]
    fb = normkit.fold_batch_norm_into_linear(lw, None, mean, var, g, be, 1e-5)
    close(lw, ref_lw)
    close(fb, -mean * s + be)


@pytest.mark.parametrize("activation", [None, "relu", "silu"])
@pytest.mark.parametrize("shape,groups", [((2, 8, 5, 6), 4), ((1, 6, 3, 3, 4), 3), ((3, 4, 7), 2)])
def test_group_norm(shape, groups, activation):
    x0 = (RNG.standard_normal(shape) * 2 + 50).astype(np.float32)
    c = shape[1]
    w = RNG.standard_normal(c).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    ref, rmean, rrstd = ref_group_norm(x0, groups, w, b, 1e-5, activation)
    for name, x in layouts(x0):
        mean_out = np.empty((shape[0], groups), np.float32)
        rstd_out = np.empty((shape[0], groups), np.float32)
        y = normkit.group_norm(x, groups, w, b, 1e-5, activation=activation, mean_out=mean_out,
                               rstd_out=rstd_out)
        close(y, ref)
        close(mean_out, rmean)
        np.testing.assert_allclose(rstd_out, rrstd, rtol=1e-5)


def test_instance_and_channel_layer_norm():
    x = RNG.standard_normal((2, 4, 5, 5)).astype(np.float32)
    w = RNG.standard_normal(4).astype(np.float32)
    close(normkit.instance_norm(x, w, None), ref_group_norm(x, 4, w, None, 1e-5)[0])
    close(normkit.channel_layer_norm(channels_last(x), None, w),
          ref_group_norm(x, 1, None, w, 1e-5)[0])


@pytest.mark.parametrize("shape", [(7, 96), (2, 3, 40)])
def test_layer_and_rms_norm(shape):
    x = (RNG.standard_normal(shape) + 3).astype(np.float32)
    d = shape[-1]
    w = RNG.standard_normal(d).astype(np.float32)
    b = RNG.standard_normal(d).astype(np.float32)
    xd = x.astype(np.float64)
    mean = xd.mean(-1, keepdims=True)
    var = xd.var(-1, keepdims=True)
    close(normkit.layer_norm(x, w, b, 1e-5), (xd - mean) / np.sqrt(var + 1e-5) * w + b)
    ms = (xd * xd).mean(-1, keepdims=True)
    rstd_out = np.empty(x.size // d, np.float32)
    close(normkit.rms_norm(x, w, 1e-6, rstd_out=rstd_out), xd / np.sqrt(ms + 1e-6) * w)
    close(rstd_out, 1 / np.sqrt(ms.reshape(-1) + 1e-6))


@pytest.mark.parametrize("shape", [(7, 96), (2, 3, 40)])
def test_add_layer_and_rms_norm(shape):
    x = (RNG.standard_normal(shape) + 3).astype(np.float32)
    r = RNG.standard_normal(shape).astype(np.float32)
    d = shape[-1]
    w, b, a = (RNG.standard_normal(d).astype(np.float32) for _ in range(3))
    h = (x + r) + a  # float32 adds: the residual normkit writes, bit for bit
    hd = h.astype(np.float64)
    mean, var = hd.mean(-1, keepdims=True), hd.var(-1, keepdims=True)
    h_out = np.empty_like(x)
    y = normkit.add_layer_norm(x, r, w, b, 1e-5, add_bias=a, residual_out=h_out)
    assert np.array_equal(h_out, h)
    close(y, (hd - mean) / np.sqrt(var + 1e-5) * w + b)
    assert np.array_equal(y, normkit.layer_norm(h, w, b, 1e-5))
    ms = (hd * hd).mean(-1, keepdims=True)
    x2, r2 = x.copy(), r.copy()  # in place: y over x, h over the residual
    normkit.add_rms_norm(x2, r2, w, 1e-6, add_bias=a, out=x2, residual_out=r2)
    close(x2, hd / np.sqrt(ms + 1e-6) * w)
    assert np.array_equal(r2, h)
    with pytest.raises(ValueError, match="residual has shape"):
        normkit.add_layer_norm(x, r[..., :-1])
    with pytest.raises(ValueError, match="h_out overlaps y"):
        normkit.add_layer_norm(x, r, out=h_out, residual_out=h_out)


def test_float16_storage_add_layer_and_rms_norm():
    """The fused add + norm on float16 rows: h is the float32 sum rounded to float16 (what
    numpy's float16 add stores), y the layer norm of that h, bitwise, with y float16 or
    float32."""
    x = (RNG.standard_normal((9, 96)) * 3 + 1).astype(np.float16)
    r = RNG.standard_normal((9, 96)).astype(np.float16)
    w, b, a = (RNG.standard_normal(96).astype(np.float32) for _ in range(3))
    h = ((x.astype(np.float32) + r.astype(np.float32)) + a).astype(np.float16)
    h_out = np.empty_like(x)
    y = normkit.add_layer_norm(x, r, w, b, 1e-5, add_bias=a, residual_out=h_out)
    assert y.dtype == np.float16 and np.array_equal(h_out, h)
    assert np.array_equal(y, normkit.layer_norm(h, w, b, 1e-5))
    hd = h.astype(np.float64)
    mean, var = hd.mean(-1, keepdims=True), hd.var(-1, keepdims=True)
    want = (hd - mean) / np.sqrt(var + 1e-5) * w + b
    assert ulps16(y, want.astype(np.float16)).max() <= 1
    wide = np.empty((9, 96), np.float32)  # float16 in, float32 out
    normkit.add_rms_norm(x, r, w, 1e-6, add_bias=a, out=wide)
    assert np.array_equal(wide, normkit.rms_norm(h.astype(np.float32), w, 1e-6))
    x2, r2 = x.copy(), r.copy()  # in place: y over x, h over the residual
    normkit.add_layer_norm(x2, r2, w, b, 1e-5, add_bias=a, out=x2, residual_out=r2)
    assert np.array_equal(x2, y) and np.array_equal(r2, h)
    with pytest.raises(ValueError, match="residual->dtype = float32 differs"):
        normkit.add_layer_norm(x, r.astype(np.float32))


def test_bitwise_identical_for_any_thread_count():
    x = RNG.standard_normal((4, 32, 32, 32)).astype(np.float32)
    ys = [normkit.group_norm(channels_last(x), 8, context=normkit.Context(t)) for t in (1, 2, 3)]
    assert all(np.array_equal(ys[0], y) for y in ys[1:])


def test_torch_tensors_pass_as_dlpack_capsules():
    """torch CPU tensors reach the extension as DLPack capsules (20 us a layer-norm call
    through Tensor.__dlpack__, about 4 here): same bits as the NumPy call, for float32 and
    bfloat16 tensors, Parameters, tensors that require grad, channels_last, mixed with
    NumPy arrays; errors still name the argument."""
    torch = pytest.importorskip("torch")
    from normkit import _ops

    def received(*args):
        return args

    t, a = torch.ones(2, 3), np.ones((2, 3), np.float32)
    got = _ops._call(received, t, a, 1.5, None)
    assert type(got[0]).__name__ == "PyCapsule" and got[1] is a and got[2:] == (1.5, None)
    if torch.cuda.is_available():  # CUDA tensors keep __dlpack__, which orders the streams
        c = t.cuda()
        assert _ops._call(received, c)[0] is c

    x = (RNG.standard_normal((5, 3, 4, 6)) + 2).astype(np.float32)
    w = RNG.standard_normal(3).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)
    tx = torch.from_numpy(x)
    tw = torch.nn.Parameter(torch.from_numpy(w))  # requires grad
    cl = torch.channels_last
    for tensor, same in ((tx, x), (tx.contiguous(memory_format=cl), channels_last(x)),
                         (tx.clone().requires_grad_(True), x)):
        y = normkit.group_norm(tensor, 3, tw, torch.from_numpy(b), 1e-5)
        assert isinstance(y, torch.Tensor)
        assert y.is_contiguous(memory_format=cl) == tensor.is_contiguous(memory_format=cl)
        assert np.array_equal(y.detach().numpy(), normkit.group_norm(same, 3, w, b, 1e-5))
    rows = RNG.standard_normal((9, 40)).astype(np.float32)
    gamma = RNG.standard_normal(40).astype(np.float32)
    want = normkit.layer_norm(rows, gamma, None, 1e-5)
    out = torch.empty(9, 40)
    normkit.layer_norm(torch.from_numpy(rows), torch.from_numpy(gamma), None, 1e-5, out=out)
    assert np.array_equal(out.numpy(), want)
    normkit.layer_norm(rows, torch.from_numpy(gamma), None, 1e-5, out=out.zero_())  # mixed
    assert np.array_equal(out.numpy(), want)
    half = torch.from_numpy(rows).to(torch.bfloat16)
    y16 = normkit.rms_norm(half, torch.from_numpy(gamma), 1e-6)
    assert y16.dtype == torch.bfloat16
    want16 = normkit.rms_norm(half.float().numpy(), gamma, 1e-6)
    assert torch.equal(y16, torch.from_numpy(want16).to(torch.bfloat16))
    with pytest.raises(ValueError, match="x is not a dense array"):
        normkit.layer_norm(torch.from_numpy(rows).t(), None, None, 1e-5)
    with pytest.raises(TypeError, match="weight must be float32"):
        normkit.layer_norm(torch.from_numpy(rows), torch.ones(40, dtype=torch.float64))


def test_errors_name_the_argument_and_leave_outputs():
    x = RNG.standard_normal((2, 4, 3, 3)).astype(np.float32)
    with pytest.raises(TypeError, match="float32"):
        normkit.group_norm(x.astype(np.float64), 2)
    with pytest.raises(ValueError, match="dense"):
        normkit.group_norm(x[:, :, ::2], 2)
    with pytest.raises(ValueError, match="weight has 3 elements, expected 4"):
        normkit.group_norm(x, 2, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="divisible"):
        normkit.group_norm(x, 3)
    out = np.full((2, 4, 3, 4), 7, np.float32)
    with pytest.raises(ValueError, match="differs"):  # normkit's message calls out y
        normkit.group_norm(x, 2, out=out)
    assert (out == 7).all()
    with pytest.raises(ValueError, match="layout"):
        normkit.affine(x, layout="nchwc")
    with pytest.raises(ValueError, match="channels-last"):
        normkit.affine(x, layout="channels_last")


def ref_shift_sum(x, step, scale, mask):
    """A along W in float64, written plainly: y[b, h, w + c*step + o] += s * m[h, w] x[b, c, h, w]."""
    b, c, h, w = x.shape
    o = (c - 1) * max(0, -step)
    y = np.zeros((b, 1, h, w + (c - 1) * abs(step)))
    m = np.ones((h, w)) if mask is None else mask.astype(np.float64)
    for ch in range(c):
        off = ch * step + o
        y[:, 0, :, off:off + w] += scale * m * x[:, ch].astype(np.float64)
    return y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("step", [2, -1])
def test_shift_sum_family(dtype, step):
    x0 = RNG.standard_normal((2, 5, 6, 7)).astype(dtype)
    mask = (RNG.uniform(0, 1, (6, 7)) > 0.3).astype(dtype) * RNG.uniform(0.5, 1.5, (6, 7)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    want = ref_shift_sum(x0, step, 0.5, mask)
    r = RNG.standard_normal(want.shape).astype(dtype)
    for name, x in layouts(x0):
        y = normkit.shift_sum(x, step, scale=0.5, mask=mask)
        assert y.shape == want.shape and y.dtype == dtype
        close(y, want, tol)
        # <A x, r> = <x, A^T r>
        xt = normkit.shift_sum_adjoint(r, step, channels=5, scale=0.5, mask=mask, layout=name)
        lhs = float((want * r.astype(np.float64)).sum())
        rhs = float((x0.astype(np.float64) * np.asarray(xt, np.float64)).sum())
        assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), name
        # Phi_s and the Moore-Penrose pinv; one GAP step from 0 (lambda 1, gamma 0) is the pinv.
        phi = normkit.shift_sum_normalizer(x, step, mask=mask)
        ones = ref_shift_sum(np.ones((1,) + x0.shape[1:]), step, 1.0, mask.astype(np.float64) ** 2)
        close(phi, ones[0, 0], tol)
        pinv = normkit.shift_sum_pinv(want.astype(dtype), step, channels=5, scale=0.5, mask=mask,
                                      normalizer=phi, layout=name)
        gap = normkit.shift_sum_gap_step(np.zeros_like(x), want.astype(dtype), step, 1.0, 0.0,
                                         scale=0.5, mask=mask, layout=name)
        close(gap, np.asarray(pinv, np.float64), tol)
        stack = normkit.shift(x, step)
        assert np.array_equal(normkit.unshift(stack, step), x)


def test_float16_storage_shift_sum():
    """The shift-sum family on float16 arrays (mask and Phi_s float32): the forward within
    one float16 unit of the float64 sum of the stored values, float32 y from float16 x,
    float32 Phi_s, the pinv equal to one GAP step from 0, shift / unshift exact."""
    x0 = RNG.standard_normal((2, 5, 6, 7)).astype(np.float16)
    mask = (RNG.uniform(0, 1, (6, 7)) > 0.3).astype(np.float32) * RNG.uniform(0.5, 1.5, (6, 7)).astype(
        np.float32)
    want = ref_shift_sum(x0, 2, 0.5, mask)
    for name, x in layouts(x0):
        y = normkit.shift_sum(x, 2, scale=0.5, mask=mask)
        assert y.dtype == np.float16 and y.shape == want.shape
        assert ulps16(y, want.astype(np.float16)).max() <= 1, name
        wide = normkit.shift_sum(x, 2, scale=0.5, mask=mask, out=np.empty(want.shape, np.float32))
        close(wide, want, 1e-5)
        phi = normkit.shift_sum_normalizer(x, 2, mask=mask)
        assert phi.dtype == np.float32
        pinv = normkit.shift_sum_pinv(want.astype(np.float16), 2, channels=5, scale=0.5, mask=mask,
                                      normalizer=phi, layout=name)
        gap = normkit.shift_sum_gap_step(np.zeros_like(x), want.astype(np.float16), 2, 1.0, 0.0,
                                         scale=0.5, mask=mask, layout=name)
        assert pinv.dtype == gap.dtype == np.float16
        assert ulps16(gap, pinv).max() <= 1, name
        stack = normkit.shift(x, 2)
        assert stack.dtype == np.float16 and np.array_equal(normkit.unshift(stack, 2), x)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_batch_norm_training_matches_torch(layout):
    """Training-mode batch norm against PyTorch's F.batch_norm(training=True): y, the running
    averages (unbiased variance), and the saved mean / rstd against a float64 reference."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    x = torch.randn(8, 6, 9, 11) * 3 + 1e3  # a mean far from the spread
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    w, b = torch.rand(6) + 0.5, torch.randn(6)
    rm, rv = torch.randn(6), torch.rand(6) + 0.5
    rm_t, rv_t = rm.clone(), rv.clone()
    want = F.batch_norm(x.double(), rm_t.double(), rv_t.double(), w.double(), b.double(), True, 0.2,
                        1e-5)
    rm_t = rm.double() * 0.8 + 0.2 * x.double().mean((0, 2, 3))
    rv_t = rv.double() * 0.8 + 0.2 * x.double().var((0, 2, 3), unbiased=True)
    sm, sr = torch.empty(6), torch.empty(6)
    y = normkit.batch_norm_training(x, rm, rv, w, b, 0.2, 1e-5, save_mean=sm, save_rstd=sr)
    assert y.stride() == x.stride()
    assert (y.double() - want).abs().max().item() < 1e-4
    assert torch.allclose(rm.double(), rm_t, rtol=1e-6, atol=1e-6)
    assert torch.allclose(rv.double(), rv_t, rtol=1e-6)
    xd = x.double()
    assert torch.allclose(sm.double(), xd.mean((0, 2, 3)), rtol=1e-7)
    assert torch.allclose(sr.double(), 1 / (xd.var((0, 2, 3), unbiased=False) + 1e-5).sqrt(),
                          rtol=1e-6)
    with pytest.raises(ValueError, match="both be given"):
        normkit.batch_norm_training(x, rm, None)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_batch_norm_training_backward_matches_autograd(layout):
    """The backward from normkit's saved statistics against PyTorch's autograd of
    F.batch_norm(training=True) in float64; every output_mask, and in place on grad_output."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    x = torch.randn(6, 5, 7, 9) * 2 + 1e3
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.rand(5) + 0.5
    dy = torch.randn(6, 5, 7, 9).contiguous(memory_format=torch.preserve_format)
    dy = dy.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else dy
    sm, sr = torch.empty(5), torch.empty(5)
    normkit.batch_norm_training(x, weight=w, save_mean=sm, save_rstd=sr)
    xd = x.double().requires_grad_()
    wd = w.double().requires_grad_()
    bd = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    F.batch_norm(xd, None, None, wd, bd, True, 0.1, 1e-5).backward(dy.double())
    dx, gw, gb = normkit.batch_norm_training_backward(x, dy, sm, sr, w)
    assert dx.stride() == x.stride()
    assert (dx.double() - xd.grad).abs().max().item() < 1e-4
    assert torch.allclose(gw.double(), wd.grad, rtol=1e-4, atol=1e-3)
    assert torch.allclose(gb.double(), bd.grad, rtol=1e-5, atol=1e-4)
    none_dx, gw2, none_gb = normkit.batch_norm_training_backward(
        x, dy, sm, sr, w, output_mask=(False, True, False))
    assert none_dx is None and none_gb is None and torch.equal(gw2, gw)
    dy2 = dy.clone()
    dx2, _, _ = normkit.batch_norm_training_backward(x, dy2, sm, sr, w, grad_input=dy2)
    assert dx2.data_ptr() == dy2.data_ptr() and torch.equal(dx2, dx)
    flat = torch.empty(x.numel() + 1)
    xs = flat[:-1].view(x.shape)
    xs.copy_(x)
    before = flat.clone()
    with pytest.raises(ValueError, match="dx partially overlaps x"):
        normkit.batch_norm_training_backward(xs, dy.contiguous(), sm, sr, w,
                                             grad_input=flat[1:].view(x.shape))
    assert torch.equal(flat, before)  # nothing written


def test_shift_sum_errors():
    x = np.zeros((1, 3, 4, 4), np.float32)
    with pytest.raises(ValueError, match="mask shape"):
        normkit.shift_sum(x, 1, mask=np.ones((5, 5), np.float32))
    with pytest.raises(TypeError, match="float32"):
        normkit.shift_sum(x, 1, mask=np.ones((4, 4), np.float64))
    with pytest.raises(ValueError, match="channels"):
        normkit.shift_sum_adjoint(np.zeros((1, 1, 4, 6), np.float32), 1)



def test_misaligned_and_overlapping_arrays_are_rejected():
    raw = np.zeros(4 * 36 + 1, np.uint8)[1:]  # a float32 view one byte off its alignment
    x = raw.view(np.float32).reshape(1, 4, 3, 3)
    assert not x.flags.aligned
    with pytest.raises(ValueError, match="aligned"):
        normkit.group_norm(x, 2)
    big = RNG.standard_normal(2 * 36 + 9).astype(np.float32)
    x = big[:72].reshape(2, 4, 3, 3)
    out = big[9:81].reshape(2, 4, 3, 3)  # overlaps x, not in place
    before = out.copy()
    with pytest.raises(ValueError, match="overlap"):
        normkit.group_norm(x, 2, out=out)
    assert np.array_equal(out, before)
    weight = RNG.standard_normal(4).astype(np.float32)
    y = np.empty((2, 4, 3, 3), np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        normkit.group_norm(y, 2, weight, y.reshape(-1)[:4], out=y)  # bias inside y


def ulps16(a, b):
    """|a - b| in units of the last place of 16-bit floats of one sign (as bit patterns)."""
    ai = np.asarray(a).view(np.uint16).astype(np.int64) & 0x7FFF
    bi = np.asarray(b).view(np.uint16).astype(np.int64) & 0x7FFF
    return np.abs(ai - bi)


def test_float16_batch_norm_training_forward_and_backward():
    """numpy float16 through batch_norm_training and its backward: y, dx bitwise the float32
    call on the widened values rounded by numpy (nearest even), the float32 arrays (saved
    statistics, running averages, parameter gradients) bitwise the float32 call's; float32
    y from float16 x; in place on x and on grad_output."""
    x0 = (RNG.standard_normal((4, 6, 5, 7)) * 3 + 2).astype(np.float16)
    dy0 = RNG.standard_normal(x0.shape).astype(np.float16)
    w = (RNG.random(6) + 0.5).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    for name, x in layouts(x0):
        dy = np.ascontiguousarray(dy0) if x.flags.c_contiguous else layouts(dy0)[1][1]
        outs = {}
        for dtype in (np.float16, np.float32):
            xs = x.astype(dtype)
            rm, rv = np.zeros(6, np.float32), np.ones(6, np.float32)
            sm, sr = np.empty(6, np.float32), np.empty(6, np.float32)
            y = normkit.batch_norm_training(xs, rm, rv, w, b, 0.1, 1e-5, save_mean=sm, save_rstd=sr)
            dx, gw, gb = normkit.batch_norm_training_backward(xs, dy.astype(dtype), sm, sr, w)
            outs[dtype] = (y, dx, gw, gb, rm, rv, sm, sr)
        half, single = outs[np.float16], outs[np.float32]
        assert half[0].dtype == half[1].dtype == np.float16 and half[0].strides == x.strides, name
        assert np.array_equal(half[0], single[0].astype(np.float16)), name
        assert np.array_equal(half[1], single[1].astype(np.float16)), name
        for a, c in zip(half[2:], single[2:]):
            assert a.dtype == np.float32 and np.array_equal(a, c), name
        wide = normkit.batch_norm_training(x, out=np.empty_like(x, dtype=np.float32))
        assert np.array_equal(wide, normkit.batch_norm_training(x.astype(np.float32))), name
        xi, dyi = x.copy(), dy.copy()
        dx_in, _, _ = normkit.batch_norm_training_backward(xi, dyi, half[6], half[7], w,
                                                           grad_input=dyi)
        assert dx_in is dyi and np.array_equal(dyi, half[1]), name


def test_float16_storage_affine_and_batch_norm():
    x0 = (RNG.standard_normal((2, 8, 5, 7)) * 4).astype(np.float16)
    scale = RNG.standard_normal(8).astype(np.float32)
    shift = RNG.standard_normal(8).astype(np.float32)
    mean = RNG.standard_normal(8).astype(np.float32)
    var = (RNG.random(8) + 0.5).astype(np.float32)
    shape = (1, 8, 1, 1)
    for name, x in layouts(x0):
        ref = x.astype(np.float64) * scale.reshape(shape) + shift.reshape(shape)
        y = normkit.affine(x, scale, shift)
        assert y.dtype == np.float16 and y.strides == x.strides
        # The float32 result rounded once more: within one float16 unit of the float64 one.
        assert ulps16(y, ref.astype(np.float16)).max() <= 1, name
        wide = normkit.affine(x, scale, shift, out=np.empty_like(x, dtype=np.float32))
        close(wide, ref)
        narrow = normkit.affine(x.astype(np.float32), scale, shift, out=np.empty_like(x))
        assert ulps16(narrow, ref.astype(np.float16)).max() <= 1, name
        bn_ref = (x.astype(np.float64) - mean.reshape(shape)) / np.sqrt(
            var.reshape(shape).astype(np.float64) + 1e-5)
        bn = normkit.batch_norm(x, mean, var)
        assert ulps16(bn, bn_ref.astype(np.float16)).max() <= 1, name
        inplace = x.copy(order="K")
        normkit.batch_norm(inplace, mean, var, out=inplace)
        assert np.array_equal(inplace.view(np.uint16), bn.view(np.uint16))


def test_float16_storage_group_norm():
    """Group norm (and its instance form) of float16 arrays in both layouts, with SiLU,
    in place: within one float16 unit of the float64 result, or float32's error where beta
    cancels the normalized value."""
    x0 = (RNG.standard_normal((2, 8, 5, 7)) * 4 + 3).astype(np.float16)
    weight = RNG.standard_normal(8).astype(np.float32)
    bias = RNG.standard_normal(8).astype(np.float32)
    for name, x in layouts(x0):
        for groups in (2, 8):
            xg = x.astype(np.float64).reshape(2, groups, -1)
            mean = xg.mean(axis=2, keepdims=True)
            var = xg.var(axis=2, keepdims=True)
            t = ((xg - mean) / np.sqrt(var + 1e-5)).reshape(2, 8, 5, 7)
            ref = t * weight.reshape(1, 8, 1, 1) + bias.reshape(1, 8, 1, 1)
            ref = ref / (1 + np.exp(-ref))
            y = normkit.group_norm(x, groups, weight, bias, activation="silu")
            assert y.dtype == np.float16 and y.strides == x.strides, name
            err = np.abs(y.astype(np.float64) - ref)
            assert (err <= (np.abs(ref) + 2 ** -6) * 2 ** -10 * 1.01).all(), (name, groups)
            inplace = x.copy(order="K")
            normkit.group_norm(inplace, groups, weight, bias, activation="silu", out=inplace)
            assert np.array_equal(inplace.view(np.uint16), y.view(np.uint16)), (name, groups)


def test_half_storage_errors():
    x = np.ones((2, 4, 3, 3), np.float16)
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        normkit.affine(x.view(np.int16))
    # float16 x and a float32 out starting at the same address: in place with two dtypes.
    buf = np.full(144, 7, np.float16)
    x, out = buf[:72].reshape(2, 4, 3, 3), buf.view(np.float32).reshape(2, 4, 3, 3)
    with pytest.raises(ValueError, match="in place needs one dtype"):
        normkit.affine(x, np.ones(4, np.float32), out=out)
    assert (buf == 7).all()
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="float16 with x->dtype = bfloat16"):
        normkit.affine(torch.ones(2, 4, 3, dtype=torch.bfloat16),
                       out=torch.empty(2, 4, 3, dtype=torch.float16))
    y = torch.full((2, 1, 3, 9), 7.0, dtype=torch.float16)
    with pytest.raises(TypeError, match="float16 with x->dtype = bfloat16"):
        normkit.shift_sum(torch.ones(2, 4, 3, 3, dtype=torch.bfloat16), 2, out=y)
    assert (y == 7).all()
