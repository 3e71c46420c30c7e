"""Benchmark: what the triage of stops adds to a one-pass apply of a real fork.

Applies a series (`rebaser import` of a fork's branch) onto a newer upstream commit with
`--keep-going`, with the triage (keep/drop proposals, colliding commits) and without it,
alternating, in-process (the interpreter's start is not counted); prints each run, the
medians and the difference. Also the triage's own time, as its progress lines say it (what
the run waited for it, beside the lane and after it).
Target: the triage adds at most 10 s to a 33-commit fork (docs/real-fork.md). It needs a
clone holding the fork and upstream, so it is not run in CI:

    python ci/bench_triage.py --repo FORK --series SERIES --base REV [--runs 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

from rebaser.sequencer import machine


def once(repo: Path, series: Path, base: str, triage: bool) -> tuple[float, float, dict[str, int]]:
    """(the apply's seconds, the triage's own seconds, how many patches per status)."""
    said: list[str] = []
    options = machine.ApplyOptions(
        series_file=series,
        repo=repo,
        base=base,
        test="none",
        force=True,
        keep_going=True,
        triage=triage,
    )
    started = time.monotonic()
    report = machine.apply(options, said.append)
    seconds = time.monotonic() - started
    # The triage's own time: what the run waited for it, beside the lane and after it.
    found = [re.search(r"^triage.*, (?:waited )?([0-9.]+) s$", line) for line in said]
    own = sum(float(match.group(1)) for match in found if match)
    statuses: dict[str, int] = {}
    for row in report.steps:
        statuses[str(row.status)] = statuses.get(str(row.status), 0) + 1
    return seconds, own, statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--series", type=Path, required=True)
    parser.add_argument("--base", required=True)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    triage_times = []
    for run in range(args.runs):
        for triage in (False, True):
            seconds, own, statuses = once(
                args.repo.resolve(), args.series.resolve(), args.base, triage
            )
            times[triage].append(seconds)
            if triage:
                triage_times.append(own)
            label = "with triage   " if triage else "without triage"
            print(f"run {run + 1} {label}: {seconds:6.1f} s  (triage {own:4.1f} s)  {statuses}")
    without, with_ = statistics.median(times[False]), statistics.median(times[True])
    print(
        f"median: without {without:.1f} s, with {with_:.1f} s, difference {with_ - without:+.1f} s; "
        f"the triage itself {statistics.median(triage_times):.1f} s (target: at most 10 s)"
    )


if __name__ == "__main__":
    main()
