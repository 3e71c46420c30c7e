"""Which tests tell whether a carry kept the fork working.

The fork's own test files (`@fork-test`, which `rebaser import` records from the commits
that add or change them), and upstream's tests of the files the patches touch: for each
Python file a patch changes, the upstream test files named after it (`test_<name>.py`,
`<name>_test.py`), else those that import it by its dotted name, when few enough do for
the import to say something (a module every test imports selects none: the report names
it). Tests the series lists as `@upstream-test` are judged against the base instead, and
the overlay's against nothing (they must pass); neither is selected here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rebaser.repo.git import Git
from rebaser.series.patches import Series, is_test_file
from rebaser.steps.testrun import GPU_SUFFIX

MAX_IMPORTERS = 5  # a module more test files import than this selects none of them


@dataclass
class Selection:
    fork: list[str] = field(default_factory=list)  # the fork's test files in the tree
    upstream: list[str] = field(default_factory=list)  # upstream's, for the touched files
    why: dict[str, str] = field(default_factory=dict)  # an upstream test file -> why
    gpu_files: list[str] = field(default_factory=list)  # not run without --test gpu
    missing: list[str] = field(default_factory=list)  # fork tests not in the patched tree
    too_general: list[str] = field(default_factory=list)  # "<module> (N test files)"

    @property
    def files(self) -> list[str]:
        return [*self.fork, *self.upstream]


def select(series: Series, tree: Path, repo: Git, base_sha: str, *, gpu: bool) -> Selection:
    """The fork's tests and upstream's tests of the touched files, as they stand in `tree`
    (the patched tree; upstream's are looked up on the base, `base_sha`)."""
    chosen = Selection()
    for path in series.fork_tests:
        if not (tree / path).is_file():
            chosen.missing.append(path)
        elif path.endswith(GPU_SUFFIX) and not gpu:
            chosen.gpu_files.append(path)
        else:
            chosen.fork.append(path)
    taken = {*series.fork_tests, *series.upstream_tests, *series.overlay_tests()}
    found, chosen.too_general = _upstream_tests(series, repo, base_sha)
    for path, why in found.items():
        if path in taken or not (tree / path).is_file():
            continue
        if path.endswith(GPU_SUFFIX) and not gpu:
            chosen.gpu_files.append(path)
            continue
        chosen.upstream.append(path)
        chosen.why[path] = why
    return chosen


def _sources(series: Series) -> dict[str, str]:
    """The Python files the patches change (not test files), by their dotted module name."""
    modules = {}
    for patch in series.patches:
        for path in patch.touched_paths:
            if path.endswith(".py") and not is_test_file(path):
                parts = PurePosixPath(path).with_suffix("").parts
                parts = parts[:-1] if parts[-1] == "__init__" else parts
                if parts and all(part.isidentifier() for part in parts):
                    modules[".".join(parts)] = path
    return modules


def _upstream_tests(series: Series, repo: Git, base_sha: str) -> tuple[dict[str, str], list[str]]:
    """Upstream test file -> why it was selected; and the touched modules too many test
    files import to select any ("<module> (N test files)").

    A module's tests are those that import it (name its dotted path); of those, the ones
    named after it when there are any (test_router.py for moe/router.py); else all of them
    when few enough do. A name alone says little: upstream has a dozen test_utils.py."""
    modules = _sources(series)
    chosen: dict[str, str] = {}
    too_general = []
    for module, importers in _importers(repo, base_sha, list(modules)).items():
        stem = module.rsplit(".", 1)[-1]
        named = [path for path in importers if _named_after(path, stem)]
        if named:
            for test in named:
                chosen.setdefault(test, f"named after {modules[module]} and imports it")
        elif len(importers) <= MAX_IMPORTERS:
            for test in importers:
                chosen.setdefault(test, f"imports {module}")
        else:
            too_general.append(f"{module} ({len(importers)} test files)")
    return chosen, too_general


def _named_after(path: str, stem: str) -> bool:
    return PurePosixPath(path).name in (f"test_{stem}.py", f"{stem}_test.py")


def _importers(repo: Git, base_sha: str, modules: list[str]) -> dict[str, list[str]]:
    """Module -> the test files on the base that name it (one `git grep`)."""
    if not modules:
        return {}
    patterns = [argument for module in modules for argument in ("-e", module)]
    found = repo.run(
        "grep",
        "-o",
        "-z",
        "-w",
        "-F",
        *patterns,
        base_sha,
        "--",
        ":(glob)**/test_*.py",
        ":(glob)**/*_test.py",
        check=False,
    ).stdout
    importers: dict[str, list[str]] = {}
    for line in found.splitlines():
        where, _, module = line.partition("\0")
        path = where.removeprefix(f"{base_sha}:")
        if path not in importers.setdefault(module, []):
            importers[module].append(path)
    return importers
