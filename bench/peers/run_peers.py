#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""normkit against its peers, side by side on the same machine and inputs.

    ./bench/peers/run_peers.sh            # makes .venv-peers, installs peers, runs this
    NORMKIT_PEERS_OPS=norms ./bench/peers/run_peers.sh   # one family (affine, norms, shift_sum)

For every op and shape of issues 2-4, with 1 and all threads: checks that each peer
agrees with normkit (max relative difference) and times normkit and each peer
interleaved over several rounds (median). A peer that cannot be installed or that lacks
an op is skipped with a line saying so. Writes bench/results/<machine>.md and a PNG chart
of normkit's speedup over the fastest peer per row.
"""
import ctypes
import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples"))
from affine_batch_norm import CHANNELS_FIRST, CHANNELS_LAST, Tensor, describe  # noqa: E402
from group_norm_shift_sum import ShiftSumParams  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001
    torch = None
    print(f"peer skipped: PyTorch ({e})")
try:
    import onnxruntime as ort
    from onnx import TensorProto, helper
except Exception as e:  # noqa: BLE001
    ort = None
    print(f"peer skipped: ONNX Runtime ({e})")
try:
    import tempfile

    import ncnn
except Exception as e:  # noqa: BLE001
    ncnn = None
    print(f"peer skipped: ncnn ({e})")


# ---------------------------------------------------------------- normkit via ctypes
def load_normkit():
    lib = ctypes.CDLL(os.environ.get("NORMKIT_LIB", os.path.join(ROOT, "build", "libnormkit.so")))
    vp, tp, f32p = ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.POINTER(ctypes.c_float)
    lib.normkit_context_create.argtypes = [ctypes.c_int32, ctypes.POINTER(vp)]
    lib.normkit_affine.argtypes = [vp, tp, f32p, f32p, ctypes.c_int32, tp]
    lib.normkit_batch_norm_inference.argtypes = [vp, tp, f32p, f32p, f32p, f32p, ctypes.c_float, tp]
    lib.normkit_group_norm.argtypes = [vp, tp, ctypes.c_int64, f32p, f32p, ctypes.c_float, ctypes.c_int32, tp,
                                       f32p, f32p]
    lib.normkit_layer_norm.argtypes = [vp, tp, f32p, f32p, ctypes.c_float, tp, f32p, f32p]
    lib.normkit_rms_norm.argtypes = [vp, tp, f32p, ctypes.c_float, tp, f32p]
    pp = ctypes.POINTER(ShiftSumParams)
    lib.normkit_shift_sum.argtypes = [vp, tp, pp, tp]
    lib.normkit_shift_sum_adjoint.argtypes = [vp, tp, pp, tp]
    lib.normkit_shift_sum_pinv.argtypes = [vp, tp, pp, ctypes.c_int32, vp, tp]
    lib.normkit_last_error.restype = ctypes.c_char_p
    lib.normkit_simd_target.restype = ctypes.c_char_p
    return lib


LIB = load_normkit()
CONTEXTS = {}


def ctx(threads):
    if threads not in CONTEXTS:
        c = ctypes.c_void_p()
        LIB.normkit_context_create(threads, ctypes.byref(c))
        CONTEXTS[threads] = c
    return CONTEXTS[threads]


def fp(a):
    """A float* to a's data. Made once per case, outside the timed lambdas: data_as costs
    about a microsecond, and a caller keeps its weights' pointers as the peers keep theirs."""
    return None if a is None else a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def ok(status):
    if status != 0:
        raise RuntimeError(LIB.normkit_last_error().decode())


def descriptors(x, y, layout):
    """Descriptors of x and y; x is NCHW memory or, channels-last, NHWC memory."""
    logical = x.shape if layout == CHANNELS_FIRST else (x.shape[0], x.shape[-1]) + x.shape[1:-1]
    return describe(x, logical, layout), describe(y, logical, layout)


