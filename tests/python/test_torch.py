# SPDX-License-Identifier: Apache-2.0
"""normkit.torch against PyTorch's own modules, and whole converted models."""
import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import normkit  # noqa: E402
import normkit.torch as nkt  # noqa: E402

torch.manual_seed(0)
TOL = dict(rtol=1e-5, atol=1e-5)


def formats(x):
    out = [("contiguous", x.contiguous())]
    if x.dim() == 4:
        out.append(("channels_last", x.contiguous(memory_format=torch.channels_last)))
    if x.dim() == 5:
        out.append(("channels_last_3d", x.contiguous(memory_format=torch.channels_last_3d)))
    return out


def randomize(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))
        for name, b in module.named_buffers():
            if name == "running_var":
                b.copy_(torch.rand_like(b) + 0.5)
            elif name == "running_mean":
                b.copy_(torch.randn_like(b))
    return module


def check_module(theirs, ours, shape, shift=0.0):
    """ours against PyTorch's own module run in float64 (PyTorch's float32 channels-last
    GroupNorm takes E[x^2] - E[x]^2 and is itself 1e-4 off with a mean of 30)."""
    ours.load_state_dict(theirs.state_dict())
    theirs.eval()
    ours.eval()
    reference = copy.deepcopy(theirs).double()
    x = torch.randn(shape) * 2 + shift
    with torch.no_grad():
        for name, xf in formats(x):
            want = reference(xf.double()).float()
            got = ours(xf)
            torch.testing.assert_close(got, want, **TOL, msg=name)
            if xf.dim() >= 4:
                assert got.stride() == xf.stride(), name  # the memory format is kept


@pytest.mark.parametrize("shape,groups", [((2, 32, 7, 9), 8), ((1, 16, 3, 4, 5), 4), ((3, 8, 11), 2)])
def test_group_norm(shape, groups):
    c = shape[1]
    check_module(randomize(nn.GroupNorm(groups, c)), nkt.GroupNorm(groups, c), shape, shift=30)


def test_group_norm_silu_fused():
    theirs = nn.Sequential(randomize(nn.GroupNorm(4, 16)), nn.SiLU())
    ours = nkt.convert(copy.deepcopy(theirs))
    assert type(ours[0]) is nkt.GroupNormSiLU and isinstance(ours[1], nn.Identity)
    x = torch.randn(2, 16, 6, 6)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs.double()(x.double()).float(), **TOL)


@pytest.mark.parametrize("cls,ours,shape", [
    (nn.BatchNorm1d, nkt.BatchNorm1d, (4, 10)),
    (nn.BatchNorm1d, nkt.BatchNorm1d, (4, 10, 7)),
    (nn.BatchNorm2d, nkt.BatchNorm2d, (2, 12, 5, 6)),
    (nn.BatchNorm3d, nkt.BatchNorm3d, (2, 6, 3, 4, 5)),
])
def test_batch_norm_eval(cls, ours, shape):
    check_module(randomize(cls(shape[1])), ours(shape[1]), shape)


