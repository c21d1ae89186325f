#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""normkit's channel ops against PyTorch, ONNX Runtime and ncnn on the same CPU tensors.

    pip install . torch onnxruntime onnx ncnn
    python bench/peers/channel_peer.py [--rounds 3] [--families affine,norms,shift_sum] [--quick]

float32, NCHW and NHWC, 1 and 2 threads:
- affine family (seed 000's 64x256x64x64 and 16x256x64x64, seed 001's 32x256x64x64, the
  N = 1 edge shapes): y = x * w + b per channel, x * w alone, per sample and channel (seed
  000's x * w.view(N, C, 1, 1) + b), and batch norm in eval mode;
- group norm (seed 002's 128x256x28x28 and 32x512x56x56, G = 32; the N = 1 edge shapes) and
  instance norm (8x64x128x128);
- the shift-sum operators of coded-aperture imaging (seed 003): A, A^T and A's
  pseudo-inverse (y / alpha, divided by the mask); with --families more or stack, also
  shift / unshift (the zero-padded stack and back) against PyTorch's per-channel copies.

Each peer is called the way its best users call it ("best") and the way most users write it
("plain"); normkit writes into a preallocated output, or in place against a peer in place:
- PyTorch, best: out= where the op has it (torch.addcmul / torch.mul into a preallocated
  output, or with out= its input: in place), else F.* with glibc's allocator told to keep
  freed memory (the script re-executes itself), so each call reuses the last one's output;
  shift-sum: the seed's loop into preallocated buffers. Plain: nn modules under no_grad
  (nn.BatchNorm2d.eval(), nn.GroupNorm, nn.InstanceNorm2d), `x * w + b`, and the seed's
  three shift-sum codes (Python loop, conv2d, scatter_add) and its A^T / A_pinv.
- ONNX Runtime (NCHW: its CPU kernels have no NHWC form): a one-node model through
  io_binding into a preallocated output (best) and through run() (plain). Its threads do
  not spin between calls (they took the next contender's cores).
- ncnn (NCHW: its Mat is c, h, w): the layer's forward_inplace on each sample's Mat (best,
  against normkit in place), and a one-layer Net's Extractor per sample (plain; the net's
  opt.lightmode off: with it on, extract() crashed this wheel, 1.0.20261020).
Outputs are checked against float64 first.
"""
import argparse
import itertools
import os
import tempfile

from peer_util import Case, Peer, max_scaled_error, reexec_keeping_freed_memory, run_cases

if __name__ == "__main__":
    reexec_keeping_freed_memory()

import numpy as np  # noqa: E402

import normkit  # noqa: E402

from peer_modules import F, TensorProto, helper, ncnn, numpy_helper, ort, torch  # noqa: E402,F401

EPS = 1e-5
AFFINE_SHAPES = [(64, 256, 64, 64), (16, 256, 64, 64), (32, 256, 64, 64), (1, 64, 56, 56),
                 (1, 256, 14, 14), (1, 32, 112, 112), (1, 3, 224, 224)]
NORM_SHAPES = [((128, 256, 28, 28), 32), ((32, 512, 56, 56), 32), ((1, 64, 56, 56), 32),
               ((1, 256, 14, 14), 32), ((1, 32, 112, 112), 8), ((8, 64, 128, 128), 64)]
SILU_SHAPES = [((128, 256, 28, 28), 32), ((32, 512, 56, 56), 32), ((1, 64, 56, 56), 32),
               ((1, 32, 112, 112), 8)]
CHANNEL_LN_SHAPES = [((128, 256, 28, 28), 1), ((1, 64, 56, 56), 1)]
GAP_SHAPES = [(16, 28, 256, 256, 2), (16, 31, 256, 256, 1)]
SHIFT_SHAPES = [(16, 28, 256, 256, 2), (16, 31, 256, 256, 1), (1, 28, 660, 660, 2),
                (2, 512, 256, 256, 2)]
STACK_SHAPES = [(16, 28, 256, 256, 2), (16, 31, 256, 256, 1)]


# ------------------------------------------------------------------ tensors
class Tensors:
    """x in one layout: `x` the logical NCHW view (of NHWC memory for channels-last),
    `fresh()` a new array of the same layout and values, `torch(a)` a's tensor (channels_last
    for NHWC)."""

    def __init__(self, x_nchw, layout):
        self.layout = layout
        self.nhwc = layout == "NHWC"
        self.x = self.fresh(x_nchw)

    def fresh(self, values=None):
        src = self.x if values is None else values
        if self.nhwc:  # a copy always (ascontiguousarray of NHWC memory would be a view)
            return np.array(src.transpose(0, 2, 3, 1), order="C", copy=True).transpose(0, 3, 1, 2)
        return np.array(src, copy=True)

    def empty(self):
        return self.fresh(np.empty(self.x.shape, np.float32))

    @staticmethod
    def torch(a):
        return torch.from_numpy(a)  # a strided view: channels_last when a's memory is NHWC


# ------------------------------------------------------------------ ONNX Runtime
def ort_peers(nodes, x, inits, threads, opset, label, out_shape=None):
    """A one-node model on x, through io_binding into a preallocated output and run()."""
    out_shape = list(out_shape or x.shape)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.ascontiguousarray(v, np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    xc = np.ascontiguousarray(x)
    yo = np.empty(out_shape, np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", xc)
    binding.bind_output("y", "cpu", 0, np.float32, out_shape, yo.ctypes.data)
    res = {}
    return [
        Peer(f"ORT {label} io_binding",
             lambda s=sess, b=binding, held=(xc, yo): s.run_with_iobinding(b), lambda: yo),
        Peer(f"ORT {label} run()", lambda s=sess: res.__setitem__("y", s.run(["y"], {"x": xc})[0]),
             lambda: res["y"], style="plain"),
    ]


# ------------------------------------------------------------------ ncnn
def ncnn_net(layer, weights, threads):
    """A one-layer net: `layer` is its .param line after the names (type first), weights
    written in the order the layer loads them. lightmode off (see the module doc)."""
    d = tempfile.mkdtemp(prefix="ncnn-peer-")
    kind, params = layer.split()[0], " ".join(layer.split()[1:])
    with open(os.path.join(d, "m.param"), "w") as f:
        f.write(f"7767517\n2 2\nInput in 0 1 in\n{kind} op 1 1 in out {params}\n")
    with open(os.path.join(d, "m.bin"), "wb") as f:
        for w in weights:
            f.write(np.ascontiguousarray(w, np.float32).tobytes())
    net = ncnn.Net()
    net.opt.num_threads = threads
    net.opt.lightmode = False
    if net.load_param(os.path.join(d, "m.param")) or net.load_model(os.path.join(d, "m.bin")):
        raise RuntimeError(f"could not load a {kind} layer")
    return net


def ncnn_peers(layer, weights, x, threads, label):
    """The layer's forward_inplace on each sample's Mat (a Mat wraps a live array: its own
    copy of x), and the Net's Extractor on each sample."""
    net = ncnn_net(layer, weights, threads)
    op = net.layers()[1]
    xi = np.ascontiguousarray(x).copy()
    mats_in_place = [ncnn.Mat(xi[i]) for i in range(xi.shape[0])]
    xc = np.ascontiguousarray(x)
    mats = [ncnn.Mat(xc[i]) for i in range(xc.shape[0])]
    res = {}

    def forward_inplace(op=op, opt=net.opt, ms=mats_in_place, held=xi):
        for m in ms:
            op.forward_inplace(m, opt)

    def extract(net=net, ms=mats, held=xc):
        outs = []
        for m in ms:
            ex = net.create_extractor()
            ex.input("in", m)
            outs.append(ex.extract("out")[1])
        res["o"] = outs

    return [Peer(f"ncnn {label} layer forward_inplace", forward_inplace, lambda: xi,
                 in_place=True),
            Peer(f"ncnn {label} Net extract", extract,
                 lambda: np.stack([np.array(o) for o in res["o"]]), style="plain")]


def guarded(peers, make, what):
    """Appends make()'s peers, or prints why there are none."""
    try:
        peers.extend(make())
    except Exception as e:  # noqa: BLE001
        print(f"  {what} skipped: {str(e).splitlines()[0][:160]}")


# ------------------------------------------------------------------ affine family
def affine_cases(shapes, rng, threads_list):
    for shape in shapes:
        n, c, h, w = shape
        x64 = rng.standard_normal(shape).astype(np.float32)
        # Parameters near 1 and 0: the in-place contenders apply them to their own output
        # thousands of times, which must stay normal floats (no overflow, no subnormals).
        sc = rng.uniform(0.999, 1.001, c).astype(np.float32)
        sh = rng.uniform(-1e-3, 1e-3, c).astype(np.float32)
        psc = rng.uniform(0.999, 1.001, (n, c)).astype(np.float32)
        psh = rng.uniform(-1e-3, 1e-3, (n, c)).astype(np.float32)
        mean = rng.uniform(-1e-3, 1e-3, c).astype(np.float32)
        var = rng.uniform(0.998, 1.002, c).astype(np.float32)
        ops = ["affine", "scale_only", "batch_norm"] + (["affine_per_sample"] if n >= 16 else [])
        for op in ops:
            xd = x64.astype(np.float64)
            if op == "affine":
                ref = xd * sc.reshape(1, c, 1, 1) + sh.reshape(1, c, 1, 1)
            elif op == "scale_only":
                ref = xd * sc.reshape(1, c, 1, 1)
            elif op == "affine_per_sample":
                ref = xd * psc.reshape(n, c, 1, 1) + psh.reshape(n, c, 1, 1)
            else:
                rstd = 1 / np.sqrt(var.astype(np.float64) + EPS)
                ref = ((xd - mean.reshape(1, c, 1, 1)) * (rstd * sc).reshape(1, c, 1, 1) +
                       sh.reshape(1, c, 1, 1))
            del xd
            error = max_scaled_error(ref)
            for layout in ("NCHW", "NHWC"):
                t = Tensors(x64, layout)
                for threads in threads_list:
                    yield affine_case(op, shape, t, threads, sc, sh, psc, psh, mean, var, error)


def affine_case(op, shape, t, threads, sc, sh, psc, psh, mean, var, error):
    n, c = shape[:2]
    x, y, xi = t.x, t.empty(), t.fresh()
    ctx = normkit.Context(threads)
    if op == "batch_norm":
        def nk(a, o):
            return lambda: normkit.batch_norm(a, mean, var, sc, sh, EPS, out=o, context=ctx)
    elif op == "affine_per_sample":
        def nk(a, o):
            return lambda: normkit.affine(a, psc, psh, per_sample=True, out=o, context=ctx)
    else:
        shift = None if op == "scale_only" else sh

        def nk(a, o):
            return lambda: normkit.affine(a, sc, shift, out=o, context=ctx)
    peers = []
    if torch is not None:
        tx, ty, txi = t.torch(x), t.torch(t.empty()), t.torch(t.fresh())
        if op == "affine_per_sample":
            tw, tb = torch.from_numpy(psc).view(n, c, 1, 1), torch.from_numpy(psh).view(n, c, 1, 1)
        else:
            tw, tb = torch.from_numpy(sc).view(1, c, 1, 1), torch.from_numpy(sh).view(1, c, 1, 1)
        res = {}
        if op == "batch_norm":
            tm, tv, tg, tbeta = (torch.from_numpy(a) for a in (mean, var, sc, sh))
            bn = torch.nn.BatchNorm2d(c, eps=EPS).eval()
            with torch.no_grad():
                bn.weight.copy_(tg), bn.bias.copy_(tbeta)
                bn.running_mean.copy_(tm), bn.running_var.copy_(tv)

            def module(bn=bn):
                with torch.no_grad():
                    res["m"] = bn(tx)

            peers += [Peer("PyTorch F.batch_norm", lambda: res.__setitem__(
                               "f", F.batch_norm(tx, tm, tv, tg, tbeta, False, 0.0, EPS)),
                           lambda: res["f"].numpy()),
                      Peer("PyTorch nn.BatchNorm2d.eval()", module, lambda: res["m"].numpy(),
                           style="plain")]
        elif op == "scale_only":
            peers += [Peer("PyTorch torch.mul(out=)", lambda: torch.mul(tx, tw, out=ty),
                           lambda: ty.numpy()),
                      Peer("PyTorch x.mul_(w)", lambda: txi.mul_(tw), lambda: txi.numpy(),
                           in_place=True),
                      Peer("PyTorch x * w", lambda: res.__setitem__("p", tx * tw),
                           lambda: res["p"].numpy(), style="plain")]
        else:
            peers += [Peer("PyTorch torch.addcmul(out=)", lambda: torch.addcmul(tb, tx, tw, out=ty),
                           lambda: ty.numpy()),
                      Peer("PyTorch torch.addcmul(out=x)", lambda: torch.addcmul(tb, txi, tw, out=txi),
                           lambda: txi.numpy(), in_place=True),
                      Peer("PyTorch x * w + b", lambda: res.__setitem__("p", tx * tw + tb),
                           lambda: res["p"].numpy(), style="plain")]
    if ort is not None and t.layout == "NCHW":
        if op == "batch_norm":
            nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                      epsilon=EPS)]
            inits, label = {"s": sc, "b": sh, "m": mean, "v": var}, "BatchNormalization"
        elif op == "scale_only":
            nodes, inits, label = ([helper.make_node("Mul", ["x", "w"], ["y"])],
                                   {"w": sc.reshape(1, c, 1, 1)}, "Mul")
        else:
            pshape = (n, c, 1, 1) if op == "affine_per_sample" else (1, c, 1, 1)
            w_, b_ = (psc, psh) if op == "affine_per_sample" else (sc, sh)
            nodes = [helper.make_node("Mul", ["x", "w"], ["t"]),
                     helper.make_node("Add", ["t", "b"], ["y"])]
            inits, label = {"w": w_.reshape(pshape), "b": b_.reshape(pshape)}, "Mul+Add"
        guarded(peers, lambda: ort_peers(nodes, x, inits, threads, 17, label), "ORT")
    if ncnn is not None and t.layout == "NCHW" and op != "affine_per_sample":
        if op == "batch_norm":  # ncnn's BatchNorm loads slope, mean, var, bias
            layer, weights, label = f"BatchNorm 0={c} 1={EPS}", [sc, mean, var, sh], "BatchNorm"
        elif op == "scale_only":
            layer, weights, label = f"Scale 0={c} 1=0", [sc], "Scale"
        else:
            layer, weights, label = f"Scale 0={c} 1=1", [sc, sh], "Scale"
        guarded(peers, lambda: ncnn_peers(layer, weights, x, threads, label), "ncnn")
    return Case("channel", op, shape, t.layout, "float32", threads, nk(x, y), lambda: y, peers,
                error, ours_in_place=nk(xi, xi))


