#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""normkit's row norms against PyTorch, ONNX Runtime and ncnn on the same CPU tensors.

    pip install . torch onnxruntime onnx ncnn
    python bench/peers/rows_peer.py [--rounds 3] [--quick] [--shapes 4096x768,1x4096]

Layer norm and RMS norm over the last dimension of float32 [rows, D] tensors at the
transformer shapes ([4096, 768], [2048, 4096]) and decode-sized calls ([1, 4096],
[8, 4096], [32, 4096], [1, 768]), and the residual add + norm (h = x + r written, y =
norm(h)) at the two large shapes; 1 and 2 threads. Every call goes through Python, as a
Python user makes it: on the decode shapes the binding's own cost is part of every time.

Each peer is called the way its best users call it, and normkit the same way:
- PyTorch: F.layer_norm / F.rms_norm (no out=), with glibc's allocator told to keep freed
  memory (set before Python starts: the script re-executes itself), so each call reuses
  the previous call's output; normkit writes into a preallocated out. Residual add + norm:
  torch.add(x, r, out=h) then the norm of h.
- ONNX Runtime: a one-node model (LayerNormalization, opset 17; RMSNormalization, opset 23,
  or the contrib SimplifiedLayerNormalization where that is missing; SkipLayerNormalization /
  SkipSimplifiedLayerNormalization for the add + norm) run with io_binding into a
  preallocated output; normkit out of place.
- ncnn: the LayerNorm / RMSNorm layer of a one-layer net, its forward_inplace called
  directly on a Mat of `rows` rows (what an ncnn app's Extractor calls inside, without
  the input clone and output allocation); normkit in place.
And the way most users write it, in the rows marked "plain": ONNX Runtime's sess.run()
(it returns a fresh array). ncnn's Extractor (a Net run) is not timed: in the ncnn wheel
measured (1.0.20261020) Extractor.extract crashed the process, even on a one-ReLU net.

