#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""normkit against its peers, side by side on the same machine and inputs.

    ./bench/peers/run_peers.sh            # makes .venv-peers, installs peers, runs this

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
    for name, (fn, get) in list(peers.items()):
        try:
            fn()
            checked[name] = rel_diff(get(), want)
        except Exception as e:  # noqa: BLE001
            print(f"  {name} skipped on {op} {shape}: {e}")
            peers.pop(name)
    fns = {"normkit": nk_fn, "memcpy": memcpy_closure(bytes_moved // 2)}
    fns.update({name: fn for name, (fn, _) in peers.items()})
    t = time_interleaved(fns)
    row = {"op": op, "shape": shape, "layout": layout, "threads": threads, "normkit": t["normkit"],
           "ratio": t["memcpy"] / t["normkit"], "peers": {n: (t[n], checked[n]) for n in peers}}
    ROWS.append(row)
    peer_text = ", ".join(f"{n} {v[0] * 1e3:.3f} ms (x{v[0] / t['normkit']:.2f}, diff {v[1]:.1e})"
                          for n, v in row["peers"].items())
    print(f"{op:24s} {shape:18s} {layout:4s} t={threads}: normkit {t['normkit'] * 1e3:.3f} ms "
          f"(memcpy ratio {row['ratio']:.2f}); {peer_text}", flush=True)


def affine_cases(threads, rng):
    for shape in [(16, 256, 64, 64), (1, 64, 56, 56), (1, 256, 14, 14)]:
        n, c, h, w = shape
        for layout in (CHANNELS_FIRST, CHANNELS_LAST):
            x = rng.standard_normal(shape if layout == CHANNELS_FIRST else (n, h, w, c)).astype(np.float32)
            y = np.empty_like(x)
            sc, sh = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
            mean, var = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
            xt, yt = descriptors(x, y, layout)
            lay = "NCHW" if layout == CHANNELS_FIRST else "NHWC"
            c_, p_sc, p_sh, p_mean, p_var = ctx(threads), fp(sc), fp(sh), fp(mean), fp(var)
            for op in ("affine", "batch_norm"):
                if op == "affine":
                    nk = lambda: ok(LIB.normkit_affine(c_, xt, p_sc, p_sh, 0, yt))  # noqa: E731
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
                    else:
                        peers["torch F.batch_norm"] = (
                            lambda: out.__setitem__("c", F.batch_norm(tx, tm, tv, ts, tsh, False, 0.0, 1e-5)),
                            lambda: back(out["c"]))
                if ort is not None and layout == CHANNELS_FIRST:  # ORT CPU kernels are NCHW
                    if op == "affine":
                        nodes = [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
                        ort_peer(peers, "ORT Mul+Add", nodes, shape,
                                 [init("w", sc.reshape(1, c, 1, 1)), init("b", sh.reshape(1, c, 1, 1))], threads, 17, x)
                    else:
                        nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-5)]
                        ort_peer(peers, "ORT BatchNormalization", nodes, shape,
                                 [init("s", sc), init("b", sh), init("m", mean), init("v", var)], threads, 17, x)
                record(op, "x".join(map(str, shape)), lay, threads, nk, lambda: y, peers, 2 * x.nbytes)


def norm_cases(threads, rng):
    for shape, g in [((128, 256, 28, 28), 32), ((1, 64, 56, 56), 32), ((8, 64, 128, 128), 64)]:
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
        record(op, f"{rows}x{d}", "rows", threads, nk, lambda: y, peers, 2 * x.nbytes)


def shift_sum_cases(threads, rng):
    b, c, h, w, s = 16, 28, 256, 256, 2
    wp = w + (c - 1) * s
    x = rng.random((b, c, h, w), dtype=np.float32)
    mask = rng.random((h, w), dtype=np.float32)
    mask[mask == 0] = 1e-12
    y = np.empty((b, 1, h, wp), np.float32)
    xp = np.empty_like(x)
    p = ShiftSumParams()
    p.struct_size, p.axis, p.step, p.scale = ctypes.sizeof(ShiftSumParams), 0, s, 1.0
    p.mask_kind, p.mask = 1, mask.ctypes.data
    xt, yt = describe(x, x.shape, CHANNELS_FIRST), describe(y, y.shape, CHANNELS_FIRST)
    xpt = describe(xp, xp.shape, CHANNELS_FIRST)
    nk = lambda: ok(LIB.normkit_shift_sum(ctx(threads), xt, ctypes.byref(p), yt))  # noqa: E731
    nk_pinv = lambda: ok(LIB.normkit_shift_sum_pinv(ctx(threads), yt, ctypes.byref(p), 1, None, xpt))  # noqa
    peers, pinv_peers = {}, {}
    if torch is not None:
        tx, tm = torch.from_numpy(x), torch.from_numpy(mask).view(1, 1, h, w)
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

        def pinv():  # the seed's A_pinv
            z = torch.from_numpy(y) / alpha
            out["pinv"] = torch.cat([z[..., i * s:i * s + w] for i in range(c)], dim=1) / tm

        peers["torch loop (seed 1)"] = (loop, lambda: out["loop"].numpy())
        peers["torch conv2d (seed 2)"] = (conv, lambda: out["conv"].numpy())
        peers["torch scatter_add (seed 3)"] = (scatter, lambda: out["scatter"].numpy())
        pinv_peers["torch A_pinv (seed)"] = (pinv, lambda: out["pinv"].numpy())
    shp = f"{b}x{c}x{h}x{w} S={s}"
    record("shift_sum A", shp, "NCHW", threads, nk, lambda: y, peers, x.nbytes + y.nbytes)
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
             "parentheses. Reproduce: `./bench/peers/run_peers.sh`.",
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


def main():
    machine = os.environ.get("NORMKIT_MACHINE", platform.node() or "machine")
    all_threads = os.cpu_count() or 1
    rng = np.random.default_rng(0)
    for threads in sorted({1, all_threads}):
        if torch is not None:
            torch.set_num_threads(threads)
        affine_cases(threads, rng)
        norm_cases(threads, rng)
        shift_sum_cases(threads, rng)
    write_report(machine)


if __name__ == "__main__":
    main()
