#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The peer report: every normkit op against PyTorch, ONNX Runtime and ncnn, like for like.

    ./bench/peers/run_peers.sh                 # makes .venv-peers, installs normkit and the peers
    python bench/peers/run_peers.py [--sections channel,rows,half,train,model] [--rounds 3]

Sections (each also runs alone through its script):
- channel (channel_peer.py): affine, batch norm in eval mode, group / instance norm and the
  shift-sum operators, float32, NCHW and NHWC;
- rows (rows_peer.py): layer norm, RMS norm and the fused residual add + norm over rows;
- half (torch_peer.py --set half): bfloat16 / float16 group, layer and batch norm;
- train (torch_peer.py --set train): batch norm's training-mode forward and backward;
- model (torch_peer.py --set model): whole PyTorch networks against the same networks
  converted with normkit.torch;
- more (channel_peer.py --families more, torch_peer.py --set half_more): group norm +
  SiLU, channel layer norm (G = 1), the GAP step, shift / unshift, bfloat16 / float16
  affine and RMS norm.

Each peer is called the way its best users call it ("best") and, where that differs, the
way most users write it ("plain"); normkit in place against a peer in place, out of place
(into a preallocated output) against the others. Every output is checked against float64
before it is timed; each row is `rounds` interleaved rounds, and counts as a win or a loss
only when the ranges of the per-round times do not overlap (else a tie).

