#!/usr/bin/env bash
# What a fork's CI runs: verify the series against upstream (one or more refs of a clone, or
# the latest PyPI release) and a matrix of supported releases; write the JSON report and a
# Markdown summary; fail loudly when the series stops applying or its tests fail.
#
#   ci/verify-upstream.sh [--repo PATH [--ref REV]...] [--releases "0.19.0 0.19.2"]
#                         [--pypi VERSION | --no-latest] [--series FILE]
#                         [--test cpu|gpu|none] [--out DIR]
#
# Latest upstream: each --ref (default HEAD) of a Megatron-LM clone given with --repo, else
# the newest megatron-core release on PyPI (--pypi VERSION: that release). --no-latest: none
# of the bases is the latest upstream (an older release, a fork's branch): no newest release
# is added and no refreshed series offered. --releases defaults to the README's table.
# `rebaser verify` goes on past a patch that does not apply, so the report holds every
# patch's outcome on every base. Where a patch applied to a latest base only by a fallback (3-way or cherry-pick merge, codemod, replayed resolution)
# and that base is green (applied, verified, tests passed), the series refreshed from its
# branch is written to DIR/refreshed-series/<base>/ with its range-diff, which also goes to
# the job summary: a maintainer can take the fix as it is. Never from a base whose tests
# failed (the fix is not one), nor from the --releases matrix (older generations the series
# serves through its codemods: a series refreshed from one would take that older shape).
# Exit code: rebaser verify's (0 all green; see README).
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
repo="" refs=() releases="-" pypi="" no_latest=0
test_mode="cpu" out="forkkit-report"
series="$here/patches/series"
while [ $# -gt 0 ]; do
    case "$1" in
        --repo) repo="$2"; shift 2 ;;
        --ref) refs+=("$2"); shift 2 ;;
        --releases) releases="$2"; shift 2 ;;
        --series) series="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
        --test) test_mode="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --pypi) pypi="==$2"; shift 2 ;;
        --no-latest) no_latest=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "ci/verify-upstream.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
# By default, the releases the README says the series serves.
[ "$releases" != "-" ] || releases="$(python3 "$here/ci/matrix.py" --releases)" || exit 2

# How to run rebaser: $REBASER (e.g. "python -m rebaser"), else the console script, else python3.
if [ -n "${REBASER:-}" ]; then
    rebaser="$REBASER"
elif command -v rebaser >/dev/null; then
    rebaser="rebaser"
else
    rebaser="python3 -m rebaser"
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"

bases=()
repo_args=()
if [ -n "$repo" ]; then
    [ ${#refs[@]} -gt 0 ] || refs=(HEAD)
    for ref in "${refs[@]}"; do
        sha="$(git -C "$repo" rev-parse --verify --quiet "$ref^{commit}")" || {
            echo "ci/verify-upstream.sh: $ref is not a commit of $repo (fetch it first)" >&2
            exit 2
        }
        bases+=("$sha")
    done
    repo_args=(--repo "$repo")
elif [ "$no_latest" = 0 ]; then
    bases+=("pypi:megatron-core$pypi")  # the newest release on PyPI, or the one given
fi
latest=${#bases[@]}  # the bases so far are the latest upstream; the rest, the releases matrix
[ "$no_latest" = 0 ] || latest=0
if [ ${#bases[@]} -eq 0 ] && [ -z "$releases" ]; then
    echo "ci/verify-upstream.sh: nothing to verify (--no-latest and no --releases)" >&2
    exit 2
fi
for release in $releases; do
    bases+=("pypi:megatron-core==$release")
done

echo "verifying $(cd "$here" && git rev-parse --short HEAD 2>/dev/null || echo series) against: ${bases[*]}"
# --keep: the branches stay until the refreshed series has been taken from them (below).
$rebaser verify --series "$series" "${repo_args[@]}" --bases "${bases[@]}" --keep \
    --test "$test_mode" --json "$out/report.json" --markdown "$out/summary.md"
status=$?

# One line per base: its label, whether to refresh the series from it (yes), or why not
# (no: nothing to take; red: a patch needed a fallback but the base is not green), its
# branch and worktree.
python3 - "$out/report.json" "$latest" > "$out/branches.tsv" <<'PY' || true
import json, re, sys

FALLBACKS = {"3-way", "cherry-pick", "codemod", "resolution replayed"}
for number, row in enumerate(json.load(open(sys.argv[1]))["bases"]):
    report = row["report"]
    if report and report["branch"]:
        fallback = number < int(sys.argv[2]) and any(
            s["status"] in FALLBACKS for s in report["steps"]
        )
        refresh = "no" if not fallback else "yes" if row["exit_code"] == 0 else "red"
        label = re.sub(r"[^A-Za-z0-9._=-]+", "-", row["base"])
        print("\t".join([label, refresh, report["branch"], report["worktree"]]))
PY

series_dir="$(dirname "$series")"
overlay="$(sed -n 's/^@overlay[[:space:]]*\([^#[:space:]]*\).*/\1/p' "$series")"
while IFS=$'\t' read -r label refresh branch worktree; do
    if [ "$refresh" = "red" ]; then
        note="no refreshed series for \`$label\`: a patch needed a fallback there, but the base is not green (exit code in the table above)"
        echo "$note"
        printf '\n%s\n' "$note" >> "$out/summary.md"
    elif [ "$refresh" = "yes" ]; then
        # A copy of the series (and its overlay, at the same relative place) to refresh.
        dest="$out/refreshed-series/$label"
        copy="$dest/$(basename "$series_dir")"
        mkdir -p "$dest" && cp -r "$series_dir" "$copy"
        if [ -n "$overlay" ]; then
            overlay_copy="$(realpath -m "$copy/$overlay")"
            mkdir -p "$(dirname "$overlay_copy")" && cp -r "$series_dir/$overlay" "$overlay_copy"
        fi
        echo "refreshing the series from $branch (a patch needed a fallback on $label)"
        $rebaser refresh --series "$copy/$(basename "$series")" --repo "$worktree" \
            --branch "$branch" --range-diff-markdown "$dest/range-diff.md" \
            || echo "::warning::refreshing the series from $branch failed" >&2
        if [ -f "$dest/range-diff.md" ]; then
            {
                echo
                echo "#### refreshed series for \`$label\` (artifact: refreshed-series/$label)"
                echo
                cat "$dest/range-diff.md"
            } >> "$out/summary.md"
        fi
    fi
    # The kept throwaway branch and worktree go now, as verify removes them without --keep.
    common="$(git -C "$worktree" rev-parse --path-format=absolute --git-common-dir 2>/dev/null)" \
        && git --git-dir="$common" worktree remove --force "$worktree" \
        && git --git-dir="$common" branch -q -D "$branch"
done < "$out/branches.tsv"
rm -f "$out/branches.tsv"

if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/summary.md" ]; then
    cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
if [ "$status" -ne 0 ]; then
    echo "::error::dsa-forkkit series needs attention (rebaser verify exit $status)" >&2
    [ -f "$out/summary.md" ] && cat "$out/summary.md" >&2
fi
exit "$status"
