#!/usr/bin/env bash
# What a fork's CI runs: verify the series against the latest upstream and a matrix of
# supported releases; write the JSON report and a Markdown summary; fail loudly when the
# series stops applying or its tests fail.
#
#   ci/verify-upstream.sh [--repo PATH [--ref REV]] [--releases "0.19.0 0.19.2"] [--test cpu|none] [--out DIR]
#
# Latest upstream: HEAD (or --ref) of a Megatron-LM clone given with --repo, else the newest
# megatron-core release on PyPI. Exit code: rebaser verify's (0 all green; see README).
set -uo pipefail

repo="" ref="HEAD" releases="0.19.0 0.19.1 0.19.2" test_mode="cpu" out="forkkit-report"
while [ $# -gt 0 ]; do
    case "$1" in
        --repo) repo="$2"; shift 2 ;;
        --ref) ref="$2"; shift 2 ;;
        --releases) releases="$2"; shift 2 ;;
        --test) test_mode="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "ci/verify-upstream.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

here="$(cd "$(dirname "$0")/.." && pwd)"
# How to run rebaser: $REBASER (e.g. "python -m rebaser"), else the console script, else python3.
if [ -n "${REBASER:-}" ]; then
    rebaser="$REBASER"
elif command -v rebaser >/dev/null; then
    rebaser="rebaser"
else
    rebaser="python3 -m rebaser"
fi
mkdir -p "$out"

bases=()
repo_args=()
if [ -n "$repo" ]; then
    bases+=("$(git -C "$repo" rev-parse "$ref")")
    repo_args=(--repo "$repo")
else
    bases+=("pypi:megatron-core")  # the newest release on PyPI
fi
for release in $releases; do
    bases+=("pypi:megatron-core==$release")
done

echo "verifying $(cd "$here" && git rev-parse --short HEAD 2>/dev/null || echo series) against: ${bases[*]}"
$rebaser verify --series "$here/patches/series" "${repo_args[@]}" --bases "${bases[@]}" \
    --test "$test_mode" --json "$out/report.json" --markdown "$out/summary.md"
status=$?

if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/summary.md" ]; then
    cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
if [ "$status" -ne 0 ]; then
    echo "::error::dsa-forkkit series needs attention (rebaser verify exit $status)" >&2
    [ -f "$out/summary.md" ] && cat "$out/summary.md" >&2
fi
exit "$status"