# ------------------------------------------------------------------ group / instance norm
def norm_cases(shapes, rng, threads_list, act=None):
    for shape, g in shapes:
        n, c, h, w = shape
        x64 = (rng.standard_normal(shape, dtype=np.float32) * 2 + 0.5).astype(np.float32)
        gm = rng.uniform(0.5, 1.5, c).astype(np.float32)
        bt = rng.standard_normal(c).astype(np.float32)
        xd = x64.astype(np.float64).reshape(n, g, -1)
        cen = xd - xd.mean(-1, keepdims=True)
        ref = (cen / np.sqrt((cen * cen).mean(-1, keepdims=True) + EPS)).reshape(shape)
        del xd, cen
        ref = ref * gm.reshape(1, c, 1, 1) + bt.reshape(1, c, 1, 1)
        if act == "silu":
            ref = ref / (1 + np.exp(-ref))
        error = max_scaled_error(ref)
        op = ("instance_norm" if g == c else "channel_layer_norm" if g == 1 else
              f"group_norm G={g}") + (" + SiLU" if act else "")
        for layout in ("NCHW", "NHWC"):
            t = Tensors(x64, layout)
            for threads in threads_list:
                yield norm_case(op, shape, g, t, threads, gm, bt, error, act)


def norm_case(op, shape, g, t, threads, gm, bt, error, act=None):
    n, c = shape[:2]
    x, y, xi = t.x, t.empty(), t.fresh()
    ctx = normkit.Context(threads)

    def nk(a, o):
        return lambda: normkit.group_norm(a, g, gm, bt, EPS, activation=act, out=o, context=ctx)

    peers = []
    if torch is not None:
        tx, tg, tb = t.torch(x), torch.from_numpy(gm), torch.from_numpy(bt)
        res = {}
        if g == c:
            mod = torch.nn.InstanceNorm2d(c, eps=EPS, affine=True)
        else:
            mod = torch.nn.GroupNorm(g, c, eps=EPS)
        with torch.no_grad():
            mod.weight.copy_(tg), mod.bias.copy_(tb)

        if act:  # the activation in place on the norm's output, as a fused module does
            mod = torch.nn.Sequential(mod, torch.nn.SiLU(inplace=True))

        def module(mod=mod):
            with torch.no_grad():
                res["m"] = mod(tx)

        def silu(o):
            return F.silu(o, inplace=True) if act else o

        peers.append(Peer("PyTorch F.group_norm" + (" + F.silu(inplace)" if act else ""),
                          lambda: res.__setitem__("g", silu(F.group_norm(tx, g, tg, tb, EPS))),
                          lambda: res["g"].numpy()))
        if g == c and not act:
            peers.append(Peer("PyTorch F.instance_norm", lambda: res.__setitem__(
                "i", F.instance_norm(tx, weight=tg, bias=tb, eps=EPS)), lambda: res["i"].numpy()))
        names = [type(m).__name__ for m in (mod if act else [mod])]
        peers.append(Peer("PyTorch nn." + " + nn.".join(names), module, lambda: res["m"].numpy(),
                          style="plain"))
    if ort is not None and t.layout == "NCHW":
        if g == c:
            nodes = [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=EPS)]
            guarded(peers, lambda: ort_peers(nodes, x, {"s": gm, "b": bt}, threads, 17,
                                             "InstanceNormalization"), "ORT")
        else:  # GroupNormalization-21: per-channel scale / bias
            out = "n" if act else "y"
            nodes = [helper.make_node("GroupNormalization", ["x", "s", "b"], [out], epsilon=EPS,
                                      num_groups=g)]
            if act:
                nodes += [helper.make_node("Sigmoid", ["n"], ["e"]),
                          helper.make_node("Mul", ["n", "e"], ["y"])]
            guarded(peers, lambda: ort_peers(nodes, x, {"s": gm, "b": bt}, threads, 21,
                                             "GroupNormalization" + ("+Sigmoid+Mul" if act else "")),
                    "ORT")
    if ncnn is not None and t.layout == "NCHW" and not act:
        if g == c:
            layer, label = f"InstanceNorm 0={c} 1={EPS} 2=1", "InstanceNorm"
        else:
            layer, label = f"GroupNorm 0={g} 1={c} 2={EPS} 3=1", "GroupNorm"
        guarded(peers, lambda: ncnn_peers(layer, [gm, bt], x, threads, label), "ncnn")
    return Case("channel", op, shape, t.layout, "float32", threads, nk(x, y), lambda: y, peers,
                error, ours_in_place=nk(xi, xi))