@pytest.mark.parametrize("cls,ours,shape", [
    (nn.BatchNorm1d, nkt.BatchNorm1d, (6, 10)),
    (nn.BatchNorm1d, nkt.BatchNorm1d, (4, 10, 7)),
    (nn.BatchNorm2d, nkt.BatchNorm2d, (4, 8, 5, 6)),
    (nn.BatchNorm3d, nkt.BatchNorm3d, (2, 6, 3, 4, 5)),
])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batch_norm_training_forward_and_backward(cls, ours, shape, momentum):
    """Training mode runs normkit's forward and backward (its autograd node): y, x.grad,
    weight.grad, bias.grad, the running averages and num_batches_tracked over three steps,
    against PyTorch's module in float64; every memory format of x."""
    x = torch.randn(shape) * 3 + 20
    for name, xf in formats(x):
        theirs = randomize(cls(shape[1], momentum=momentum)).double()
        mine = ours(shape[1], momentum=momentum)
        mine.load_state_dict(theirs.state_dict())
        for step in range(3):
            xs = (xf * (1 + 0.1 * step)).requires_grad_()
            xd = xs.detach().double().requires_grad_()
            got, want = mine(xs), theirs(xd)
            assert "_BatchNormTraining" in type(got.grad_fn).__name__, name  # normkit ran
            torch.testing.assert_close(got, want.float(), **TOL, msg=name)
            dy = torch.randn(shape)
            got.backward(dy)
            want.backward(dy.double())
            torch.testing.assert_close(xs.grad, xd.grad.float(), **TOL, msg=name)
            for a, b in ((mine.weight, theirs.weight), (mine.bias, theirs.bias)):
                torch.testing.assert_close(a.grad, b.grad.float(), rtol=1e-5, atol=1e-4, msg=name)
                a.grad, b.grad = None, None
            for a, b in ((mine.running_mean, theirs.running_mean),
                         (mine.running_var, theirs.running_var)):
                torch.testing.assert_close(a, b.float(), **TOL, msg=name)
            assert int(mine.num_batches_tracked) == int(theirs.num_batches_tracked) == step + 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("half_params", [True, False])
def test_batch_norm_training_in_half_precision(dtype, half_params):
    """Training mode on bfloat16 / float16 x runs normkit's forward and backward, for a
    model cast to that dtype (parameters and running averages in it) and for float32
    parameters with half activations: y, x.grad, the parameters' gradients and the
    running averages within the format's rounding of PyTorch's float64 module on the same
    values, every memory format of x."""
    shape = (4, 8, 5, 6)
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10

    def close(got, want, what):
        want = want.detach()
        tol = want.abs() * ulp + 1e-3 * want.abs().max() + 1e-6
        assert got.dtype == (dtype if half_params or what in ("y", "x.grad") else torch.float32)
        assert ((got.detach().double() - want).abs() <= tol).all(), what

    x0 = (torch.randn(shape) * 3 + 2).to(dtype)
    for name, xf in formats(x0):
        theirs = randomize(nn.BatchNorm2d(8))
        mine = nkt.BatchNorm2d(8)
        mine.load_state_dict(theirs.state_dict())
        if half_params:
            mine.to(dtype)
            theirs.to(dtype)  # the same rounded parameters for the reference
        ref = copy.deepcopy(theirs).double()
        xs = xf.clone().requires_grad_()
        xd = xf.detach().double().requires_grad_()
        got, want = mine(xs), ref(xd)
        assert "_BatchNormTraining" in type(got.grad_fn).__name__, name  # normkit ran
        close(got, want, "y")
        dy = torch.randn(shape).to(dtype)
        got.backward(dy)
        want.backward(dy.double())
        close(xs.grad, xd.grad, "x.grad")
        close(mine.weight.grad, ref.weight.grad, "weight.grad")
        close(mine.bias.grad, ref.bias.grad, "bias.grad")
        close(mine.running_mean, ref.running_mean, "running_mean")
        close(mine.running_var, ref.running_var, "running_var")


def test_batch_norm_training_without_running_stats_and_fallbacks():
    # track_running_stats=False: batch statistics in both modes, nothing updated.
    theirs = randomize(nn.BatchNorm2d(4, track_running_stats=False)).double()
    mine = nkt.BatchNorm2d(4, track_running_stats=False)
    mine.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 4, 5, 5)
    for mode in (True, False):
        mine.train(mode)
        theirs.train(mode)
        torch.testing.assert_close(mine(x), theirs(x.double()).float(), **TOL)
    # One value per channel: PyTorch's own error, from its forward.
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nkt.BatchNorm1d(4).train()(torch.randn(1, 4))
    # float64: PyTorch's forward.
    y = nkt.BatchNorm2d(4).double()(torch.randn(2, 4, 3, 3, dtype=torch.float64))
    assert "_BatchNormTraining" not in type(y.grad_fn).__name__ if y.grad_fn else True


