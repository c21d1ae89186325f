#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""normkit against PyTorch on the same CPU tensors, like for like.

    pip install . torch && python bench/peers/torch_peer.py [--set half|train|...] [--rounds 3]

--set half (the default): bfloat16 / float16 tensors: group norm (seed 002's
128x256x28x28 and 32x512x56x56, G=32), layer norm ([4096, 768], [2048, 4096]) and batch
norm in eval (64x256x64x64). --set train: float32 batch norm in training mode on seed
001's grid: the forward (batch statistics, running averages updated) and the backward
(grad_input, grad_weight, grad_bias from the saved statistics: PyTorch's
native_batch_norm_backward.out, the kernel its autograd runs, into preallocated outputs,
against normkit.batch_norm_training_backward into preallocated outputs). NCHW and NHWC
(PyTorch's channels_last) where the op has a layout, 1 and 2 threads. --set train_half: the
same in bfloat16 / float16 on four of those shapes (parameters, running and saved statistics
float32 on both sides: PyTorch's mixed-type CPU path). --set model: whole
networks (examples/torch_convert.py's ResNet, UNet and transformer blocks) as PyTorch runs
them against the same networks through normkit.torch.convert / fold_batch_norms.

Like for like: normkit writes into a preallocated output (out=); PyTorch's F.group_norm /
F.layer_norm / F.batch_norm have no out=, so the process runs with glibc's allocator told
to keep freed memory (M_MMAP_THRESHOLD / M_TRIM_THRESHOLD, set before Python starts: the
script re-executes itself): each PyTorch call reuses the previous call's output instead of
faulting in fresh pages. Both outputs are checked against float64 first (normkit within a
unit of the format, relative to |ref| + 1; PyTorch within two). The timing and verdicts are
peer_util.compare's: a win or a loss only when the per-round ranges do not overlap.
"""
import argparse

from peer_util import (TABLE_HEAD, Case, Peer, counts, reexec_keeping_freed_memory,
                       run_cases)

if __name__ == "__main__":
    reexec_keeping_freed_memory()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import normkit  # noqa: E402


def train_rows(quick):
    shapes = [(32, 256, 1024), (8, 2, 102400), (128, 1024, 16), (32, 32, 64, 64),
              (16, 256, 32, 32), (8, 32, 128, 128), (8, 32, 32, 32, 32), (8, 2, 64, 64, 64)]
    for shape in [(8, 16, 1024), (4, 8, 16, 16)] if quick else shapes:
        for cl in (False, True) if len(shape) > 3 else (False,):
            yield "batch_norm_training", shape, cl
            yield "batch_norm_backward", shape, cl


def train_half_rows(quick):
    shapes = [(32, 256, 1024), (128, 1024, 16), (8, 32, 128, 128), (8, 2, 64, 64, 64)]
    for shape in [(8, 16, 1024), (4, 8, 16, 16)] if quick else shapes:
        for cl in (False, True) if len(shape) > 3 else (False,):
            yield "batch_norm_training", shape, cl
            yield "batch_norm_backward", shape, cl


def rows(quick):
    for shape in [(4, 64, 28, 28)] if quick else [(128, 256, 28, 28), (32, 512, 56, 56)]:
        for cl in (False, True):
            yield "group_norm", shape, cl
    for shape in [(256, 768)] if quick else [(4096, 768), (2048, 4096)]:
        yield "layer_norm", shape, False
    for cl in (False, True):
        yield "batch_norm", (2, 256, 32, 32) if quick else (64, 256, 64, 64), cl


def half_more_rows(quick):
    """The half rows beyond the "half" set: affine (seed 000's shape), RMS norm and the
    residual add + layer / RMS norm."""
    for cl in (False, True):
        yield "affine", (4, 64, 32, 32) if quick else (64, 256, 64, 64), cl
    for op in ("rms_norm", "add_layer_norm", "add_rms_norm"):
        for shape in [(256, 768)] if quick else [(4096, 768), (2048, 4096)]:
            yield op, shape, False


def make_case(op, shape, cl, dtype, threads):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=gen) * 2 + 0.5).to(dtype)
    if cl:
        x = x.contiguous(memory_format=(torch.channels_last if len(shape) == 4 else
                                        torch.channels_last_3d))
    rows_op = op in ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
    C = shape[-1] if rows_op else shape[1]
    w = torch.rand(C, generator=gen) + 0.5
    b = torch.randn(C, generator=gen)
    out = torch.empty_like(x)
    ctx = normkit.Context(threads)
    xd, wd, bd = x.double(), w.double(), b.double()
    mean, var = torch.randn(C, generator=gen), torch.rand(C, generator=gen) + 0.5
    res = {}
    # Both take the same float32 parameters (PyTorch's CPU kernels accept them beside a
    # half x: its mixed-type path).
    if op == "group_norm":
        peer = lambda: res.__setitem__("y", F.group_norm(x, 32, w, b, 1e-5))  # noqa: E731
        ours = lambda: normkit.group_norm(x, 32, w, b, 1e-5, out=out, context=ctx)  # noqa: E731
        ref = F.group_norm(xd, 32, wd, bd, 1e-5)
        name = "F.group_norm"
    elif op == "layer_norm":
        peer = lambda: res.__setitem__("y", F.layer_norm(x, (C,), w, b, 1e-5))  # noqa: E731
        ours = lambda: normkit.layer_norm(x, w, b, 1e-5, out=out, context=ctx)  # noqa: E731
        ref = F.layer_norm(xd, (C,), wd, bd, 1e-5)
        name = "F.layer_norm"
    elif op == "rms_norm":
        # PyTorch's fused RMS norm wants the weight in x's dtype (a float32 one beside a half
        # x takes its slow path, with a warning); normkit takes the same values in float32.
        wh = w.to(dtype)
        w = wh.float()
        peer = lambda: res.__setitem__("y", F.rms_norm(x, (C,), wh, 1e-5))  # noqa: E731
        ours = lambda: normkit.rms_norm(x, w, 1e-5, out=out, context=ctx)  # noqa: E731
        ref = F.rms_norm(xd, (C,), wd, 1e-5)
        name = "F.rms_norm"
    elif op in ("add_layer_norm", "add_rms_norm"):
        # A transformer block's add & norm: PyTorch adds into a preallocated h in x's dtype
        # (rounded), then normalizes h; normkit does both in one call, writing y and h.
        # RMS norm's weight in x's dtype as above (its fused path).
        rms = op == "add_rms_norm"
        r = (torch.randn(shape, generator=gen)).to(dtype)
        wh = w.to(dtype)
        if rms:
            w = wh.float()
        h_peer, h_ours = torch.empty_like(x), torch.empty_like(x)

        def peer():
            torch.add(x, r, out=h_peer)
            res["y"] = F.rms_norm(h_peer, (C,), wh, 1e-5) if rms else F.layer_norm(
                h_peer, (C,), w, b, 1e-5)

        fn = normkit.add_rms_norm if rms else normkit.add_layer_norm
        kw = {} if rms else {"bias": b}
        ours = lambda: fn(x, r, w, eps=1e-5, out=out, residual_out=h_ours,  # noqa: E731
                          context=ctx, **kw)
        hd = (x.float() + r.float()).to(dtype).double()  # h as both store it
        ref = (F.rms_norm(hd, (C,), wd, 1e-5) if rms else F.layer_norm(hd, (C,), wd, bd, 1e-5))
        del hd
        name = ("torch.add(out=) + F." + ("rms_norm" if rms else "layer_norm"))
    elif op == "affine":
        # PyTorch's half addcmul takes half parameters; normkit float32 ones (the same
        # values: half-exact).
        wh, bh = w.to(dtype), b.to(dtype)
        w, b = wh.float(), bh.float()
        wv, bv = wh.view(1, C, 1, 1), bh.view(1, C, 1, 1)
        peer = lambda: torch.addcmul(bv, x, wv, out=out_peer)  # noqa: E731
        out_peer = torch.empty_like(x)
        res["y"] = out_peer
        ours = lambda: normkit.affine(x, w, b, out=out, context=ctx)  # noqa: E731
        ref = xd * w.double().view(1, C, 1, 1) + b.double().view(1, C, 1, 1)
        name = "torch.addcmul(out=)"
    elif op == "batch_norm_training":
        # Each updates its own running statistics (momentum 0.1) every call.
        mean2, var2 = mean.clone(), var.clone()
        save_mean, save_rstd = torch.empty(C), torch.empty(C)
        peer = lambda: res.__setitem__(  # noqa: E731
            "y", F.batch_norm(x, mean, var, w, b, True, 0.1, 1e-5))
        ours = lambda: normkit.batch_norm_training(  # noqa: E731
            x, mean2, var2, w, b, 0.1, 1e-5, out=out, save_mean=save_mean, save_rstd=save_rstd,
            context=ctx)
        ref = F.batch_norm(xd, mean.double(), var.double(), wd, bd, True, 0.1, 1e-5)
        name = "F.batch_norm(training=True)"
    elif op == "batch_norm_backward":
        dy = torch.empty_like(x).copy_(torch.randn(shape, generator=gen))  # x's memory format
        dims = [d for d in range(x.dim()) if d != 1]
        save_mean = x.float().mean(dims)  # float32 whatever x's dtype (the API's arrays)
        save_rstd = 1 / (x.float().var(dims, unbiased=False) + 1e-5).sqrt()
        peer_out = (torch.empty_like(x), torch.empty(C), torch.empty(C))
        gw, gb = torch.empty(C), torch.empty(C)
        aten = torch.ops.aten.native_batch_norm_backward
        peer = lambda: res.__setitem__("y", aten.out(  # noqa: E731
            dy, x, w, None, None, save_mean, save_rstd, True, 1e-5, [True, True, True],
            out0=peer_out[0], out1=peer_out[1], out2=peer_out[2])[0])
        ours = lambda: normkit.batch_norm_training_backward(  # noqa: E731
            x, dy, save_mean, save_rstd, w, grad_input=out, grad_weight=gw, grad_bias=gb,
            context=ctx)
        ref = aten(dy.double(), xd, wd, None, None, save_mean.double(), save_rstd.double(), True,
                   1e-5, [True, True, True])[0]
        name = "native_batch_norm_backward.out"
    else:
        peer = lambda: res.__setitem__(  # noqa: E731
            "y", F.batch_norm(x, mean, var, w, b, False, 0.0, 1e-5))
        ours = lambda: normkit.batch_norm(x, mean, var, w, b, 1e-5, out=out,  # noqa: E731
                                          context=ctx)
        ref = F.batch_norm(xd, mean.double(), var.double(), wd, bd, False, 0.0, 1e-5)
        name = "F.batch_norm(training=False)"
    del xd
    # Per element, relative to |ref| + 1: the stored result within a unit of the format
    # (two for the peer's, which rounds its own way). float32 training: PyTorch's
    # channels-last statistics drift by up to 1e-3 on these shapes; accepted, and the row
    # says by how much.
    unit = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -20}[dtype]

    def error(got):
        got = torch.as_tensor(got).double()
        return ((got - ref).abs() / (ref.abs() + 1)).max().item()

    layout = "NHWC" if cl else ("rows" if rows_op else "NCHW")
    training = op in ("batch_norm_training", "batch_norm_backward")
    return Case("train" if training else "half", op, shape, layout,
                str(dtype).replace("torch.", ""), threads, ours, lambda: out,
                [Peer(f"PyTorch {name}", peer, lambda: res["y"])], error,
                ours_tol=2 * unit, peer_tol=1e-3 if dtype == torch.float32 else 4 * unit)


def model_cases(quick=False, threads_list=(1, 2)):
    """Whole networks (examples/torch_convert.py's): PyTorch's against the same network
    through normkit.torch.convert and fold_batch_norms, under inference_mode."""
    import copy
    import os
    import sys

    import normkit.torch as nkt

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "examples"))
    from torch_convert import NETWORKS, ResBlock, network_variants

    torch.manual_seed(0)
    nets = NETWORKS
    if quick:
        nets = [("ResNet block, BN folded, 1x16x28x28", lambda: ResBlock(16), (1, 16, 28, 28), True)]
    for name, shape, layout, theirs, ours, x in network_variants(nets):
        with torch.inference_mode():
            ref = copy.deepcopy(theirs).double()(x.double())
        scale = ref.abs().max().item() + 1
        for threads in threads_list:
            torch.set_num_threads(threads)
            nkt.set_num_threads(threads)
            res = {}

            def run(m, key):
                def call():
                    with torch.inference_mode():
                        res[key] = m(x)
                return call

            yield Case("model", name, shape, layout, "float32", threads, run(ours, "o"),
                       lambda: res["o"], [Peer("PyTorch nn.Module", run(theirs, "t"),
                                               lambda: res["t"], style="plain")],
                       lambda got: ((got.double() - ref).abs().max() / scale).item(),
                       ours_tol=1e-4, peer_tol=1e-4)


def cases(which="half", quick=False, threads_list=(1, 2), ops=None):
    if which == "model":
        yield from model_cases(quick, threads_list)
        return
    half = which in ("half", "half_more", "train_half")
    dtypes = (torch.bfloat16, torch.float16) if half else (torch.float32,)
    row_set = {"half": rows, "half_more": half_more_rows, "train": train_rows,
               "train_half": train_half_rows}[which]
    for op, shape, cl in row_set(quick):
        if ops and op not in ops:
            continue
        for dtype in dtypes:
            for threads in threads_list:
                torch.set_num_threads(threads)
                yield make_case(op, shape, cl, dtype, threads)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller shapes (a smoke run)")
    ap.add_argument("--set", choices=("half", "half_more", "train", "train_half", "model"),
                    default="half")
    ap.add_argument("--ops", default="", help="only these ops, e.g. add_layer_norm,add_rms_norm")
    args = ap.parse_args()
    print(f"normkit {normkit.version()} ({normkit.simd_target()}), torch {torch.__version__}, "
          f"{args.rounds} rounds; ratio = torch / normkit time")
    print(TABLE_HEAD)
    ops = set(args.ops.split(",")) if args.ops else None
    c = counts(run_cases(cases(args.set, args.quick, ops=ops), args.rounds))
    print(f"\n{c['win']} wins, {c['tie']} ties, {c['loss']} losses")


if __name__ == "__main__":
    main()