# ------------------------------------------------------------------ shift-sum
def shift_cases(shapes, rng, threads_list):
    for b, c, h, w, s in shapes:
        x = rng.random((b, c, h, w), dtype=np.float32)
        mask = rng.uniform(0.1, 1.0, (h, w)).astype(np.float32)
        wp = w + (c - 1) * s
        md = mask.astype(np.float64)
        y_ref = np.zeros((b, 1, h, wp))
        for i in range(c):
            y_ref[:, 0, :, i * s:i * s + w] += x[:, i] * md
        y = y_ref.astype(np.float32)  # the A^T / pinv input
        yd = y.astype(np.float64)
        adj_ref = np.stack([yd[:, 0, :, i * s:i * s + w] for i in range(c)], 1) * md
        alpha = np.zeros(wp)
        for i in range(c):
            alpha[i * s:i * s + w] += 1
        z = yd / alpha
        pinv_ref = np.stack([z[:, 0, :, i * s:i * s + w] for i in range(c)], 1) / md
        del yd, z
        refs = {"A": max_scaled_error(y_ref), "A^T": max_scaled_error(adj_ref),
                "pinv": max_scaled_error(pinv_ref)}
        for which in ("A", "A^T", "pinv"):
            for threads in threads_list:
                yield shift_case(which, (b, c, h, w, s), x, y, mask, threads, refs[which])