Writes bench/results/<machine>.md (summary, every loss and tie, the full tables), .json (the
rows) and .png (per op, shape, layout, dtype and thread count, the ratio against the
strongest like-for-like peer).
"""
import argparse
import datetime
import itertools
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from peer_util import TABLE_HEAD, counts, reexec_keeping_freed_memory, run_cases, table_line  # noqa: E402

if __name__ == "__main__":
    reexec_keeping_freed_memory()

import channel_peer  # noqa: E402
import rows_peer  # noqa: E402
import normkit  # noqa: E402

try:
    import torch_peer  # noqa: E402
except ImportError as e:  # PyTorch missing: the sections that need only it are skipped
    torch_peer = None
    print(f"sections half, train, model skipped: {e}")

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TITLES = {
    "channel": "Channel ops, float32 (affine, batch norm eval, group / instance norm, shift-sum)",
    "rows": "Row norms, float32 (layer norm, RMS norm, residual add + norm)",
    "half": "bfloat16 / float16",
    "train": "Batch norm, training mode (forward and backward), float32",
    "model": "Whole networks through normkit.torch.convert",
    "more": "Fused and remaining ops: group norm + SiLU, channel layer norm (G = 1), the GAP "
            "step, shift / unshift; bfloat16 / float16 affine and RMS norm",
}


def section_cases(name, quick):
    if name == "channel":
        return channel_peer.cases(quick=quick)
    if name == "more":
        more = channel_peer.cases(["more"], quick)
        if torch_peer is None:
            return more
        return itertools.chain(more, torch_peer.cases("half_more", quick))
    if name == "rows":
        shapes = [(64, 768), (1, 4096)] if quick else rows_peer.SHAPES
        return rows_peer.cases(shapes)
    if torch_peer is None:
        return iter(())
    return torch_peer.cases(name, quick)


def versions():
    v = [f"normkit {normkit.version()} (SIMD target {normkit.simd_target()})"]
    for mod, label in ((channel_peer.torch, "torch"), (channel_peer.ort, "onnxruntime")):
        if mod is not None:
            v.append(f"{label} {mod.__version__}")
    if channel_peer.ncnn is not None:
        try:
            from importlib.metadata import version

            v.append(f"ncnn {version('ncnn')}")
        except Exception:  # noqa: BLE001
            v.append("ncnn")
    return ", ".join(v)


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except Exception:  # noqa: BLE001
        pass
    return platform.processor() or "?"


def write_report(machine, sections, rows, rounds, command, output):
    os.makedirs(output, exist_ok=True)
    base = os.path.join(output, machine)
    with open(base + ".json", "w") as f:
        json.dump(rows, f, indent=0)
    lines = [f"# normkit vs peers on {machine}", "",
             f"{datetime.date.today().isoformat()}; {cpu_name()}, {os.cpu_count()} logical CPUs; "
             f"{versions()}. Reproduce: `{command}`.", "",
             "Each peer called the way its best users call it (**best**) and the way most users "
             "write it (**plain**); normkit into a preallocated output, or in place against a "
             "peer in place. Outputs checked against float64 first. "
             f"{rounds} interleaved rounds a row (each the median of enough calls for ~50 ms, at "
             "least 3; the order rotated each round, a 30 ms pause before each block); times "
             "are the range of the rounds' medians; ratio = peer time / normkit time (above 1: "
             "normkit faster); **win** / **loss** only when the two ranges do not "
             "overlap, else **tie**.", "", "## Summary", "",
             "| section | style | rows | wins | ties | losses |", "|---|---|---|---|---|---|"]
    for sec in sections:
        for style in ("best", "plain"):
            sel = [r for r in rows if r["section"] == sec and r["style"] == style]
            if sel:
                c = counts(sel)
                lines.append(f"| {TITLES[sec]} | {style} | {sum(c.values())} | {c['win']} | "
                             f"{c['tie']} | {c['loss']} |")
    not_timed = [r for r in rows if "verdict" not in r]
    others = [r for r in rows if r.get("verdict") in ("loss", "tie")]
    lines += ["", "## Every loss and tie", "", TABLE_HEAD] + [table_line(r) for r in others]
    if not_timed:
        lines += ["", "## Not timed", "", TABLE_HEAD] + [table_line(r) for r in not_timed]
    for sec in sections:
        sel = [r for r in rows if r["section"] == sec]
        lines += ["", f"## {TITLES[sec]}", "", TABLE_HEAD] + [table_line(r) for r in sel]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {base}.md, {base}.json")
    chart(base + ".png", sections, rows)


def strongest(rows):
    """Per op, shape, layout, dtype and thread count, the best-style row whose peer came
    closest (the smallest median ratio): normkit against its strongest like-for-like peer."""
    pick = {}
    for r in rows:
        if r["style"] != "best" or "ratios" not in r:
            continue
        key = (r["section"], r["op"], r["shape"], r["layout"], r["dtype"], r["threads"])
        if key not in pick or _median(r["ratios"]) < _median(pick[key]["ratios"]):
            pick[key] = r
    return list(pick.values())


def _median(v):
    return sorted(v)[len(v) // 2]


def chart(path, sections, rows):
    """Per row of strongest(): the median round's ratio, the whiskers the range, one panel
    a section."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"chart skipped: {e}")
        return
    best = strongest(rows)
    panels = [(s, [r for r in best if r["section"] == s]) for s in sections]
    panels = [(s, sel) for s, sel in panels if sel]
    if not panels:
        return
    heights = [max(1.5, 0.11 * len(sel) + 0.6) for _, sel in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    colors = {"win": "tab:green", "tie": "tab:gray", "loss": "tab:red"}
    for ax, (sec, sel) in zip(axes[:, 0], panels):
        mids = [_median(r["ratios"]) for r in sel]
        lo = [m - min(r["ratios"]) for m, r in zip(mids, sel)]
        hi = [max(r["ratios"]) - m for m, r in zip(mids, sel)]
        ys = range(len(sel))
        ax.barh(ys, mids, xerr=[lo, hi], color=[colors[r["verdict"]] for r in sel],
                error_kw={"lw": 0.6})
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_yticks(list(ys))
        ax.set_yticklabels([f"{r['op']} {r['shape']} {r['layout']} "
                            f"{'' if r['dtype'] == 'float32' else r['dtype'] + ' '}t{r['threads']}"
                            f" vs {r['peer']}" for r in sel], fontsize=4.5)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.tick_params(axis="x", labelsize=6)
        ax.set_title(TITLES[sec], fontsize=8)
    axes[-1, 0].set_xlabel("peer time / normkit time against the strongest best-style peer "
                           "(green win, gray tie, red loss; above 1: normkit faster)", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default=",".join(TITLES), help=f"a subset of {','.join(TITLES)}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a few small shapes a section")
    ap.add_argument("--machine", default=os.environ.get("NORMKIT_MACHINE", platform.node()))
    ap.add_argument("--output", default=os.path.join(ROOT, "bench", "results"),
                    help="the report's folder (default: bench/results)")
    args = ap.parse_args()
    sections = [s for s in args.sections.split(",") if s]
    unknown = [s for s in sections if s not in TITLES]
    if unknown:
        ap.error(f"--sections: unknown {unknown}")
    rows = []
    for sec in sections:
        print(f"\n## {TITLES[sec]}\n\n{TABLE_HEAD}", flush=True)
        # Rows belong to the section that ran them (a section may run another's cases).
        rows += [dict(r, section=sec) for r in run_cases(section_cases(sec, args.quick),
                                                         args.rounds)]
    command = "./bench/peers/run_peers.sh" + ("" if sections == list(TITLES) else
                                               f" --sections {','.join(sections)}")
    if args.quick:
        command += " --quick"
    write_report(args.machine, sections, rows, args.rounds, command, args.output)
    c = counts(rows)
    print(f"{c['win']} wins, {c['tie']} ties, {c['loss']} losses")


if __name__ == "__main__":
    main()
