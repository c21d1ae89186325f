# SPDX-License-Identifier: Apache-2.0
"""Converts three small PyTorch networks to normkit's norms and times their whole forward
on the CPU against PyTorch's, after checking that the outputs agree.

    pip install .[torch] (or torch next to the normkit wheel)
    python examples/torch_convert.py [--rounds 7] [--modules [--dtype bfloat16]]

--modules times each norm module alone instead (PyTorch's against normkit's); --dtype
bfloat16 / float16 casts those modules and their inputs (the ones normkit runs in half).

Networks: a ResNet-style block (conv + BatchNorm, folded into the convs with
normkit.torch.fold_batch_norms), a diffusion-UNet-style block (GroupNorm + SiLU, fused),
a transformer block (LayerNorm, RMSNorm). Both memory formats for the conv networks, 1 and
2 threads (PyTorch's ops and normkit's alike). Each cell: the median of `rounds` timed
blocks of calls, the two models alternating.
"""
import argparse
import copy
import statistics
import time

import torch
from torch import nn

import normkit.torch as nkt


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                                  nn.ReLU(), nn.Conv2d(c, c, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(c))

    def forward(self, x):
        return torch.relu(x + self.body(x))


class UNetBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1))
        self.b = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1))

    def forward(self, x):
        return x + self.b(self.a(x))


class TransformerBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 12, batch_first=True)
        self.norm2 = nn.RMSNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def randomized(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm, nn.RMSNorm)):
                if m.weight is not None:
                    m.weight.uniform_(0.5, 1.5)
                if getattr(m, "bias", None) is not None:
                    m.bias.uniform_(-0.5, 0.5)
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def timed(model, x, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        model(x)
    return (time.perf_counter() - t0) / calls


# The networks: (name, constructor, input shape, convolutional: both memory formats).
NETWORKS = [
    ("ResNet block, BN folded, 8x64x56x56", lambda: ResBlock(64), (8, 64, 56, 56), True),
    ("UNet block, GroupNorm+SiLU, 4x128x32x32", lambda: UNetBlock(128), (4, 128, 32, 32), True),
    ("transformer block, LayerNorm + RMSNorm, 4x256x768", lambda: TransformerBlock(768),
     (4, 256, 768), False),
]


def network_variants(networks):
    """Each network in each memory format it runs in: (name, input shape, layout, PyTorch's
    model, the same model through normkit.torch.convert and fold_batch_norms, an input)."""
    for name, make, shape, conv in networks:
        theirs = randomized(make())
        ours = nkt.fold_batch_norms(nkt.convert(copy.deepcopy(theirs)))
        formats = [("NCHW", torch.contiguous_format), ("NHWC", torch.channels_last)] if conv else [
            ("rows", torch.contiguous_format)]
        for layout, fmt in formats:
            theirs_f = copy.deepcopy(theirs).to(memory_format=fmt) if conv else theirs
            ours_f = copy.deepcopy(ours).to(memory_format=fmt) if conv else ours
            x = torch.randn(shape)
            yield name, shape, layout, theirs_f, ours_f, x.contiguous(memory_format=fmt) if conv else x


def modules_alone(rounds, dtype=torch.float32):
    """Each norm module alone: PyTorch's, and the same module converted, both cast to dtype
    (bfloat16 / float16: the modules normkit runs on half tensors)."""
    cases = [
        ("GroupNorm(32, 256)", lambda: nn.GroupNorm(32, 256), (8, 256, 28, 28), True),
        ("GroupNorm(32, 256) + SiLU", lambda: nn.Sequential(nn.GroupNorm(32, 256), nn.SiLU()),
         (8, 256, 28, 28), True),
        ("BatchNorm2d(256), eval", lambda: nn.BatchNorm2d(256), (8, 256, 28, 28), True),
        ("InstanceNorm2d(64)", lambda: nn.InstanceNorm2d(64), (8, 64, 64, 64), True),
        ("LayerNorm(768)", lambda: nn.LayerNorm(768), (4096, 768), False),
        ("RMSNorm(768)", lambda: nn.RMSNorm(768), (4096, 768), False),
    ]
    if dtype != torch.float32:
        cases = [c for c in cases if c[0].startswith(("BatchNorm", "LayerNorm", "RMSNorm"))]
    tol = {torch.float32: 1e-4, torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10}[dtype]
    print(f"| module ({str(dtype).replace('torch.', '')}) | shape | layout | threads | "
          "PyTorch ms | normkit ms | speedup |")
    print("|---|---|---|---|---|---|---|")
    for name, make, shape, conv in cases:
        theirs = randomized(make()).to(dtype)
        ours = nkt.convert(copy.deepcopy(theirs))
        formats = [("NCHW", torch.contiguous_format), ("NHWC", torch.channels_last)] if conv else [
            ("rows", torch.contiguous_format)]
        for layout, fmt in formats:
            x = (torch.randn(shape) * 2 + 1).to(dtype)
            x = x.contiguous(memory_format=fmt) if conv else x
            for threads in (1, 2):
                torch.set_num_threads(threads)
                nkt.set_num_threads(threads)
                with torch.inference_mode():
                    want = copy.deepcopy(theirs).double()(x.double())
                    got = ours(x).double()
                    if not torch.allclose(got, want, rtol=tol, atol=tol):
                        raise SystemExit(f"{name} {layout}: outputs differ")
                    calls = max(1, int(0.1 / max(timed(theirs, x, 1), 1e-5)))
                    t_theirs, t_ours = [], []
                    for _ in range(rounds):
                        t_theirs.append(timed(theirs, x, calls))
                        t_ours.append(timed(ours, x, calls))
                a, b = statistics.median(t_theirs), statistics.median(t_ours)
                print(f"| {name} | {'x'.join(map(str, shape))} | {layout} | {threads} | "
                      f"{a * 1e3:.3f} | {b * 1e3:.3f} | {a / b:.2f}x |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--modules", action="store_true", help="each norm module alone")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                        help="with --modules: the modules and tensors in this dtype")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.modules:
        return modules_alone(args.rounds, getattr(torch, args.dtype))
    print("| network | layout | threads | PyTorch ms | normkit ms | speedup | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for name, _, layout, theirs_f, ours_f, x in network_variants(NETWORKS):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            nkt.set_num_threads(threads)
            with torch.inference_mode():
                want, got = theirs_f(x), ours_f(x)
                diff = (want - got).abs().max().item()
                if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
                    raise SystemExit(f"{name} {layout}: outputs differ by {diff}")
                calls = max(1, int(0.2 / max(timed(theirs_f, x, 1), 1e-4)))
                t_theirs, t_ours = [], []
                for _ in range(args.rounds):
                    t_theirs.append(timed(theirs_f, x, calls))
                    t_ours.append(timed(ours_f, x, calls))
            a, b = statistics.median(t_theirs), statistics.median(t_ours)
            print(f"| {name} | {layout} | {threads} | {a * 1e3:.2f} | {b * 1e3:.2f} | "
                  f"{a / b:.2f}x | {diff:.1e} |")

if __name__ == "__main__":
    main()
