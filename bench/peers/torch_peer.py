#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""normkit against PyTorch on the same CPU tensors, like for like.

    pip install . torch && python bench/peers/torch_peer.py [--set half|train] [--rounds 3]

--set half (the default): bfloat16 / float16 tensors: group norm (seed 002's
128x256x28x28 and 32x512x56x56, G=32), layer norm ([4096, 768], [2048, 4096]) and batch
norm in eval (64x256x64x64). --set train: float32 batch norm in training mode on seed
001's grid: the forward (batch statistics, running averages updated) and the backward
(grad_input, grad_weight, grad_bias from the saved statistics: PyTorch's
native_batch_norm_backward.out, the kernel its autograd runs, into preallocated outputs,
against normkit.batch_norm_training_backward into preallocated outputs). NCHW and NHWC
(PyTorch's channels_last) where the op has a layout, 1 and 2 threads.

Like for like: normkit writes into a preallocated output (out=); PyTorch's F.group_norm /
F.layer_norm / F.batch_norm have no out=, so the process runs with glibc's allocator told
to keep freed memory (M_MMAP_THRESHOLD / M_TRIM_THRESHOLD, set before Python starts: the
script re-executes itself): each PyTorch call reuses the previous call's output instead of
faulting in fresh pages. Outputs are compared first (within two units of the format).
Each round times both interleaved (median of `reps` calls); a row is a win or a loss
only when the per-round ranges of the two times do not overlap, else a tie.
"""
import argparse

from peer_util import reexec_keeping_freed_memory, timed

reexec_keeping_freed_memory()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import normkit  # noqa: E402


def train_rows(quick):
    shapes = [(32, 256, 1024), (8, 2, 102400), (128, 1024, 16), (32, 32, 64, 64),
              (16, 256, 32, 32), (8, 32, 128, 128), (8, 32, 32, 32, 32), (8, 2, 64, 64, 64)]
    for shape in shapes[:3] if quick else shapes:
        for cl in (False, True) if len(shape) > 3 else (False,):
            yield "batch_norm_training", shape, cl
            yield "batch_norm_backward", shape, cl


def rows(quick):
    gn = [(128, 256, 28, 28)] + ([] if quick else [(32, 512, 56, 56)])
    for shape in gn:
        for cl in (False, True):
            yield "group_norm", shape, cl
    for shape in [(4096, 768)] + ([] if quick else [(2048, 4096)]):
        yield "layer_norm", shape, False
    for cl in (False, True):
        yield "batch_norm", (64, 256, 64, 64) if not quick else (16, 256, 64, 64), cl


def make_calls(op, shape, cl, dtype, threads):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=gen) * 2 + 0.5).to(dtype)
    if cl:
        x = x.contiguous(memory_format=(torch.channels_last if len(shape) == 4 else
                                        torch.channels_last_3d))
    C = shape[-1] if op == "layer_norm" else shape[1]
    w = torch.rand(C, generator=gen) + 0.5
    b = torch.randn(C, generator=gen)
    out = torch.empty_like(x)
    ctx = normkit.Context(threads)
    # Both take the same float32 parameters (PyTorch's CPU kernels accept them beside a
    # half x: its mixed-type path).
    if op == "group_norm":
        return (lambda: F.group_norm(x, 32, w, b, 1e-5),
                lambda: normkit.group_norm(x, 32, w, b, 1e-5, out=out, context=ctx), out)
    if op == "layer_norm":
        return (lambda: F.layer_norm(x, (C,), w, b, 1e-5),
                lambda: normkit.layer_norm(x, w, b, 1e-5, out=out, context=ctx), out)
    mean, var = torch.randn(C, generator=gen), torch.rand(C, generator=gen) + 0.5
    if op == "batch_norm_training":
        # Each updates its own running statistics (momentum 0.1) every call.
        mean2, var2 = mean.clone(), var.clone()
        save_mean, save_rstd = torch.empty(C), torch.empty(C)
        return (lambda: F.batch_norm(x, mean, var, w, b, True, 0.1, 1e-5),
                lambda: normkit.batch_norm_training(x, mean2, var2, w, b, 0.1, 1e-5, out=out,
                                                    save_mean=save_mean, save_rstd=save_rstd,
                                                    context=ctx), out,
                # float64: the reference both are checked against (PyTorch's float32
                # channels_last statistics drift by up to 1e-3 on these shapes).
                lambda: F.batch_norm(x.double(), mean.double(), var.double(), w.double(),
                                     b.double(), True, 0.1, 1e-5))
    if op == "batch_norm_backward":
        dy = torch.randn(shape, generator=gen).contiguous(memory_format=torch.preserve_format)
        dy = torch.empty_like(x).copy_(dy)  # x's memory format
        save_mean = x.mean([d for d in range(x.dim()) if d != 1])
        save_rstd = 1 / (x.var([d for d in range(x.dim()) if d != 1], unbiased=False) + 1e-5).sqrt()
        peer_out = (torch.empty_like(x), torch.empty(C), torch.empty(C))
        gw, gb = torch.empty(C), torch.empty(C)
        aten = torch.ops.aten.native_batch_norm_backward
        return (lambda: aten.out(dy, x, w, None, None, save_mean, save_rstd, True, 1e-5,
                                 [True, True, True], out0=peer_out[0], out1=peer_out[1],
                                 out2=peer_out[2])[0],
                lambda: normkit.batch_norm_training_backward(
                    x, dy, save_mean, save_rstd, w, grad_input=out, grad_weight=gw,
                    grad_bias=gb, context=ctx), out,
                lambda: aten(dy.double(), x.double(), w.double(), None, None,
                             save_mean.double(), save_rstd.double(), True, 1e-5,
                             [True, True, True])[0])
    return (lambda: F.batch_norm(x, mean, var, w, b, False, 0.0, 1e-5),
            lambda: normkit.batch_norm(x, mean, var, w, b, 1e-5, out=out, context=ctx), out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="smaller shapes (a smoke run)")
    ap.add_argument("--set", choices=("half", "train"), default="half")
    args = ap.parse_args()
    dtypes = (torch.bfloat16, torch.float16) if args.set == "half" else (torch.float32,)
    row_set = rows if args.set == "half" else train_rows
    print(f"normkit {normkit.version()} ({normkit.simd_target()}), torch {torch.__version__}, "
          f"{args.rounds} rounds, median of {args.reps} calls each; ratio = torch / normkit time")
    print("| op | shape | layout | dtype | threads | normkit ms | torch ms | ratio range | verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for op, shape, cl in row_set(args.quick):
        for dtype in dtypes:
            for threads in (1, 2):
                torch.set_num_threads(threads)
                peer, ours, out, *reference = make_calls(op, shape, cl, dtype, threads)
                want = peer()
                ours()
                note = ""
                if reference:  # both against float64
                    ref = reference[0]()
                    err = ((out.double() - ref).abs() / (ref.abs() + 1)).max().item()
                    peer_err = ((want.double() - ref).abs() / (ref.abs() + 1)).max().item()
                    unit = 2.0 ** -20
                    if peer_err > 2 * unit:
                        note = f" (PyTorch off float64 by {peer_err:.1e}, normkit {err:.1e})"
                else:
                    unit = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}[dtype]
                    err = ((out.float() - want.float()).abs() / (want.float().abs() + 1)).max().item()
                if not err <= 2 * unit:
                    print(f"| {op} | {'x'.join(map(str, shape))} | {'NHWC' if cl else '-'} | "
                          f"{dtype} | {threads} | outputs differ: {err:.3g} relative |")
                    continue
                t_ours, t_peer = [], []
                for _ in range(args.rounds):
                    t_peer.append(timed(peer, args.reps))
                    t_ours.append(timed(ours, args.reps))
                ratios = [p / o for p, o in zip(t_peer, t_ours)]
                verdict = ("win" if max(t_ours) < min(t_peer) else
                           "loss" if max(t_peer) < min(t_ours) else "tie")
                name = str(dtype).replace("torch.", "")
                print(f"| {op} | {'x'.join(map(str, shape))} | "
                      f"{'NHWC' if cl else ('-' if op == 'layer_norm' else 'NCHW')} | {name} | "
                      f"{threads} | {min(t_ours) * 1e3:.2f}-{max(t_ours) * 1e3:.2f} | "
                      f"{min(t_peer) * 1e3:.2f}-{max(t_peer) * 1e3:.2f} | "
                      f"{min(ratios):.2f}-{max(ratios):.2f} | {verdict}{note} |", flush=True)


if __name__ == "__main__":
    main()