@pytest.mark.parametrize("flags", [[], ["--channels-last"], ["--bfloat16", "--channels-last"]])
def test_training_example_runs(flags):
    """examples/torch_train_batch_norm.py: a converted conv net trains step for step with
    PyTorch's."""
    import os
    import subprocess
    import sys

    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                           "torch_train_batch_norm.py")
    out = subprocess.run([sys.executable, example, "--steps", "3"] + flags, check=True,
                         capture_output=True, text=True).stdout
    assert "same 3 steps" in out


@pytest.mark.parametrize("cls,ours,shape", [
    (nn.InstanceNorm1d, nkt.InstanceNorm1d, (3, 6, 20)),
    (nn.InstanceNorm2d, nkt.InstanceNorm2d, (2, 8, 9, 7)),
    (nn.InstanceNorm3d, nkt.InstanceNorm3d, (2, 4, 3, 5, 6)),
])
def test_instance_norm(cls, ours, shape):
    check_module(randomize(cls(shape[1], affine=True)), ours(shape[1], affine=True), shape)


@pytest.mark.parametrize("shape", [(5, 64), (2, 7, 96)])
def test_layer_and_rms_norm(shape):
    d = shape[-1]
    check_module(randomize(nn.LayerNorm(d)), nkt.LayerNorm(d), shape, shift=5)
    check_module(randomize(nn.LayerNorm(d, bias=False)), nkt.LayerNorm(d, bias=False), shape)
    check_module(randomize(nn.RMSNorm(d, eps=1e-6)), nkt.RMSNorm(d, eps=1e-6), shape)


def test_autograd_falls_back():
    m = nkt.convert(randomize(nn.GroupNorm(2, 8)))
    x = torch.randn(2, 8, 4, 4, requires_grad=True)
    m(x).sum().backward()
    assert x.grad is not None and m.weight.grad is not None


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                                  nn.ReLU(), nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))

    def forward(self, x):
        return torch.relu(x + self.body(x))


class UNetBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1))
        self.b = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1))

    def forward(self, x):
        return x + self.b(self.a(x))


class TransformerBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.norm2 = nn.RMSNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


@pytest.mark.parametrize("make,shape", [
    (lambda: ResBlock(16), (2, 16, 12, 12)),
    (lambda: UNetBlock(32), (2, 32, 10, 10)),
    (lambda: TransformerBlock(32), (2, 9, 32)),
])
def test_converted_models_match(make, shape):
    theirs = randomize(make()).eval()
    ours = nkt.fold_batch_norms(nkt.convert(copy.deepcopy(theirs)))
    reference = copy.deepcopy(theirs).double()
    x = torch.randn(shape)
    with torch.no_grad():
        for name, xf in formats(x):
            want = reference(xf.double()).float()
            torch.testing.assert_close(ours(xf), want, rtol=1e-4, atol=1e-4, msg=name)


def test_fold_batch_norms_replaces_them():
    model = nkt.fold_batch_norms(randomize(ResBlock(8)).eval())
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert model.body[0].bias is not None


def test_torch_compile_of_a_converted_model():
    model = nkt.convert(randomize(UNetBlock(16)).eval())
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x = torch.randn(1, 16, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), **TOL)


def test_functional_ops_take_torch_tensors_zero_copy():
    x = (torch.randn(2, 8, 5, 5) * 3 + 1).contiguous(memory_format=torch.channels_last)
    want = nn.functional.group_norm(x, 4)
    y = normkit.group_norm(x, 4, out=x)  # in place, through DLPack
    assert y is x
    torch.testing.assert_close(x, want, **TOL)