# ---------------------------------------------------------------- timing
def time_interleaved(fns, rounds=7):
    """fns: name -> callable. Runs each once (warm-up), then `rounds` rounds of every fn,
    each timed over enough repetitions for ~20 ms; returns name -> median seconds."""
    for f in fns.values():
        f()
    reps = {}
    for name, f in fns.items():
        t0 = time.perf_counter()
        f()
        dt = max(time.perf_counter() - t0, 1e-6)
        reps[name] = max(1, min(200, int(0.02 / dt)))
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(reps[name]):
                f()
            samples[name].append((time.perf_counter() - t0) / reps[name])
    return {name: statistics.median(v) for name, v in samples.items()}


def memcpy_closure(nbytes):
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    return lambda: np.copyto(dst, src)


def rel_diff(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / (1.0 + np.abs(b))))


# ---------------------------------------------------------------- ONNX Runtime helpers
def ort_session(nodes, inputs, outputs, initializers, threads, opset):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # ORT's pool threads spin after each run; on a 2-core machine they then take the
    # cores of whoever is timed next (normkit's 2-thread 1x64x56x56 batch norm: 0.011 ms
    # alone, 0.1-0.44 ms right after an ORT call). Without spinning ORT timed the same
    # on these shapes (0.027-0.029 ms both ways).
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def init(name, array):
    return helper.make_tensor(name, TensorProto.FLOAT, array.shape, array.flatten().tolist())


def ort_peer(peers, name, nodes, shape, inits, threads, opset, x):
    try:
        sess = ort_session(nodes, [vi("x", shape)], [vi("y", shape)], inits, threads, opset)
        res = {}
        peers[name] = (lambda: res.__setitem__("y", sess.run(None, {"x": x})[0]), lambda: res["y"])
    except Exception as e:  # noqa: BLE001
        print(f"  {name} skipped: {str(e).splitlines()[0][:120]}")


# ---------------------------------------------------------------- ncnn helpers
def ncnn_peer(peers, name, layer, weights, samples, threads):
    """A one-layer ncnn net (`layer`: its .param line after the type and names) run on
    each array of `samples` (ncnn's Mat has no batch axis: one extract per sample, as an
    ncnn app runs a batch). Weights go to a .bin in the order the layer loads them."""
    try:
        d = tempfile.mkdtemp(prefix="ncnn-peer-")
        kind = layer.split()[0]
        with open(os.path.join(d, "m.param"), "w") as f:
            f.write(f"7767517\n2 2\nInput in 0 1 in\n{kind} op 1 1 in out {' '.join(layer.split()[1:])}\n")
        with open(os.path.join(d, "m.bin"), "wb") as f:
            for wgt in weights:
                f.write(np.ascontiguousarray(wgt, np.float32).tobytes())
        net = ncnn.Net()
        net.opt.num_threads = threads
        if net.load_param(os.path.join(d, "m.param")) or net.load_model(os.path.join(d, "m.bin")):
            raise RuntimeError(f"could not load a {kind} layer")
        mats = [ncnn.Mat(np.ascontiguousarray(a)).clone() for a in samples]
        res = {}

        def run():
            outs = []
            for m in mats:
                ex = net.create_extractor()
                ex.input("in", m)
                outs.append(ex.extract("out")[1])
            res["o"] = outs

        peers[name] = (run, lambda: np.stack([np.array(o) for o in res["o"]]), net)
    except Exception as e:  # noqa: BLE001
        print(f"  {name} skipped: {e}")


def torch_view(x, layout):
    """x as an NCHW torch tensor (channels_last memory for NHWC), and the way back."""
    if layout == CHANNELS_FIRST:
        return torch.from_numpy(x), lambda o: o.numpy()
    return torch.from_numpy(x).permute(0, 3, 1, 2), lambda o: o.permute(0, 2, 3, 1).contiguous().numpy()


# ---------------------------------------------------------------- cases
ROWS = []