def shift_case(which, geometry, x, y, mask, threads, error):
    b, c, h, w, s = geometry
    wp = w + (c - 1) * s
    ctx = normkit.Context(threads)
    if which == "A":
        out = np.empty((b, 1, h, wp), np.float32)
        ours = lambda: normkit.shift_sum(x, s, mask=mask, out=out, context=ctx)  # noqa: E731
    else:
        out = np.empty((b, c, h, w), np.float32)
        if which == "A^T":
            ours = lambda: normkit.shift_sum_adjoint(y, s, mask=mask, out=out,  # noqa: E731
                                                     context=ctx)
        else:
            ours = lambda: normkit.shift_sum_pinv(y, s, mode="divide_by_mask",  # noqa: E731
                                                  mask=mask, out=out, context=ctx)
    peers = []
    if torch is not None:
        tx, ty, tm = torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(mask)
        res = {}
        if which == "A":
            z, yy = torch.empty(b, c, h, w), torch.empty(b, 1, h, wp)

            def best():  # the seed's loop, its buffers preallocated
                torch.mul(tx, tm, out=z)
                yy.zero_()
                for i in range(c):
                    yy[..., i * s:i * s + w] += z[:, i:i + 1]

            def loop():  # seed 003, method 1
                zz = tx * tm
                o = torch.zeros(b, 1, h, wp)
                for i in range(c):
                    o[..., i * s:i * s + w] += zz[:, i:i + 1]
                res["loop"] = o

            kernel = torch.zeros(1, c, 1, (c - 1) * s + 1)
            for i in range(c):
                kernel[:, c - i - 1, :, i * s] = 1

            def conv():  # method 2
                res["conv"] = F.conv2d(tx * tm, kernel, padding=(0, (c - 1) * s))

            idx = (torch.arange(w) + torch.arange(c).view(c, 1, 1) * s +
                   torch.arange(h).view(1, h, 1) * wp).view(1, c * h * w).expand(b, c * h * w)

            def scatter():  # method 3
                o = torch.zeros(b, h * wp)
                o.scatter_add_(1, idx, (tx * tm).reshape(b, c * h * w))
                res["scatter"] = o.view(b, 1, h, wp)

            peers += [Peer("PyTorch seed loop, preallocated", best, lambda: yy.numpy()),
                      Peer("PyTorch seed loop", loop, lambda: res["loop"].numpy(), style="plain")]
            if c <= 64:  # a [1, C, 1, (C-1)S+1] kernel: seconds a call at C = 512
                peers.append(Peer("PyTorch seed conv2d", conv, lambda: res["conv"].numpy(),
                                  style="plain"))
            peers.append(Peer("PyTorch seed scatter_add", scatter,
                              lambda: res["scatter"].numpy(), style="plain"))
        else:
            to = torch.empty(b, c, h, w)
            alpha = torch.zeros(1, 1, 1, wp)
            for i in range(c):
                alpha[..., i * s:i * s + w] += 1
            zb = torch.empty(b, 1, h, wp)
            if which == "A^T":
                def best():
                    for i in range(c):
                        torch.mul(ty[:, 0, :, i * s:i * s + w], tm, out=to[:, i])

                def plain():  # the windows, times the mask
                    res["p"] = torch.cat([ty[..., i * s:i * s + w] for i in range(c)], 1) * tm
            else:
                def best():
                    torch.div(ty, alpha, out=zb)
                    for i in range(c):
                        torch.div(zb[:, 0, :, i * s:i * s + w], tm, out=to[:, i])

                def plain():  # the seed's A_pinv
                    zz = ty / alpha
                    res["p"] = torch.cat([zz[..., i * s:i * s + w] for i in range(c)], 1) / tm
            peers += [Peer("PyTorch per-channel out=, preallocated", best, lambda: to.numpy()),
                      Peer("PyTorch seed slices + cat", plain, lambda: res["p"].numpy(),
                           style="plain")]
    name = {"A": "shift_sum A", "A^T": "shift_sum A^T", "pinv": "shift_sum pinv"}[which]
    return Case("channel", name, f"{b}x{c}x{h}x{w} S={s}", "NCHW", "float32", threads, ours,
                lambda: out, peers, error)


