"""Benchmark: a full codemod pass over the files the series touches (each parsed once).

Runs every codemod of the series on the unpatched PyPI 0.19.2 sources, as `rebaser apply`
would when every patch has drifted. Target: under 15 s on a 2-core machine.

    python ci/bench_codemods.py [--runs 3] [--version 0.19.2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import libcst as cst

from rebaser.series.patches import load_series
from rebaser.upstream import pypi_cache

SERIES = Path(__file__).resolve().parents[1] / "patches" / "series"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--version", default="0.19.2")
    args = parser.parse_args()
    series = load_series(SERIES)
    names = [patch.codemod for patch in series.patches if patch.codemod]
    with tempfile.TemporaryDirectory(prefix="forkkit-bench-") as cache:
        os.environ.setdefault("DSA_FORKKIT_CACHE", cache)
        upstream = pypi_cache("megatron-core")
        sha = upstream.materialise(args.version).sha
        paths = list(dict.fromkeys(series.codemods.lookup(name).PATH for name in names))
        sources = {path: upstream.git.run("show", f"{sha}:{path}").stdout for path in paths}
    for path, text in sources.items():
        started = time.perf_counter()
        cst.parse_module(text)
        print(f"parse {path} ({len(text) / 1024:.0f} KB): {time.perf_counter() - started:.2f} s")
    seconds = []
    for run in range(1, args.runs + 1):
        started = time.perf_counter()
        result = series.codemods.transform_sources(names, sources)
        seconds.append(time.perf_counter() - started)
        changed = sum(result[p] != sources[p] for p in paths)
        print(
            f"run {run}: {seconds[-1]:.2f} s, {len(names)} codemods, {changed}/{len(paths)} files changed"
        )
    print(
        f"codemod pass, megatron-core {args.version}, {os.cpu_count()} cores: "
        f"median {statistics.median(seconds):.2f} s (target < 15 s)"
    )


if __name__ == "__main__":
    main()