def record(op, shape, layout, threads, nk_fn, nk_out, peers, bytes_moved):
    """peers: name -> (callable, output getter). Checks agreement, times, records a row."""
    checked = {}
    nk_fn()
    want = np.array(nk_out(), copy=True)
    for name, (fn, get, *_) in list(peers.items()):
        try:
            fn()
            checked[name] = rel_diff(get(), want)
        except Exception as e:  # noqa: BLE001
            print(f"  {name} skipped on {op} {shape}: {e}")
            peers.pop(name)
    fns = {"normkit": nk_fn, "memcpy": memcpy_closure(bytes_moved // 2)}
    fns.update({name: v[0] for name, v in peers.items()})
    t = time_interleaved(fns)
    row = {"op": op, "shape": shape, "layout": layout, "threads": threads, "normkit": t["normkit"],
           "ratio": t["memcpy"] / t["normkit"], "peers": {n: (t[n], checked[n]) for n in peers}}
    ROWS.append(row)
    peer_text = ", ".join(f"{n} {v[0] * 1e3:.3f} ms (x{v[0] / t['normkit']:.2f}, diff {v[1]:.1e})"
                          for n, v in row["peers"].items())
    print(f"{op:24s} {shape:18s} {layout:4s} t={threads}: normkit {t['normkit'] * 1e3:.3f} ms "
          f"(memcpy ratio {row['ratio']:.2f}); {peer_text}", flush=True)


def affine_cases(threads, rng):
    # Seed 000's two shapes, seed 001's 32x256x64x64, the N = 1 edge shapes of issue 2.
    for shape in [(64, 256, 64, 64), (16, 256, 64, 64), (32, 256, 64, 64), (1, 64, 56, 56), (1, 256, 14, 14),
                  (1, 32, 112, 112), (1, 3, 224, 224)]:
        n, c, h, w = shape
        for layout in (CHANNELS_FIRST, CHANNELS_LAST):
            x = rng.standard_normal(shape if layout == CHANNELS_FIRST else (n, h, w, c)).astype(np.float32)
            y = np.empty_like(x)
            sc, sh = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
            mean, var = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
            xt, yt = descriptors(x, y, layout)
            lay = "NCHW" if layout == CHANNELS_FIRST else "NHWC"
            # Seed 000 scales each sample's channels by its own parameters (N x C).
            psc, psh = rng.standard_normal((n, c)).astype(np.float32), rng.standard_normal((n, c)).astype(np.float32)
            c_, p_sc, p_sh, p_mean, p_var = ctx(threads), fp(sc), fp(sh), fp(mean), fp(var)
            p_psc, p_psh = fp(psc), fp(psh)
            ops = ("affine", "scale_only", "batch_norm") + (("affine_per_sample",) if n >= 16 else ())
            for op in ops:
                if op == "affine":
                    nk = lambda: ok(LIB.normkit_affine(c_, xt, p_sc, p_sh, 0, yt))  # noqa: E731
                elif op == "affine_per_sample":
                    nk = lambda: ok(LIB.normkit_affine(c_, xt, p_psc, p_psh, 1, yt))  # noqa: E731
                elif op == "scale_only":  # seed 004: x * w, no shift
                    nk = lambda: ok(LIB.normkit_affine(c_, xt, p_sc, None, 0, yt))  # noqa: E731
                else:
                    nk = lambda: ok(LIB.normkit_batch_norm_inference(  # noqa: E731
                        c_, xt, p_sc, p_sh, p_mean, p_var, 1e-5, yt))
                peers = {}
                if torch is not None:
                    tx, back = torch_view(x, layout)
                    tw, tb = torch.from_numpy(sc).view(1, c, 1, 1), torch.from_numpy(sh).view(1, c, 1, 1)
                    tm, tv, ts, tsh = (torch.from_numpy(a) for a in (mean, var, sc, sh))
                    out = {}
                    if op == "affine":
                        peers["torch x*w+b"] = (lambda: out.__setitem__("a", tx * tw + tb), lambda: back(out["a"]))
                        peers["torch addcmul"] = (lambda: out.__setitem__("b", torch.addcmul(tb, tx, tw)),
                                                  lambda: back(out["b"]))
                    elif op == "scale_only":
                        peers["torch x*w"] = (lambda: out.__setitem__("s", tx * tw), lambda: back(out["s"]))
                    elif op == "affine_per_sample":  # the seed's x * w.view(N, C, 1, 1) + b.view(N, C, 1, 1)
                        pw, pb = torch.from_numpy(psc).view(n, c, 1, 1), torch.from_numpy(psh).view(n, c, 1, 1)
                        peers["torch x*w+b"] = (lambda: out.__setitem__("p", tx * pw + pb), lambda: back(out["p"]))
                        peers["torch addcmul"] = (lambda: out.__setitem__("q", torch.addcmul(pb, tx, pw)),
                                                  lambda: back(out["q"]))
                    else:
                        peers["torch F.batch_norm"] = (
                            lambda: out.__setitem__("c", F.batch_norm(tx, tm, tv, ts, tsh, False, 0.0, 1e-5)),
                            lambda: back(out["c"]))
                        bn2d = torch.nn.BatchNorm2d(c, eps=1e-5).eval()
                        with torch.no_grad():
                            bn2d.weight.copy_(ts), bn2d.bias.copy_(tsh)
                            bn2d.running_mean.copy_(tm), bn2d.running_var.copy_(tv)

                        def run_bn2d(m=bn2d):
                            with torch.no_grad():
                                out["d"] = m(tx)
                        peers["torch BatchNorm2d.eval()"] = (run_bn2d, lambda: back(out["d"]))
                if ort is not None and layout == CHANNELS_FIRST:  # ORT CPU kernels are NCHW
                    if op == "affine":
                        nodes = [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
                        ort_peer(peers, "ORT Mul+Add", nodes, shape,
                                 [init("w", sc.reshape(1, c, 1, 1)), init("b", sh.reshape(1, c, 1, 1))], threads, 17, x)
                    elif op == "affine_per_sample":
                        nodes = [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
                        ort_peer(peers, "ORT Mul+Add", nodes, shape,
                                 [init("w", psc.reshape(n, c, 1, 1)), init("b", psh.reshape(n, c, 1, 1))], threads,
                                 17, x)
                    elif op == "scale_only":
                        nodes = [helper.make_node("Mul", ["x", "w"], ["y"])]
                        ort_peer(peers, "ORT Mul", nodes, shape, [init("w", sc.reshape(1, c, 1, 1))], threads, 17, x)
                    else:
                        nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-5)]
                        ort_peer(peers, "ORT BatchNormalization", nodes, shape,
                                 [init("s", sc), init("b", sh), init("m", mean), init("v", var)], threads, 17, x)
                record(op, "x".join(map(str, shape)), lay, threads, nk, lambda: y, peers, 2 * x.nbytes)


def norm_cases(threads, rng):
    for shape, g in [((128, 256, 28, 28), 32), ((32, 512, 56, 56), 32), ((1, 64, 56, 56), 32),
                     ((1, 256, 14, 14), 32), ((1, 32, 112, 112), 8), ((8, 64, 128, 128), 64)]:
        n, c, h, w = shape
        op = "instance_norm" if g == c else f"group_norm G={g}"
        for layout in (CHANNELS_FIRST, CHANNELS_LAST):
            x = rng.standard_normal(shape if layout == CHANNELS_FIRST else (n, h, w, c)).astype(np.float32)
            y = np.empty_like(x)
            gm, bt = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
            xt, yt = descriptors(x, y, layout)
            lay = "NCHW" if layout == CHANNELS_FIRST else "NHWC"
            c_, p_gm, p_bt = ctx(threads), fp(gm), fp(bt)
            nk = lambda: ok(LIB.normkit_group_norm(c_, xt, g, p_gm, p_bt, 1e-5, 0, yt, None, None))  # noqa: E731
            peers = {}
            if torch is not None:
                tx, back = torch_view(x, layout)
                tg, tb = torch.from_numpy(gm), torch.from_numpy(bt)
                out = {}
                peers["torch F.group_norm"] = (lambda: out.__setitem__("g", F.group_norm(tx, g, tg, tb, 1e-5)),
                                               lambda: back(out["g"]))
                if g == c:
                    peers["torch F.instance_norm"] = (
                        lambda: out.__setitem__("i", F.instance_norm(tx, weight=tg, bias=tb, eps=1e-5)),
                        lambda: back(out["i"]))
            if ncnn is not None and layout == CHANNELS_FIRST:  # ncnn's Mat is c, h, w
                if g == c:
                    ncnn_peer(peers, "ncnn InstanceNorm", f"InstanceNorm 0={c} 1=0.00001 2=1", [gm, bt], x,
                              threads)
                else:
                    ncnn_peer(peers, "ncnn GroupNorm", f"GroupNorm 0={g} 1={c} 2=0.00001 3=1", [gm, bt], x,
                              threads)
            if ort is not None and layout == CHANNELS_FIRST:
                if g == c:
                    nodes = [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)]
                    ort_peer(peers, "ORT InstanceNormalization", nodes, shape, [init("s", gm), init("b", bt)],
                             threads, 17, x)
                else:  # GroupNormalization-21: per-channel scale / bias
                    nodes = [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5,
                                              num_groups=g)]
                    ort_peer(peers, "ORT GroupNormalization", nodes, shape, [init("s", gm), init("b", bt)],
                             threads, 21, x)
            record(op, "x".join(map(str, shape)), lay, threads, nk, lambda: y, peers, 2 * x.nbytes)
    rows, d = 4096, 768
    x = rng.standard_normal((rows, d)).astype(np.float32)
    y = np.empty_like(x)
    gm, bt = rng.uniform(0.5, 1.5, d).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    xt, yt = describe(x, x.shape, CHANNELS_FIRST), describe(y, y.shape, CHANNELS_FIRST)
    c_, p_gm, p_bt = ctx(threads), fp(gm), fp(bt)
    for op in ("layer_norm", "rms_norm"):
        if op == "layer_norm":
            nk = lambda: ok(LIB.normkit_layer_norm(c_, xt, p_gm, p_bt, 1e-5, yt, None, None))  # noqa: E731
        else:
            nk = lambda: ok(LIB.normkit_rms_norm(c_, xt, p_gm, 1e-5, yt, None))  # noqa: E731
        peers = {}
        if torch is not None:
            tx, tg, tb = torch.from_numpy(x), torch.from_numpy(gm), torch.from_numpy(bt)
            out = {}
            if op == "layer_norm":
                peers["torch F.layer_norm"] = (lambda: out.__setitem__("l", F.layer_norm(tx, (d,), tg, tb, 1e-5)),
                                               lambda: out["l"].numpy())
            elif hasattr(F, "rms_norm"):
                peers["torch F.rms_norm"] = (lambda: out.__setitem__("r", F.rms_norm(tx, (d,), tg, 1e-5)),
                                             lambda: out["r"].numpy())
        if ort is not None:
            if op == "layer_norm":
                nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)]
                ort_peer(peers, "ORT LayerNormalization", nodes, x.shape, [init("s", gm), init("b", bt)],
                         threads, 17, x)
            else:
                nodes = [helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-5)]
                ort_peer(peers, "ORT RMSNormalization", nodes, x.shape, [init("s", gm)], threads, 23, x)
        if ncnn is not None:  # rows of w = D floats, normalized over each row
            if op == "layer_norm":
                ncnn_peer(peers, "ncnn LayerNorm", f"LayerNorm 0={d} 1=0.00001 2=1", [gm, bt], [x], threads)
            else:
                ncnn_peer(peers, "ncnn RMSNorm", f"RMSNorm 0={d} 1=0.00001 2=1", [gm], [x], threads)
        record(op, f"{rows}x{d}", "rows", threads, nk, lambda: y, peers, 2 * x.nbytes)