# ------------------------------------------------------------------ shift / unshift
def stack_cases(shapes, rng, threads_list):
    """The zero-padded stack of shifted channels and back (the shift / shift_back of
    CASSI reconstruction codes), float32 NCHW."""
    for b, c, h, w, s in shapes:
        x = rng.random((b, c, h, w), dtype=np.float32)
        wp = w + (c - 1) * s
        xs = np.zeros((b, c, h, wp), np.float32)
        for i in range(c):
            xs[:, i, :, i * s:i * s + w] = x[:, i]
        refs = {"shift": max_scaled_error(xs.astype(np.float64)),
                "unshift": max_scaled_error(x.astype(np.float64))}
        for which in ("shift", "unshift"):
            for threads in threads_list:
                yield stack_case(which, (b, c, h, w, s), x, xs, threads, refs[which])


def stack_case(which, geometry, x, xs, threads, error):
    b, c, h, w, s = geometry
    wp = w + (c - 1) * s
    ctx = normkit.Context(threads)
    if which == "shift":
        out = np.empty((b, c, h, wp), np.float32)
        ours = lambda: normkit.shift(x, s, out=out, context=ctx)  # noqa: E731
    else:
        out = np.empty((b, c, h, w), np.float32)
        ours = lambda: normkit.unshift(xs, s, out=out, context=ctx)  # noqa: E731
    peers = []
    if torch is not None:
        tx, txs = torch.from_numpy(x), torch.from_numpy(xs)
        res = {}
        if which == "shift":
            to = torch.zeros(b, c, h, wp)  # zeroed once: the copies never touch the zeros

            def best():  # the loop into a preallocated stack
                for i in range(c):
                    to[:, i, :, i * s:i * s + w].copy_(tx[:, i])

            def plain():  # as reconstruction codes write it: a new zeroed stack a call
                o = torch.zeros(b, c, h, wp)
                for i in range(c):
                    o[:, i, :, i * s:i * s + w] = tx[:, i]
                res["p"] = o
        else:
            to = torch.empty(b, c, h, w)

            def best():
                for i in range(c):
                    to[:, i].copy_(txs[:, i, :, i * s:i * s + w])

            def plain():  # the windows stacked
                res["p"] = torch.stack([txs[:, i, :, i * s:i * s + w] for i in range(c)], 1)
        peers += [Peer("PyTorch per-channel copy_, preallocated", best, lambda: to.numpy()),
                  Peer("PyTorch loop", plain, lambda: res["p"].numpy(), style="plain")]
    return Case("channel", which, f"{b}x{c}x{h}x{w} S={s}", "NCHW", "float32", threads, ours,
                lambda: out, peers, error)