def test_converted_modules_run_normkit(monkeypatch):
    """Inference calls of converted modules go through normkit, not the fallback."""
    from normkit import _ops

    calls = []
    for name in ("group_norm", "instance_norm", "batch_norm", "layer_norm", "rms_norm"):
        original = getattr(_ops, name)
        monkeypatch.setattr(_ops, name,
                            lambda *a, _f=original, _n=name, **k: calls.append(_n) or _f(*a, **k))
    with torch.no_grad():
        nkt.convert(UNetBlock(16).eval())(torch.randn(1, 16, 6, 6))
        nkt.convert(randomize(ResBlock(8)).eval())(torch.randn(1, 8, 6, 6))
        nkt.convert(TransformerBlock(32).eval())(torch.randn(1, 5, 32))
        nkt.convert(nn.InstanceNorm2d(4))(torch.randn(1, 4, 5, 5))
    assert calls.count("group_norm") == 2 and calls.count("batch_norm") == 2
    assert "layer_norm" in calls and "rms_norm" in calls and "instance_norm" in calls


@pytest.mark.skipif(not torch.cuda.is_available() or normkit.cuda_device_count() == 0,
                    reason="needs a GPU and a normkit built with its CUDA module")
def test_cuda_tensors_run_on_the_gpu():
    x = torch.randn(2, 8, 5, 5, device="cuda")
    y = normkit.group_norm(x, 4)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, nn.functional.group_norm(x.double(), 4).float(), **TOL)


def test_cuda_tensors_without_the_module_say_why():
    if normkit.cuda_device_count() > 0 or not torch.cuda.is_available():
        pytest.skip("covered by test_cuda_tensors_run_on_the_gpu, or no CUDA tensors here")
    with pytest.raises(RuntimeError, match="CUDA"):
        normkit.group_norm(torch.randn(2, 8, 5, 5, device="cuda"), 4)


def test_torch_export_of_a_converted_model():
    model = nkt.convert(randomize(UNetBlock(16)).eval())
    x = torch.randn(1, 16, 8, 8)
    with torch.no_grad():  # inference: the parameters' requires_grad would select PyTorch's path
        exported = torch.export.export(model, (x,))
    ops = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert any("normkit.group_norm" in op for op in ops), ops
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(x), model(x), **TOL)