def shift_sum_cases(threads, rng):
    # Seed 003's shape, the C = 31 / S = 1 variant and a real-data size (issue 4).
    for b, c, h, w, s in [(16, 28, 256, 256, 2), (16, 31, 256, 256, 1), (1, 28, 660, 660, 2), (2, 512, 256, 256, 2)]:
        shift_sum_case(threads, rng, b, c, h, w, s)


def shift_sum_case(threads, rng, b, c, h, w, s):
    wp = w + (c - 1) * s
    x = rng.random((b, c, h, w), dtype=np.float32)
    mask = rng.random((h, w), dtype=np.float32)
    mask[mask == 0] = 1e-12
    y = np.empty((b, 1, h, wp), np.float32)
    xp = np.empty_like(x)
    xa = np.empty_like(x)
    p = ShiftSumParams()
    p.struct_size, p.axis, p.step, p.scale = ctypes.sizeof(ShiftSumParams), 0, s, 1.0
    p.mask_kind, p.mask = 1, mask.ctypes.data
    xt, yt = describe(x, x.shape, CHANNELS_FIRST), describe(y, y.shape, CHANNELS_FIRST)
    xpt, xat = describe(xp, xp.shape, CHANNELS_FIRST), describe(xa, xa.shape, CHANNELS_FIRST)
    c_, pp = ctx(threads), ctypes.byref(p)
    nk = lambda: ok(LIB.normkit_shift_sum(c_, xt, pp, yt))  # noqa: E731
    nk_adj = lambda: ok(LIB.normkit_shift_sum_adjoint(c_, yt, pp, xat))  # noqa: E731
    nk_pinv = lambda: ok(LIB.normkit_shift_sum_pinv(c_, yt, pp, 1, None, xpt))  # noqa: E731
    peers, adj_peers, pinv_peers = {}, {}, {}
    if torch is not None:
        tx, tm = torch.from_numpy(x), torch.from_numpy(mask).view(1, 1, h, w)
        ty = torch.from_numpy(y)
        alpha = torch.zeros(1, 1, 1, wp)
        for i in range(c):
            alpha[..., i * s:i * s + w] += 1
        kernel = torch.zeros(1, c, 1, (c - 1) * s + 1)
        for i in range(c):
            kernel[:, c - i - 1, :, i * s] = 1
        idx = torch.arange(w) + torch.arange(c).view(c, 1, 1) * s + torch.arange(h).view(1, h, 1) * wp
        idx = idx.view(1, c * h * w).expand(b, c * h * w)
        out = {}

        def loop():  # seed 003, method 1
            z = tx * tm
            yy = torch.zeros(b, 1, h, wp)
            for i in range(c):
                yy[..., i * s:i * s + w] += z[:, i:i + 1]
            out["loop"] = yy

        def conv():  # method 2
            out["conv"] = F.conv2d(tx * tm, kernel, padding=(0, (c - 1) * s))

        def scatter():  # method 3
            yy = torch.zeros(b, h * wp)
            yy.scatter_add_(1, idx, (tx * tm).reshape(b, c * h * w))
            out["scatter"] = yy.view(b, 1, h, wp)

        def adjoint():  # A^T as the seed's codes write it: the windows, times the mask
            out["adj"] = torch.cat([ty[..., i * s:i * s + w] for i in range(c)], dim=1) * tm

        def pinv():  # the seed's A_pinv
            z = ty / alpha
            out["pinv"] = torch.cat([z[..., i * s:i * s + w] for i in range(c)], dim=1) / tm

        peers["torch loop (seed 1)"] = (loop, lambda: out["loop"].numpy())
        if c <= 64:  # a [1, C, 1, (C-1)S+1] kernel: seconds per call at C = 512
            peers["torch conv2d (seed 2)"] = (conv, lambda: out["conv"].numpy())
        else:
            print(f"  torch conv2d (seed 2) skipped at C = {c}: too slow to time")
        peers["torch scatter_add (seed 3)"] = (scatter, lambda: out["scatter"].numpy())
        adj_peers["torch slice+cat (A^T)"] = (adjoint, lambda: out["adj"].numpy())
        pinv_peers["torch A_pinv (seed)"] = (pinv, lambda: out["pinv"].numpy())
    shp = f"{b}x{c}x{h}x{w} S={s}"
    record("shift_sum A", shp, "NCHW", threads, nk, lambda: y, peers, x.nbytes + y.nbytes)
    # y now holds A x: the adjoint and pinv below read it.
    record("shift_sum A^T", shp, "NCHW", threads, nk_adj, lambda: xa, adj_peers, x.nbytes + y.nbytes)
    record("shift_sum pinv", shp, "NCHW", threads, nk_pinv, lambda: xp, pinv_peers, x.nbytes + y.nbytes)