ONNX Runtime's intra-op threads do not spin between calls (`session.intra_op.allow_spinning`
0): spinning, they took the cores of the next contender. Outputs are checked against float64
first. Each round times every call of a row
interleaved (median of `reps` calls); a row is a win or a loss only when the per-round
ranges of normkit's and the peer's times do not overlap, else a tie.
"""
import argparse
import os
import tempfile

from peer_util import reexec_keeping_freed_memory, timed

reexec_keeping_freed_memory()

import numpy as np  # noqa: E402

import normkit  # noqa: E402

try:
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
except ImportError as e:
    torch = None
    print(f"peer skipped: PyTorch ({e})")
try:
    import onnxruntime as ort  # noqa: E402
    from onnx import TensorProto, helper, numpy_helper  # noqa: E402
except ImportError as e:
    ort = None
    print(f"peer skipped: ONNX Runtime ({e})")
try:
    import ncnn  # noqa: E402
except ImportError as e:
    ncnn = None
    print(f"peer skipped: ncnn ({e})")

EPS = 1e-5
SHAPES = [(4096, 768), (2048, 4096), (1, 4096), (8, 4096), (32, 4096), (1, 768)]
FUSED_SHAPES = [(4096, 768), (2048, 4096)]


def reference(x, w, b, rms, r=None):
    """float64 layer / RMS norm of x (+ r) over its last dimension."""
    h = x.astype(np.float64) if r is None else (x + r).astype(np.float64)
    if rms:
        y = h / np.sqrt((h * h).mean(-1, keepdims=True) + EPS) * w
    else:
        c = h - h.mean(-1, keepdims=True)
        y = c / np.sqrt((c * c).mean(-1, keepdims=True) + EPS) * w + b
    return y


# ------------------------------------------------------------------ ONNX Runtime
def ort_session(op, rms, D, w, b, threads):
    """A one-node model normalizing X (plus the skip input S for the add + norm)."""
    inits = [numpy_helper.from_array(w, "W")]
    fused = op.startswith("add_")
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["R", D])]
    if fused:
        inputs.append(helper.make_tensor_value_info("S", TensorProto.FLOAT, ["R", D]))
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["R", D])]
    candidates = []  # (node, opset imports)
    if fused:
        kind = "SkipSimplifiedLayerNormalization" if rms else "SkipLayerNormalization"
        args = ["X", "S", "W"] + ([] if rms else ["B"])
        # Outputs: Y, mean, inv std dev, then input_skip_bias_sum (h).
        outputs.append(helper.make_tensor_value_info("H", TensorProto.FLOAT, ["R", D]))
        node = helper.make_node(kind, args, ["Y", "", "", "H"], domain="com.microsoft",
                                epsilon=EPS)
        candidates.append((node, [helper.make_opsetid("", 17),
                                  helper.make_opsetid("com.microsoft", 1)]))
    elif rms:
        candidates.append((helper.make_node("RMSNormalization", ["X", "W"], ["Y"], axis=-1,
                                            epsilon=EPS), [helper.make_opsetid("", 23)]))
        candidates.append((helper.make_node("SimplifiedLayerNormalization", ["X", "W"], ["Y"],
                                            axis=-1, epsilon=EPS),
                           [helper.make_opsetid("", 17)]))
    else:
        candidates.append((helper.make_node("LayerNormalization", ["X", "W", "B"], ["Y"],
                                            axis=-1, epsilon=EPS),
                           [helper.make_opsetid("", 17)]))
    if not rms:
        inits.append(numpy_helper.from_array(b, "B"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Its threads otherwise spin after each call and take the cores of whoever runs next
    # (normkit's [2048, 4096] add + RMS norm at two threads ran 7-8 ms right after ORT's
    # calls, 3.3-4.4 ms alone); ORT's own times do not change.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    errors = []
    for node, opsets in candidates:
        graph = helper.make_graph([node], "rows", inputs, outputs, inits)
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 9
        try:
            return ort.InferenceSession(model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"]), node.op_type
        except Exception as e:  # noqa: BLE001
            errors.append(f"{node.op_type}: {str(e).splitlines()[0]}")
    raise RuntimeError("; ".join(errors))


# ------------------------------------------------------------------ ncnn
def ncnn_layer(rms, D, w, b, threads):
    """The LayerNorm / RMSNorm layer of a one-layer net (weights loaded, pipeline made
    with the net's options), and the net, which owns it."""
    d = tempfile.mkdtemp(prefix="ncnn-rows-")
    kind = "RMSNorm" if rms else "LayerNorm"
    with open(os.path.join(d, "m.param"), "w") as f:
        f.write(f"7767517\n2 2\nInput in 0 1 in\n{kind} op 1 1 in out 0={D} 1={EPS} 2=1\n")
    with open(os.path.join(d, "m.bin"), "wb") as f:
        f.write(w.tobytes())
        if not rms:
            f.write(b.tobytes())
    net = ncnn.Net()
    net.opt.num_threads = threads
    if net.load_param(os.path.join(d, "m.param")) or net.load_model(os.path.join(d, "m.bin")):
        raise RuntimeError(f"could not load a {kind} layer")
    return net.layers()[1], net


# ------------------------------------------------------------------ the rows
def make_calls(op, shape, threads, rng):
    """(normkit out of place, normkit in place, {peer: (call, output, in_place)}, reference)."""
    rows, D = shape
    rms = "rms" in op
    fused = op.startswith("add_")
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    r = rng.standard_normal(shape).astype(np.float32) if fused else None
    w = (rng.random(D) + 0.5).astype(np.float32)
    b = rng.standard_normal(D).astype(np.float32)
    ref = reference(x, w, b, rms, r)
    ctx = normkit.Context(threads)
    y, h = np.empty_like(x), np.empty_like(x)
    xi = x.copy()  # normkit in place: normalizes its own output again each call
    if fused:
        fn = normkit.add_rms_norm if rms else normkit.add_layer_norm
        kw = {} if rms else {"bias": b}
        ours = lambda: fn(x, r, w, eps=EPS, out=y, residual_out=h, context=ctx, **kw)  # noqa: E731
        ours_in_place = None
    elif rms:
        ours = lambda: normkit.rms_norm(x, w, EPS, out=y, context=ctx)  # noqa: E731
        ours_in_place = lambda: normkit.rms_norm(xi, w, EPS, out=xi, context=ctx)  # noqa: E731
    else:
        ours = lambda: normkit.layer_norm(x, w, b, EPS, out=y, context=ctx)  # noqa: E731
        ours_in_place = lambda: normkit.layer_norm(xi, w, b, EPS, out=xi, context=ctx)  # noqa: E731
    peers = {}
    if torch is not None:
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        tr = torch.from_numpy(r) if fused else None
        th = torch.empty_like(tx)
        res = {}
        if fused:
            def run_torch():
                torch.add(tx, tr, out=th)
                res["y"] = (F.rms_norm(th, (D,), tw, EPS) if rms else
                            F.layer_norm(th, (D,), tw, tb, EPS))
        elif rms:
            def run_torch():
                res["y"] = F.rms_norm(tx, (D,), tw, EPS)
        else:
            def run_torch():
                res["y"] = F.layer_norm(tx, (D,), tw, tb, EPS)
        peers["PyTorch"] = (run_torch, lambda: res["y"].numpy(), False)
    if ort is not None:
        try:
            sess, kind = ort_session(op, rms, D, w, b, threads)
            binding = sess.io_binding()
            binding.bind_cpu_input("X", x)
            if fused:
                binding.bind_cpu_input("S", r)
            # The bound outputs by address: the arrays live as long as the call (the
            # lambda's defaults below hold them).
            yo, ho = np.empty_like(x), np.empty_like(x)
            binding.bind_output("Y", "cpu", 0, np.float32, list(shape), yo.ctypes.data)
            if fused:
                binding.bind_output("H", "cpu", 0, np.float32, list(shape), ho.ctypes.data)
            feeds = {"X": x, **({"S": r} if fused else {})}
            res_ort = {}

            def run_plain(sess=sess, feeds=feeds):
                res_ort["y"] = sess.run(["Y"], feeds)[0]

            peers[f"ORT {kind} io_binding"] = (
                lambda sess=sess, binding=binding, held=(x, r, yo, ho):
                sess.run_with_iobinding(binding),
                lambda yo=yo: yo, False)
            peers[f"ORT {kind} run() (plain)"] = (run_plain, lambda: res_ort["y"], False)
        except Exception as e:  # noqa: BLE001
            print(f"  ORT skipped for {op}: {e}")
    if ncnn is not None and not fused:
        try:
            layer, net = ncnn_layer(rms, D, w, b, threads)
            # The Mat wraps the array (w = D, h = rows: each row normalized); the array
            # must outlive it (a Mat of a temporary array, or its clone(), read freed
            # memory in this binding).
            xn = x.copy()
            m = ncnn.Mat(xn)
            peers["ncnn layer forward_inplace"] = (
                lambda layer=layer, m=m, opt=net.opt, xn=xn: layer.forward_inplace(m, opt),
                lambda xn=xn: xn, True)
        except Exception as e:  # noqa: BLE001
            print(f"  ncnn skipped for {op}: {e}")
    return ours, ours_in_place, y, xi, peers, ref


def reps_for(numel):
    return int(min(2000, max(7, 3e7 // max(numel, 1) // 10)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="[4096, 768] and [1, 4096] only")
    ap.add_argument("--shapes", default="", help="e.g. 4096x768,1x4096")
    ap.add_argument("--ops", default="", help="e.g. layer_norm,add_rms_norm (default: all)")
    args = ap.parse_args()
    shapes = SHAPES
    if args.quick:
        shapes = [(4096, 768), (1, 4096)]
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rng = np.random.default_rng(1)
    versions = [f"normkit {normkit.version()} ({normkit.simd_target()})"]
    if torch is not None:
        versions.append(f"torch {torch.__version__}")
    if ort is not None:
        versions.append(f"onnxruntime {ort.__version__}")
    if ncnn is not None:
        versions.append(f"ncnn {getattr(ncnn, '__version__', '?')}")
    print(", ".join(versions) + f"; {args.rounds} rounds, median of the calls of each; "
          "ratio = peer / normkit time (above 1: normkit faster)")
    print("| op | shape | threads | peer | normkit us | peer us | ratio range | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    counts = {"win": 0, "tie": 0, "loss": 0}
    ops = [(op, s) for op in ("layer_norm", "rms_norm") for s in shapes]
    ops += [(op, s) for op in ("add_layer_norm", "add_rms_norm") for s in shapes
            if s in FUSED_SHAPES]
    if args.ops:
        ops = [(op, s) for op, s in ops if op in args.ops.split(",")]
    for op, shape in ops:
        for threads in (1, 2):
            if torch is not None:
                torch.set_num_threads(threads)
            ours, ours_in_place, y, xi, peers, ref = make_calls(op, shape, threads, rng)
            ours()
            err = np.abs(y - ref).max() / (np.abs(ref).max() + 1)
            if not err < 1e-5:
                print(f"| {op} | {shape} | {threads} | normkit | output off float64 by {err:.2g} |")
                continue
            checked = {}
            for name, (call, output, in_place) in peers.items():
                call()
                got = output()
                # An in-place peer has normalized its input once: compare that call only.
                perr = np.abs(got.reshape(ref.shape) - ref).max() / (np.abs(ref).max() + 1)
                if perr < 1e-4:
                    checked[name] = (call, in_place)
                else:
                    print(f"| {op} | {'x'.join(map(str, shape))} | {threads} | {name} | "
                          f"output off float64 by {perr:.2g}: not timed |")
            reps = reps_for(shape[0] * shape[1])
            times = {name: [] for name in checked}
            t_out, t_in = [], []
            for _ in range(args.rounds):
                t_out.append(timed(ours, reps))
                if ours_in_place is not None:
                    t_in.append(timed(ours_in_place, reps))
                for name, (call, _) in checked.items():
                    times[name].append(timed(call, reps))
            for name, (call, in_place) in checked.items():
                mine = t_in if in_place else t_out
                peer = times[name]
                ratios = [p / o for p, o in zip(peer, mine)]
                verdict = ("win" if max(mine) < min(peer) else
                           "loss" if max(peer) < min(mine) else "tie")
                counts[verdict] += 1
                where = " (both in place)" if in_place else ""
                print(f"| {op} | {'x'.join(map(str, shape))} | {threads} | {name}{where} | "
                      f"{min(mine) * 1e6:.1f}-{max(mine) * 1e6:.1f} | "
                      f"{min(peer) * 1e6:.1f}-{max(peer) * 1e6:.1f} | "
                      f"{min(ratios):.2f}-{max(ratios):.2f} | {verdict} |", flush=True)
    print(f"\n{counts['win']} wins, {counts['tie']} ties, {counts['loss']} losses")


if __name__ == "__main__":
    main()
