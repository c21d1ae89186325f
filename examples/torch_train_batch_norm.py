# SPDX-License-Identifier: Apache-2.0
"""Trains a small conv net whose BatchNorm2d layers run on normkit (forward and backward),
next to the same net on PyTorch's own BatchNorm2d, and checks that both take the same steps.

    pip install . torch
    python examples/torch_train_batch_norm.py [--steps 5] [--channels-last] [--bfloat16]

normkit.torch.convert swaps the model's norms for normkit's subclasses in place (the same
parameters, buffers and state_dict); in training mode their forward and backward run
normkit_batch_norm_training / normkit_batch_norm_training_backward through a
torch.autograd.Function. The losses, the parameters after each SGD step and the running
statistics must agree with PyTorch's to float32's rounding. --bfloat16 casts both nets to
bfloat16 (activations, parameters and running statistics: normkit reads and writes the
half tensors, computing in float32); they then agree to bfloat16's rounding.
"""
import argparse
import copy

import torch
from torch import nn

import normkit.torch as nkt


def make_net(c=16):
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
        nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--bfloat16", action="store_true")
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.bfloat16 else torch.float32
    # Per step, the losses; after the steps, parameters and running statistics.
    tol = 3e-2 if args.bfloat16 else 1e-4
    torch.manual_seed(0)
    theirs = make_net()
    ours = nkt.convert(copy.deepcopy(theirs))
    assert type(ours[1]) is nkt.BatchNorm2d
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    theirs, ours = (m.to(dtype=dtype, memory_format=fmt) for m in (theirs, ours))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (theirs, ours)]
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, 32, 32).to(dtype).contiguous(memory_format=fmt)
        target = torch.randint(0, 10, (args.batch,))
        losses = []
        for model, opt in ((theirs, opts[0]), (ours, opts[1])):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        print(f"step {step}: loss pytorch {losses[0]:.6f}  normkit {losses[1]:.6f}")
        assert abs(losses[0] - losses[1]) <= tol * max(1.0, abs(losses[0])), losses
    for (n, a), b in zip(theirs.named_parameters(), ours.parameters()):
        torch.testing.assert_close(b.float(), a.float(), rtol=tol, atol=tol, msg=n)
    for (n, a), b in zip(theirs.named_buffers(), ours.buffers()):
        torch.testing.assert_close(b.float(), a.float(), rtol=tol, atol=tol, msg=n)
    assert "_BatchNormTraining" in type(ours[:2](x).grad_fn).__name__  # normkit ran
    print(f"same {args.steps} steps in {str(dtype)[6:]}: losses, parameters and running "
          f"statistics agree (batch norm speed: bench/peers/torch_peer.py --set train)")


if __name__ == "__main__":
    main()
