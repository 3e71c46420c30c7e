#!/usr/bin/env bash
# Top-k timings of several revisions of the overlay's kernels, interleaved in one call on
# one GPU: timings of the same code drift by up to 15% from call to call (and within one),
# so revisions are compared only round by round, on the same machine.
#
#   ci/topk_pairs.sh pack DIR REV...   (here) each revision's megatron_overlay and ci into
#                                      DIR/NAME (NAME: REV with '/' as '-'); carry DIR
#   ci/topk_pairs.sh run DIR ROUNDS OUT [BENCH ARGS]
#                                      (there) ROUNDS rounds, each running ci/bench_topk.py
#                                      (default arguments: --reps 10 --relu-only
#                                      --no-variants) in every revision of DIR in turn; JSON
#                                      records in OUT/NAME-ROUND.json; last, each revision's
#                                      median per dtype over its torch-backend timings
#
# TOPK_PAIRS_CARD=H200 ci/topk_pairs.sh run ...: time nothing (exit 3) unless the card's
# name holds H200: a device call that may land on another card costs no more than its start.
set -euo pipefail

case "${1:-}" in
pack)
    dir="${2:?usage: ci/topk_pairs.sh pack DIR REV...}"
    shift 2
    [ $# -gt 0 ] || { echo "ci/topk_pairs.sh pack: name at least one revision" >&2; exit 2; }
    top="$(git rev-parse --show-toplevel)"
    for rev in "$@"; do
        name="${rev//\//-}"
        rm -rf "${dir:?}/$name" && mkdir -p "$dir/$name"
        git -C "$top" archive "$rev" megatron_overlay ci | tar -x -C "$dir/$name"
        echo "$dir/$name: $(git -C "$top" rev-parse --short "$rev^{commit}")"
    done
    ;;
run)
    dir="${2:?usage: ci/topk_pairs.sh run DIR ROUNDS OUT [BENCH ARGS]}"
    rounds="${3:?usage: ci/topk_pairs.sh run DIR ROUNDS OUT [BENCH ARGS]}"
    out="${4:?usage: ci/topk_pairs.sh run DIR ROUNDS OUT [BENCH ARGS]}"
    shift 4
    args=("$@")
    [ ${#args[@]} -gt 0 ] || args=(--reps 10 --relu-only --no-variants)
    card="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    echo "$card"
    if [[ -n "${TOPK_PAIRS_CARD:-}" && "$card" != *"$TOPK_PAIRS_CARD"* ]]; then
        echo "ci/topk_pairs.sh: $card is not the $TOPK_PAIRS_CARD asked for: nothing timed" >&2
        exit 3
    fi
    mkdir -p "$out"
    for round in $(seq 1 "$rounds"); do
        for revision in "$dir"/*/; do
            name="$(basename "$revision")"
            echo "=== $name, round $round"
            (cd "$revision" && python3 ci/bench_topk.py "${args[@]}" \
                --json "$(realpath "$out")/$name-$round.json") | grep -v "^segmented_select:"
        done
    done
    python3 - "$out" <<'EOF'
import collections, json, pathlib, statistics, sys
times = collections.defaultdict(list)
for path in sorted(pathlib.Path(sys.argv[1]).glob("*-*.json")):
    name = path.stem.rsplit("-", 1)[0]
    for record in json.loads(path.read_text())["records"]:
        if record["method"].startswith("torch backend"):
            times[(name, record["shape"], record["dtype"])].append(record["ms"])
for (name, shape, dtype), found in sorted(times.items()):
    print(f"{name:24} {shape:28} {dtype:9} median {statistics.median(found):.3f} ms "
          f"({len(found)} timings, {min(found):.3f}-{max(found):.3f})")
EOF
    ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