# ------------------------------------------------------------------ GAP step
def gap_cases(shapes, rng, threads_list, lam=1.0, gamma=0.01):
    """One GAP / ADMM data-consistency step, in place on x (every contender updates its own
    copy of x each call): x += lam * A^T((y - A x) / (Phi_s + gamma)), Phi_s = A(1)'s
    squared-mask sum, precomputed once (normkit: shift_sum_normalizer), as a reconstruction
    loop holds it."""
    for b, c, h, w, s in shapes:
        x = rng.random((b, c, h, w), dtype=np.float32)
        mask = rng.uniform(0.1, 1.0, (h, w)).astype(np.float32)
        y = rng.random((b, 1, h, w + (c - 1) * s), dtype=np.float32) * c * 0.5
        wp = w + (c - 1) * s
        md, xd = mask.astype(np.float64), x.astype(np.float64)
        phi = np.zeros(wp)[None, :] + np.zeros((h, 1))
        for i in range(c):
            phi[:, i * s:i * s + w] += md * md
        ax = np.zeros((b, 1, h, wp))
        for i in range(c):
            ax[:, 0, :, i * s:i * s + w] += xd[:, i] * md
        r = (y.astype(np.float64) - ax) / (phi + gamma)
        ref = xd + lam * np.stack([r[:, 0, :, i * s:i * s + w] for i in range(c)], 1) * md
        del ax, r, xd
        error = max_scaled_error(ref)
        for threads in threads_list:
            yield gap_case((b, c, h, w, s), x, y, mask, threads, lam, gamma, error)


