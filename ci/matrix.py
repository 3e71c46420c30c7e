"""The bases CI verifies the series against, one job each (ci/github-workflow.yml):

- every megatron-core release the README's "Supported upstream" table lists;
- the newest release on PyPI, where the table does not list it yet;
- NVIDIA/Megatron-LM `main` and `dev` (the RL forks live on `dev`; releases come from `main`);
- the fork branches ci/bases.toml lists, and those given (`owner/repo@branch`, separated by
  spaces, commas or lines).

    python ci/matrix.py [--fork-branches "radixark/Megatron-LM@miles-main ..."] [--offline]
        prints, for $GITHUB_OUTPUT, `matrix=<JSON>` (a strategy.matrix of `include` rows) and
        `gpu-runner=<label>` (ci/bases.toml's; empty: no GPU job)
    python ci/matrix.py --releases
        prints the README's releases, space-separated (ci/verify-upstream.sh's default)

A job may offer a refreshed series (`refresh`) only where the series' own shape is the
target's: the newest upstream (the newest release, `main`, `dev`); never an older release the
series serves through its codemods, nor a fork branch.
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from pathlib import Path
from typing import Optional

README = Path(__file__).resolve().parents[1] / "README.md"
BASES = Path(__file__).resolve().with_name("bases.toml")
UPSTREAM = "NVIDIA/Megatron-LM"


def readme_pypi_rows(readme: Path = README) -> list[tuple[list[str], set[str], list[str]]]:
    """(versions, the yanked ones, statuses of overlay and patches) of each PyPI row of the
    README's "Supported upstream" table."""
    section = readme.read_text().split("## Supported upstream\n")[1]
    rows = []
    for line in section.split("\n## ")[0].splitlines():
        if not line.startswith("| megatron-core "):
            continue
        release, _, statuses, _ = (cell.strip() for cell in line.strip("|").split("|"))
        names = release.removeprefix("megatron-core ").split(", ")
        versions = [name.split()[0] for name in names]
        yanked = {name.split()[0] for name in names if name.endswith("(yanked)")}
        rows.append((versions, yanked, [status.strip() for status in statuses.split(",")]))
    return rows


def supported_releases(readme: Path = README) -> list[str]:
    return [version for versions, _, _ in readme_pypi_rows(readme) for version in versions]


def _row(
    id: str,
    name: str,
    *,
    release: str = "",
    repository: str = "",
    ref: str = "",
    refresh: bool = False,
) -> dict:
    return {
        "id": re.sub(r"[^A-Za-z0-9._-]+", "-", id),  # an artifact's name
        "name": name,
        "release": release,
        "repository": repository,
        "ref": ref,
        "refresh": refresh,
    }


def fork_branch(text: str) -> tuple[str, str]:
    """`owner/repo@branch` as (repository, branch)."""
    repository, at, branch = text.partition("@")
    if not at or not branch or not re.fullmatch(r"[\w.-]+/[\w.-]+", repository):
        raise SystemExit(f"ci/matrix.py: {text!r} is not owner/repo@branch")
    return repository, branch


def matrix(releases: list[str], newest: Optional[str], forks: list[str]) -> dict:
    rows = [
        _row(
            f"pypi-{version}",
            f"megatron-core {version}",
            release=version,
            refresh=version == newest,
        )
        for version in releases
    ]
    if newest is not None and newest not in releases:
        rows.append(
            _row(
                f"pypi-{newest}",
                f"megatron-core {newest} (newest, not in the README yet)",
                release=newest,
                refresh=True,
            )
        )
    for branch in ("main", "dev"):
        rows.append(
            _row(
                f"nvidia-{branch}",
                f"{UPSTREAM} {branch}",
                repository=UPSTREAM,
                ref=branch,
                refresh=True,
            )
        )
    for text in forks:
        repository, branch = fork_branch(text)
        rows.append(
            _row(
                f"{repository}-{branch}",
                f"{repository} {branch}",
                repository=repository,
                ref=branch,
            )
        )
    return {"include": rows}


def newest_release() -> str:
    from rebaser.upstream.pypi_index import release_versions  # rebaser installed: the job's

    return release_versions("megatron-core")[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fork-branches", default="", help="owner/repo@branch ...")
    parser.add_argument("--releases", action="store_true", help="print the README's releases")
    parser.add_argument("--offline", action="store_true", help="do not ask PyPI for its newest")
    args = parser.parse_args()
    releases = supported_releases()
    if args.releases:
        print(" ".join(releases))
        return
    config = tomllib.loads(BASES.read_text())
    newest = None if args.offline else newest_release()
    forks = config["fork_branches"] + re.split(r"[\s,]+", args.fork_branches.strip())
    rows = matrix(releases, newest, [fork for fork in forks if fork])
    print("matrix=" + json.dumps(rows, separators=(",", ":")))
    print(f"gpu-runner={config['gpu_runner']}")


if __name__ == "__main__":
    main()