# ---------------------------------------------------------------- report
def write_report(machine):
    peers_seen = []
    for r in ROWS:
        for n in r["peers"]:
            if n not in peers_seen:
                peers_seen.append(n)
    date = datetime.date.today().isoformat()
    lines = [f"# normkit vs peers on {machine}", "",
             f"{date}; normkit SIMD target {LIB.normkit_simd_target().decode()}; "
             f"torch {torch.__version__ if torch else 'n/a'}; onnxruntime {ort.__version__ if ort else 'n/a'}. "
             "Median of 7 interleaved rounds, times in ms. `speedup` = fastest peer time / normkit time "
             "(> 1: normkit faster); `ratio` = normkit against a single-threaded numpy copy of the same "
             "bytes. Each peer's output was checked against normkit first: max relative difference in "
             f"parentheses. Reproduce: `{REPRODUCE}`.",
             "", "| op | shape | layout | threads | normkit ms | ratio | " + " | ".join(peers_seen) +
             " | speedup |", "|" + "---|" * (7 + len(peers_seen))]
    for r in ROWS:
        cells = []
        for n in peers_seen:
            cells.append(f"{r['peers'][n][0] * 1e3:.3f} ({r['peers'][n][1]:.0e})" if n in r["peers"] else "")
        best = min((v[0] for v in r["peers"].values()), default=None)
        speed = f"{best / r['normkit']:.2f}" if best else ""
        lines.append(f"| {r['op']} | {r['shape']} | {r['layout']} | {r['threads']} | {r['normkit'] * 1e3:.3f} | "
                     f"{r['ratio']:.2f} | " + " | ".join(cells) + f" | {speed} |")
    path = os.path.join(ROOT, "bench", "results", f"{machine}.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        labels, speeds = [], []
        for r in ROWS:
            if r["peers"]:
                labels.append(f"{r['op']} {r['shape']} {r['layout']} t{r['threads']}")
                speeds.append(min(v[0] for v in r["peers"].values()) / r["normkit"])
        fig, ax = plt.subplots(figsize=(9, 0.28 * len(labels) + 1))
        ax.barh(range(len(labels)), speeds, color=["tab:green" if v >= 1 else "tab:red" for v in speeds])
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("speedup of normkit over the fastest peer (log scale)")
        fig.tight_layout()
        png = os.path.join(ROOT, "bench", "results", f"{machine}.png")
        fig.savefig(png, dpi=110)
        print(f"wrote {png}")
    except Exception as e:  # noqa: BLE001
        print(f"chart skipped: {e}")


# NORMKIT_PEERS_OPS: a comma-separated subset of affine, norms, shift_sum (default: all).
OPS = [o for o in os.environ.get("NORMKIT_PEERS_OPS", "affine,norms,shift_sum").split(",") if o]
REPRODUCE = ("./bench/peers/run_peers.sh" if "NORMKIT_PEERS_OPS" not in os.environ
             else f"NORMKIT_PEERS_OPS={','.join(OPS)} ./bench/peers/run_peers.sh")


def main():
    machine = os.environ.get("NORMKIT_MACHINE", platform.node() or "machine")
    cases = {"affine": affine_cases, "norms": norm_cases, "shift_sum": shift_sum_cases}
    unknown = [o for o in OPS if o not in cases]
    if unknown:
        sys.exit(f"NORMKIT_PEERS_OPS: unknown {unknown}; choose from {sorted(cases)}")
    all_threads = os.cpu_count() or 1
    rng = np.random.default_rng(0)
    for threads in sorted({1, all_threads}):
        if torch is not None:
            torch.set_num_threads(threads)
        for op in cases:
            if op in OPS:
                cases[op](threads, rng)
    write_report(machine)


if __name__ == "__main__":
    main()