def test_modules_run_on_a_host_pool_context():
    calls = []

    def serial(n, run):
        calls.append(n)
        for i in range(n):
            run(i)

    x = torch.randn(2, 64, 40, 40).contiguous(memory_format=torch.channels_last)
    module = nkt.convert(nn.Sequential(randomize(nn.GroupNorm(8, 64)))).eval()
    with torch.no_grad():
        expected = module(x)
        nkt.set_context(normkit.Context(2, parallel_for=serial))
        try:
            got = module(x)
        finally:
            nkt.set_context(None)
    assert calls and torch.equal(got, expected)
    with pytest.raises(TypeError, match="normkit.Context"):
        nkt.set_context(2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_batch_norm_module_in_half_precision(dtype, monkeypatch):
    """A model cast to bfloat16 / float16: its BatchNorm runs in normkit on half tensors
    (parameters widened to float32), within one unit of the format of the float64 result."""
    from normkit import _ops

    calls = []
    original = _ops.batch_norm
    monkeypatch.setattr(_ops, "batch_norm",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    theirs = randomize(nn.BatchNorm2d(16)).eval()
    ours = nkt.convert(nn.Sequential(copy.deepcopy(theirs))).to(dtype)
    x0 = (torch.randn(2, 16, 9, 11) * 3).to(dtype)
    for name, x in formats(x0):
        with torch.no_grad():
            y = ours(x)
            ref = copy.deepcopy(theirs).double()(x.double())
        assert y.dtype == dtype and y.is_contiguous(memory_format=torch.channels_last) == (
            name == "channels_last"), name
        ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
        # One unit of the format at the result, plus the parameters' own rounding to it.
        tol = (ref.abs() + 1) * ulp * 2
        assert ((y.double() - ref).abs() <= tol).all(), name
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_and_rms_norm_modules_in_half_precision(dtype):
    """A transformer block cast to bfloat16 / float16: its LayerNorm and RMSNorm run in
    normkit on half rows, within one unit of the format of the float64 result, and bitwise
    what PyTorch's own half module gives but for ties of the second rounding."""
    for theirs in (randomize(nn.LayerNorm(96)), randomize(nn.RMSNorm(96, eps=1e-6))):
        ours = nkt.convert(nn.Sequential(copy.deepcopy(theirs))).to(dtype)
        x = (torch.randn(3, 17, 96) * 2 + 1).to(dtype)
        with torch.no_grad():
            y = ours(x)
            # The half model's parameters, exactly: the reference of the model that runs.
            ref = copy.deepcopy(theirs).to(dtype).double()(x.double())
            torch_half = copy.deepcopy(theirs).to(dtype)(x)
        assert y.dtype == dtype
        ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
        assert ((y.double() - ref).abs() <= (ref.abs() + 2 ** -6) * ulp * 1.01).all()
        # PyTorch's own half module: the same rounding of a float32 result.
        assert (y.double() - torch_half.double()).abs().max() <= ref.abs().max() * ulp


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_add_layer_and_rms_norm_on_half_tensors(dtype):
    """A transformer block's add & norm on half tensors: h bitwise PyTorch's (x + r) + bias
    in that dtype, y within one unit of the format of PyTorch's norm of that h (both round
    a float32 result)."""
    x = (torch.randn(4, 7, 256) * 2 + 1).to(dtype)
    r = torch.randn(4, 7, 256).to(dtype)
    w, b, a = torch.randn(256), torch.randn(256), torch.randn(256)
    h_torch = ((x.float() + r.float()) + a).to(dtype)
    h = torch.empty_like(x)
    y = normkit.add_layer_norm(x, r, w, b, 1e-5, add_bias=a, residual_out=h)
    assert y.dtype == dtype and torch.equal(h, h_torch)
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    want = nn.functional.layer_norm(h_torch.float(), (256,), w, b, 1e-5)
    assert ((y.float() - want).abs() <= (want.abs() + 2 ** -6) * ulp * 1.01).all()
    y_rms = normkit.add_rms_norm(x, r, w, 1e-6)
    want = nn.functional.rms_norm((x.float() + r.float()).to(dtype).float(), (256,), w, 1e-6)
    assert ((y_rms.float() - want).abs() <= (want.abs() + 2 ** -6) * ulp * 1.01).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_group_and_instance_norm_modules_in_half_precision(dtype, monkeypatch):
    """A model cast to bfloat16 / float16: its GroupNorm (with the fused SiLU) and
    InstanceNorm2d run in normkit on half tensors in both layouts, within one unit of the
    format of the float64 result of the half model's parameters."""
    from normkit import _ops

    calls = []
    for name in ("group_norm", "instance_norm"):
        original = getattr(_ops, name)
        monkeypatch.setattr(_ops, name,
                            lambda *a, _f=original, **k: calls.append(1) or _f(*a, **k))
    modules = [(randomize(nn.GroupNorm(4, 16)), None),
               (randomize(nn.GroupNorm(8, 16)), nn.SiLU()),
               (randomize(nn.InstanceNorm2d(16, affine=True)), None)]
    x0 = (torch.randn(2, 16, 9, 11) * 3 + 1).to(dtype)
    for theirs, act in modules:
        layers = [theirs] + ([act] if act else [])
        # The reference first: convert swaps the modules' classes in place.
        reference = nn.Sequential(*copy.deepcopy(layers)).to(dtype).double()
        ours = nkt.convert(nn.Sequential(*copy.deepcopy(layers))).to(dtype)
        for name, x in formats(x0):
            with torch.no_grad():
                y = ours(x)
                ref = reference(x.double())
            assert y.dtype == dtype, name
            ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
            # One unit of the format, and float32's error where beta cancels the value.
            assert ((y.double() - ref).abs() <= (ref.abs() + 2 ** -6) * ulp * 1.01).all(), name
    assert len(calls) == 6