def gap_case(geometry, x0, y, mask, threads, lam, gamma, error):
    b, c, h, w, s = geometry
    wp = w + (c - 1) * s
    ctx = normkit.Context(threads)
    x = x0.copy()
    phi = normkit.shift_sum_normalizer(x, s, mask=mask, context=ctx)

    def ours():
        normkit.shift_sum_gap_step(x, y, s, lam, gamma, mask=mask, normalizer=phi, context=ctx)

    peers = []
    if torch is not None:
        tm, ty = torch.from_numpy(mask), torch.from_numpy(y)
        tphi = torch.from_numpy(phi.reshape(1, 1, h, wp)) + gamma
        xb, xp = torch.from_numpy(x0.copy()), torch.from_numpy(x0.copy())
        z, ax, rb = torch.empty(b, c, h, w), torch.empty(b, 1, h, wp), torch.empty(b, 1, h, wp)

        def best():  # the seed's loops, their buffers preallocated, x updated in place
            torch.mul(xb, tm, out=z)
            ax.zero_()
            for i in range(c):
                ax[..., i * s:i * s + w] += z[:, i:i + 1]
            torch.sub(ty, ax, out=rb)
            rb.div_(tphi)
            for i in range(c):
                xb[:, i].addcmul_(rb[:, 0, :, i * s:i * s + w], tm, value=lam)

        def plain():  # the seed's form: x = x + lam * At((y - A(x)) / Phi_s)
            zz = xp * tm
            a = torch.zeros(b, 1, h, wp)
            for i in range(c):
                a[..., i * s:i * s + w] += zz[:, i:i + 1]
            rr = (ty - a) / tphi
            xp.copy_(xp + lam * torch.cat([rr[..., i * s:i * s + w] for i in range(c)], 1) * tm)

        peers += [Peer("PyTorch seed loops, preallocated", best, lambda: xb.numpy(),
                       in_place=True),
                  Peer("PyTorch seed form", plain, lambda: xp.numpy(), in_place=True,
                       style="plain")]
    return Case("channel", "shift_sum GAP step", f"{b}x{c}x{h}x{w} S={s}", "NCHW", "float32",
                threads, ours, lambda: x, peers, error, ours_in_place=ours)


