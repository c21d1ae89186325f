# SPDX-License-Identifier: Apache-2.0
"""What the like-for-like peer scripts share: PyTorch's outputs reused, the cases, the
timer, and the verdicts.

A Case is one op on one shape at one thread count: normkit's call (out of place, and in
place when some peer is), the peers' calls, and an error function against a float64
reference. compare() checks every output first, then times all contenders interleaved
over `rounds` rounds (each round: the median of enough calls for ~50 ms, at least 3; the
order rotated a contender each round, a 30 ms pause before each block), and returns one
row per peer. A row is a win or a loss only when the per-round ranges of
normkit's and the peer's times do not overlap; otherwise a tie.
"""
import os
import statistics
import sys
import time

# glibc keeps freed memory (set before Python starts), so a PyTorch op without out= reuses
# the previous call's output instead of faulting in fresh pages every call.
_KEEP = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 34)}


def reexec_keeping_freed_memory():
    """Re-executes the script with glibc told to keep freed memory, unless it already is."""
    if any(os.environ.get(k) != v for k, v in _KEEP.items()):
        os.environ.update(_KEEP)
        os.execv(sys.executable, [sys.executable] + sys.argv)


def timed(fn, reps):
    """The median of `reps` calls of fn, in seconds."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class Peer:
    """A peer's call. output() returns its result as an array comparable with the
    reference (NCHW order for channel ops). in_place: it overwrites its input (timed against
    normkit in place). style: "best" (the way its best users call it) or "plain" (the way
    most users write it)."""

    def __init__(self, name, call, output, in_place=False, style="best"):
        self.name, self.call, self.output = name, call, output
        self.in_place, self.style = in_place, style


class Case:
    """One op, shape, layout, dtype and thread count. error(array) -> float: the output's
    distance from the float64 reference, in the case's own measure; normkit must be within
    ours_tol, a peer within peer_tol (else it is reported, not timed)."""

    def __init__(self, section, op, shape, layout, dtype, threads, ours, ours_output, peers,
                 error, ours_in_place=None, ours_tol=1e-5, peer_tol=1e-4):
        self.section, self.op, self.shape, self.layout = section, op, shape, layout
        self.dtype, self.threads = dtype, threads
        self.ours, self.ours_output, self.ours_in_place = ours, ours_output, ours_in_place
        self.peers, self.error = peers, error
        self.ours_tol, self.peer_tol = ours_tol, peer_tol


def shape_text(shape):
    return shape if isinstance(shape, str) else "x".join(map(str, shape))


def _row(case, **kw):
    row = {"section": case.section, "op": case.op, "shape": shape_text(case.shape),
           "layout": case.layout, "dtype": case.dtype, "threads": case.threads}
    row.update(kw)
    return row


def _reps(fn, budget):
    """Calls per timed block: enough for `budget` seconds, 3 to 2000."""
    fn()
    t0 = time.perf_counter()
    fn()
    dt = max(time.perf_counter() - t0, 1e-7)
    return int(min(2000, max(3, budget / dt)))


# The pause before each timed block (see compare).
SETTLE_SECONDS = 0.03


def compare(case, rounds=3, budget=0.05):
    """Checks, times and judges one case. Returns its rows (dicts): one per peer, or one
    saying why nothing was timed."""
    case.ours()
    err = case.error(case.ours_output())
    if not err <= case.ours_tol:
        return [_row(case, peer="normkit", style="-", note=f"normkit off float64 by {err:.2g}")]
    rows, checked = [], []
    for p in case.peers:
        try:
            p.call()
            perr = case.error(p.output())
        except Exception as e:  # noqa: BLE001
            rows.append(_row(case, peer=p.name, style=p.style, note=f"failed: {e}"[:160]))
            continue
        if perr <= case.peer_tol:
            checked.append((p, perr))
        else:
            rows.append(_row(case, peer=p.name, style=p.style,
                             note=f"output off float64 by {perr:.2g}: not timed"))
    if not checked:
        return rows
    calls = {"normkit": case.ours}
    if case.ours_in_place is not None and any(p.in_place for p, _ in checked):
        calls["normkit in place"] = case.ours_in_place
    calls.update({p.name: p.call for p, _ in checked})
    reps = {name: _reps(fn, budget) for name, fn in calls.items()}
    times = {name: [] for name in calls}
    order = list(calls)
    for r in range(rounds):
        # Each round starts one contender further on, so no contender always follows the
        # same one; and each block starts after a pause in which the last one's pool
        # threads stop spinning (ncnn's OpenMP threads spin 20 ms by default; in one run
        # normkit's 1-thread RMS norm [8, 4096] took 25-29 us in every round, 5.6 us
        # alone).
        for name in order[r % len(order):] + order[:r % len(order)]:
            time.sleep(SETTLE_SECONDS)
            times[name].append(timed(calls[name], reps[name]))
    for p, perr in checked:
        mine = times["normkit in place" if p.in_place else "normkit"]
        theirs = times[p.name]
        verdict = ("win" if max(mine) < min(theirs) else
                   "loss" if max(theirs) < min(mine) else "tie")
        row = _row(case, peer=p.name + (" (both in place)" if p.in_place else ""),
                   style=p.style, ours=mine, theirs=theirs,
                   ratios=[t / o for t, o in zip(theirs, mine)], verdict=verdict)
        if perr > case.ours_tol:  # accepted, but less exact than normkit must be
            row["note"] = f"peer off float64 by {perr:.1e}, normkit by {err:.1e}"
        rows.append(row)
    return rows


def _ms(values):
    return f"{min(values) * 1e3:.3g}-{max(values) * 1e3:.3g}"


TABLE_HEAD = ("| op | shape | layout | dtype | threads | peer | style | normkit ms | peer ms | "
              "ratio range | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|")


def table_line(row):
    """A markdown line of a row (ratio = peer time / normkit time, above 1: normkit faster)."""
    head = (f"| {row['op']} | {row['shape']} | {row['layout']} | {row['dtype']} | "
            f"{row['threads']} | {row['peer']} | {row['style']} | ")
    if "verdict" not in row:
        return head + f"| | | {row['note']} |"
    r = row["ratios"]
    note = f" ({row['note']})" if "note" in row else ""
    return head + (f"{_ms(row['ours'])} | {_ms(row['theirs'])} | {min(r):.2f}-{max(r):.2f} | "
                   f"{row['verdict']}{note} |")


def counts(rows):
    c = {"win": 0, "tie": 0, "loss": 0}
    for r in rows:
        if "verdict" in r:
            c[r["verdict"]] += 1
    return c


def run_cases(cases, rounds, sink=None):
    """compare() over cases, printing each row as it is measured; returns all rows."""
    rows = []
    for case in cases:
        for row in compare(case, rounds):
            print(table_line(row), flush=True)
            rows.append(row)
            if sink is not None:
                sink(row)
    return rows


def max_scaled_error(reference):
    """An error function: max |got - ref| / (max |ref| + 1), got reshaped to ref's shape."""
    import numpy as np

    scale = float(np.abs(reference).max()) + 1.0

    def error(got):
        got = np.asarray(got, dtype=np.float64).reshape(reference.shape)
        return float(np.abs(got - reference).max() / scale)

    return error
