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

Each peer is called the way its best users call it ("best"), and normkit the same way:
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
And the way most users write it ("plain"): PyTorch's nn.LayerNorm / nn.RMSNorm module under
no_grad (x + r first for the add + norm), ONNX Runtime's sess.run() (it returns a fresh
array), ncnn's Extractor on the one-layer net (opt.lightmode off: on, extract() crashed
the wheel measured, 1.0.20261020).

ONNX Runtime's intra-op threads do not spin between calls (`session.intra_op.allow_spinning`
0): spinning, they took the cores of the next contender. Outputs are checked against float64
first; the timing and verdicts are peer_util.compare's (a win or a loss only when the
per-round ranges do not overlap).
"""
import argparse
import os
import tempfile

from peer_util import (TABLE_HEAD, Case, Peer, counts, max_scaled_error,
                       reexec_keeping_freed_memory, run_cases)

if __name__ == "__main__":
    reexec_keeping_freed_memory()

import numpy as np  # noqa: E402

import normkit  # noqa: E402

from peer_modules import F, TensorProto, helper, ncnn, numpy_helper, ort, torch  # noqa: E402,F401

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
    net.opt.lightmode = False  # on, Extractor.extract crashed this wheel (1.0.20261020)
    if net.load_param(os.path.join(d, "m.param")) or net.load_model(os.path.join(d, "m.bin")):
        raise RuntimeError(f"could not load a {kind} layer")
    return net.layers()[1], net


# ------------------------------------------------------------------ the rows
def make_case(op, shape, threads, rng):
    """One Case: normkit out of place (and in place against ncnn's layer in place) and the
    peers, best and plain."""
    rows, D = shape
    rms = "rms" in op
    fused = op.startswith("add_")
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    r = rng.standard_normal(shape).astype(np.float32) if fused else None
    w = (rng.random(D) + 0.5).astype(np.float32)
    b = rng.standard_normal(D).astype(np.float32)
    error = max_scaled_error(reference(x, w, b, rms, r))
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
    peers = []
    if torch is not None:
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        tr = torch.from_numpy(r) if fused else None
        th = torch.empty_like(tx)
        mod = torch.nn.RMSNorm(D, eps=EPS) if rms else torch.nn.LayerNorm(D, eps=EPS)
        with torch.no_grad():
            mod.weight.copy_(tw)
            if not rms:
                mod.bias.copy_(tb)
        res = {}
        if fused:
            def best():
                torch.add(tx, tr, out=th)
                res["y"] = (F.rms_norm(th, (D,), tw, EPS) if rms else
                            F.layer_norm(th, (D,), tw, tb, EPS))

            def plain(mod=mod):
                with torch.no_grad():
                    res["p"] = mod(tx + tr)
            names = ("torch.add(out=) + F." + ("rms_norm" if rms else "layer_norm"),
                     "x + r, nn." + type(mod).__name__)
        else:
            def best():
                res["y"] = F.rms_norm(tx, (D,), tw, EPS) if rms else F.layer_norm(tx, (D,), tw, tb, EPS)

            def plain(mod=mod):
                with torch.no_grad():
                    res["p"] = mod(tx)
            names = ("F." + ("rms_norm" if rms else "layer_norm"), "nn." + type(mod).__name__)
        peers += [Peer(f"PyTorch {names[0]}", best, lambda: res["y"].numpy()),
                  Peer(f"PyTorch {names[1]}", plain, lambda: res["p"].numpy(), style="plain")]
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

            peers += [Peer(f"ORT {kind} io_binding",
                           lambda sess=sess, binding=binding, held=(x, r, yo, ho):
                           sess.run_with_iobinding(binding), lambda yo=yo: yo),
                      Peer(f"ORT {kind} run()", run_plain, lambda: res_ort["y"], style="plain")]
        except Exception as e:  # noqa: BLE001
            print(f"  ORT skipped for {op}: {e}")
    if ncnn is not None and not fused:
        try:
            layer, net = ncnn_layer(rms, D, w, b, threads)
            # The Mat wraps the array (w = D, h = rows: each row normalized); the array
            # must outlive it (a Mat of a temporary array, or its clone(), read freed
            # memory in this binding).
            xn, xc = x.copy(), x.copy()
            m, mc = ncnn.Mat(xn), ncnn.Mat(xc)
            res_n = {}

            def extract(net=net, mc=mc, held=xc):
                ex = net.create_extractor()
                ex.input("in", mc)
                res_n["y"] = ex.extract("out")[1]

            kind = "RMSNorm" if rms else "LayerNorm"
            peers += [Peer(f"ncnn {kind} layer forward_inplace",
                           lambda layer=layer, m=m, opt=net.opt, xn=xn: layer.forward_inplace(m, opt),
                           lambda xn=xn: xn, in_place=True),
                      Peer(f"ncnn {kind} Net extract", extract, lambda: np.array(res_n["y"]),
                           style="plain")]
        except Exception as e:  # noqa: BLE001
            print(f"  ncnn skipped for {op}: {e}")
    return Case("rows", op, shape, "rows", "float32", threads, ours, lambda: y, peers, error,
                ours_in_place=ours_in_place)


def cases(shapes=SHAPES, ops=None, threads_list=(1, 2)):
    rng = np.random.default_rng(1)
    todo = [(op, s) for op in ("layer_norm", "rms_norm") for s in shapes]
    todo += [(op, s) for op in ("add_layer_norm", "add_rms_norm") for s in shapes
             if s in FUSED_SHAPES]
    if ops:
        todo = [(op, s) for op, s in todo if op in ops]
    for op, shape in todo:
        for threads in threads_list:
            if torch is not None:
                torch.set_num_threads(threads)
            yield make_case(op, shape, threads, rng)


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
    print(f"normkit {normkit.version()} ({normkit.simd_target()}); {args.rounds} rounds; "
          "ratio = peer / normkit time (above 1: normkit faster)")
    print(TABLE_HEAD)
    c = counts(run_cases(cases(shapes, [o for o in args.ops.split(",") if o]), args.rounds))
    print(f"\n{c['win']} wins, {c['tie']} ties, {c['loss']} losses")


if __name__ == "__main__":
    main()
