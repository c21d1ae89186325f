#!/usr/bin/env bash
# Two builds through one benchmark binary: runs NEW_BUILD/bench/normkit_bench over the old and
# the new libnormkit.so (LD_LIBRARY_PATH; the binary's RUNPATH gives way), alternating which
# goes first, ROUNDS rounds, and prints each benchmark's median ratio_to_ref per build,
# their ranges, and new / old (above 1: the new build is faster).
# Usage: bench/ab_bench.sh OLD_LIB_DIR NEW_BUILD_DIR [filter] (ROUNDS=3 by default)
set -euo pipefail
old=$1 new=$2
filter=${3:-'^(seed002/group_norm/[^/]+/G:32/(NCHW|NHWC)/outofplace|edge/(group_norm|batch_norm)/.*/outofplace|rows/.*/4096x768/|instance/|seed003/)'}
rounds=${ROUNDS:-3}
out=$(mktemp -d)
# Each library runs from a fresh copy: on the 2-core VM one freshly linked file ran the
# bfloat16 shift-sum adjoint 1.8x slower (23-25 ms against 13) than a `cp` of the same
# bytes, in every run, while another linked file (other bytes) ran at its copy's speed.
for which in old new; do
  src=$old
  if [ "$which" = new ]; then src=$new; fi
  mkdir -p "$out/lib-$which"
  cp "$(readlink -f "$src/libnormkit.so.0")" "$out/lib-$which/libnormkit.so.0"
done
for r in $(seq 1 "$rounds"); do
  order="old new"
  if [ $((r % 2)) = 0 ]; then order="new old"; fi
  for which in $order; do
    lib=$out/lib-$which
    LD_LIBRARY_PATH=$lib "$new/bench/normkit_bench" --benchmark_filter="$filter" \
      --benchmark_format=json > "$out/$which-$r.json" 2>/dev/null
  done
done
python3 - "$out" <<'PY'
import collections, glob, json, re, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(sys.argv[1] + "/*.json"):  # old-R.json / new-R.json
    which = f.split("/")[-1].split("-")[0]
    for b in json.load(open(f))["benchmarks"]:
        if "ratio_to_ref" in b:
            d[b["name"]][which].append(b["ratio_to_ref"])
ratios = []
for name in sorted(d):
    v = d[name]
    if "old" in v and "new" in v:
        o, n = statistics.median(v["old"]), statistics.median(v["new"])
        ratios.append(n / o)
        short = re.sub(r"/min_time:[0-9.]+|/manual_time", "", name)
        print(f"{short:70s} old {o:.2f} ({min(v['old']):.2f}-{max(v['old']):.2f}) "
              f"new {n:.2f} ({min(v['new']):.2f}-{max(v['new']):.2f}) new/old {n / o:.2f}")
print(f"{len(ratios)} benchmarks, median new/old {statistics.median(ratios):.3f}, "
      f"min {min(ratios):.2f}, max {max(ratios):.2f}")
PY
rm -rf "$out"