FAMILIES = {"affine": lambda rng, q, th: affine_cases(AFFINE_SHAPES[3:4] if q else AFFINE_SHAPES, rng,
                                                      th),
            "norms": lambda rng, q, th: norm_cases(NORM_SHAPES[2:3] if q else NORM_SHAPES, rng, th),
            "shift_sum": lambda rng, q, th: shift_cases([(2, 28, 64, 64, 2)] if q else SHIFT_SHAPES,
                                                        rng, th),
            # Not in the "channel" section: group norm + SiLU, channel layer norm (G = 1),
            # the GAP step and shift / unshift ("more"; "stack" alone).
            "more": lambda rng, q, th: itertools.chain(
                norm_cases(SILU_SHAPES[2:3] if q else SILU_SHAPES, rng, th, act="silu"),
                norm_cases([((1, 64, 28, 28), 1)] if q else CHANNEL_LN_SHAPES, rng, th),
                gap_cases([(2, 28, 64, 64, 2)] if q else GAP_SHAPES, rng, th),
                stack_cases([(2, 28, 64, 64, 2)] if q else STACK_SHAPES, rng, th)),
            "stack": lambda rng, q, th: stack_cases([(2, 28, 64, 64, 2)] if q else STACK_SHAPES,
                                                    rng, th)}


def cases(families=None, quick=False, threads_list=(1, 2)):
    rng = np.random.default_rng(0)
    for fam in families or [f for f in FAMILIES if f != "more"]:
        for case in FAMILIES[fam](rng, quick, threads_list):
            if torch is not None:
                torch.set_num_threads(case.threads)
            yield case


def main():
    from peer_util import TABLE_HEAD, counts

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one small shape a family")
    ap.add_argument("--families", default="", help=f"a subset of {','.join(FAMILIES)}")
    args = ap.parse_args()
    fams = [f for f in args.families.split(",") if f] or [f for f in FAMILIES if f != "more"]
    unknown = [f for f in fams if f not in FAMILIES]
    if unknown:
        ap.error(f"--families: unknown {unknown}")
    print(TABLE_HEAD)
    c = counts(run_cases(cases(fams, args.quick), args.rounds))
    print(f"\n{c['win']} wins, {c['tie']} ties, {c['loss']} losses")


if __name__ == "__main__":
    main()
