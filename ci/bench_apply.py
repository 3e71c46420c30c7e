"""Benchmark: `rebaser apply` + verification (no tests) onto the cached PyPI 0.19.2 release.

Prints the seconds of each run and the median. Target: under 10 s on a 2-core machine for
the patch path. The first run downloads the wheel when the cache is cold (not timed).

    python ci/bench_apply.py [--runs 5] [--version 0.19.2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rebaser.sequencer import machine
from rebaser.upstream import PypiSpec, resolve_pypi

SERIES = Path(__file__).resolve().parents[1] / "patches" / "series"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--version", default="0.19.2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forkkit-bench-") as cache:
        os.environ.setdefault("DSA_FORKKIT_CACHE", cache)
        target = resolve_pypi(PypiSpec("megatron-core", args.version))  # downloads once, untimed
        seconds = []
        for run in range(1, args.runs + 1):
            started = time.perf_counter()
            report = machine.throwaway_apply(target, SERIES, "none", lambda _message: None)
            seconds.append(time.perf_counter() - started)
            statuses = ", ".join(step.status for step in report.steps)
            print(f"run {run}: {seconds[-1]:.2f} s  exit {report.exit_code}  [{statuses}]")
            assert report.exit_code == 0, report.outcome
    print(
        f"apply + verify, megatron-core {args.version}, {os.cpu_count()} cores: "
        f"median {statistics.median(seconds):.2f} s, min {min(seconds):.2f} s (target < 10 s)"
    )


if __name__ == "__main__":
    main()
