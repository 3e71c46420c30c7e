"""Checks on the applied branch: nothing half-merged, everything compiles, whitespace clean,
the promised symbols exist, and every codemod is a no-op on the result."""

from __future__ import annotations

import ast
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional


from rebaser.codemods import AnchorNotFound, Codemods
from rebaser.repo.git import Git
from rebaser.series.patches import Series, SymbolSpec, parsed_diff
from rebaser.wording import counted

_MARKER_RE = re.compile(r"^(<{7}|>{7}) |^={7}$|^\|{7} ")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    problems: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, name: str, problems: list[str], *, ok: str, failed: str) -> "Check":
        """A check that passes without problems; `failed` may name {count}, and {s} for a
        plural's s."""
        detail = failed.format(count=len(problems), s=_s(len(problems))) if problems else ok
        return cls(name, not problems, detail, problems)


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def verify(worktree: Git, base_sha: str, series: Series) -> list[Check]:
    # The git commands only read (diffs between commits; status at most refreshes the index
    # under its lock), and each is mostly a process start: two run beside the rest.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="forkkit-verify") as pool:
        committed = pool.submit(_committed, worktree)
        whitespace = pool.submit(_diff_check, worktree, base_sha, series)
        changed = worktree.changed_paths("--no-renames", base_sha, "HEAD", "--")
        existing = [path for path in changed if (worktree.path / path).is_file()]
        markers = find_conflict_markers(worktree.path, existing)
        python = [path for path in existing if path.endswith(".py")]
        compiles = _per_file("python compiles", worktree.path, python)
        return [
            committed.result(),
            markers,
            compiles,
            whitespace.result(),
            _symbols(worktree.path, [spec for patch in series.patches for spec in patch.symbols]),
            _codemods_idempotent(
                worktree.path, series.codemods, [p.codemod for p in series.patches if p.codemod]
            ),
        ]


def _committed(worktree: Git) -> Check:
    dirty = worktree.status_porcelain()
    return Check.of(
        "everything committed",
        dirty,
        ok="no uncommitted changes",
        failed="{count} uncommitted path{s}",
    )


def find_conflict_markers(root: Path, paths: list[str]) -> Check:
    return _per_file("no conflict markers", root, paths)


def _per_file(name: str, root: Path, paths: list[str]) -> Check:
    """A check made of each file's problems (_PER_FILE says which and how to say it)."""
    problems_in, ok, failed = _PER_FILE[name]
    problems = [problem for path in paths for problem in problems_in(root, path)]
    return Check.of(name, problems, ok=ok.format(files=len(paths), s=_s(len(paths))), failed=failed)


def _markers_in(root: Path, path: str) -> list[str]:
    text = (root / path).read_text(encoding="utf-8", errors="replace")
    return [
        f"{path}:{number}: {line[:40]}"
        for number, line in enumerate(text.splitlines(), start=1)
        if _MARKER_RE.match(line)
    ]


def _syntax_errors(root: Path, path: str) -> list[str]:
    try:
        compile((root / path).read_bytes(), path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return [f"{path}:{exc.lineno}: {exc.msg}"]
    return []


_PER_FILE: dict[str, tuple[Callable[[Path, str], list[str]], str, str]] = {
    "no conflict markers": (_markers_in, "{files} changed file{s} scanned", "{count} marker{s}"),
    "python compiles": (_syntax_errors, "{files} changed .py file{s} compiled", "{count} failed"),
}


def _diff_check(worktree: Git, base_sha: str, series: Series) -> Check:
    """Whitespace errors the carry brings. Those on lines a patch adds as they are (the
    fork's own, carried byte for byte) are counted, not failed: the fork has them."""
    result = worktree.run("diff", "--check", base_sha, "HEAD", "--", check=False)
    # Each problem ("path:line: what"), then the line it is about ("+text"), if it has one;
    # lines end at "\n" only (a CR, a form feed belong to the text).
    problems: list[tuple[str, Optional[str]]] = []
    for line in filter(None, result.stdout.split("\n")):
        if line.startswith("+") and problems and problems[-1][1] is None:
            problems[-1] = (problems[-1][0], line[1:])
        elif not line.startswith("+"):
            problems.append((line, None))
    own = _patches_own(series) if problems else None  # reading every patch costs
    carried = [p for p, text in problems if own is None or not own(p, text)]
    kept = len(problems) - len(carried)
    ok = "no whitespace errors" + (f" but the patches' own ({kept})" if kept else "")
    return Check.of("git diff --check", carried, ok=ok, failed="{count} problem{s}")


_PROBLEM_RE = re.compile(r"^(.*):(\d+): (.*)$")  # the path may hold colons: the last two go


def _patches_own(series: Series) -> Callable[[str, Optional[str]], bool]:
    """Whether a `git diff --check` problem is on a line a patch of the series adds as it
    is written (or a blank line it leaves at a file's end)."""
    added: set[tuple[str, str]] = set()
    blank_at_end: set[str] = set()
    for patch in series.patches:
        # The loader's paths (git's quoting undone), in unidiff's order of the same diff.
        diffs = parsed_diff(patch.raw.decode("utf-8", errors="replace"))
        for change, diff in zip(patch.files, diffs):
            lines = [line for hunk in diff for line in hunk]
            added.update(
                (change.path, line.value.rstrip("\r\n")) for line in lines if line.is_added
            )
            if lines and lines[-1].is_added and not lines[-1].value.strip("\r\n"):
                blank_at_end.add(change.path)

    def own(problem: str, text: Optional[str]) -> bool:
        match = _PROBLEM_RE.match(problem)
        if match is None:
            return False
        path, what = match[1], match[3]
        if text is None:
            return what.startswith("new blank line at EOF") and path in blank_at_end
        return (path, text.rstrip("\r\n")) in added

    return own


def _symbols(root: Path, specs: list[SymbolSpec]) -> Check:
    problems = []
    trees: dict[str, Optional[ast.Module]] = {}
    for spec in specs:
        reasons = []
        for shape in spec.shapes:  # one shape per upstream generation: one must exist
            if shape.path not in trees:
                file = root / shape.path
                trees[shape.path] = ast.parse(file.read_bytes()) if file.is_file() else None
            tree = trees[shape.path]
            reasons.append("file missing" if tree is None else _symbol_problem(tree, shape))
        if all(reasons):
            problems.append(f"{spec}: {'; '.join(reasons)}")  # type: ignore[arg-type]
    return Check.of(
        "promised symbols exist",
        problems,
        ok=f"{len(specs)} symbol{_s(len(specs))} found",
        failed="{count} missing",
    )


def _symbol_problem(tree: ast.Module, spec: SymbolSpec) -> Optional[str]:
    node: ast.AST = tree
    for part in spec.qualname.split("."):
        found = _member(node, part)
        if found is None:
            return f"no {part!r}"
        node = found
    if spec.param is not None:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return "not a function"
        args = node.args
        names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        return None if spec.param in names else f"no parameter {spec.param!r}"
    if spec.calls is not None:
        called = {ast.unparse(call.func) for call in ast.walk(node) if isinstance(call, ast.Call)}
        return None if spec.calls in called else f"does not call {spec.calls}"
    return None


def _member(node: ast.AST, name: str) -> Optional[ast.AST]:
    for child in getattr(node, "body", []):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if child.name == name:
                return child
        elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
            if child.target.id == name:
                return child
        elif isinstance(child, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == name for t in child.targets):
                return child
    return None


def _codemods_idempotent(root: Path, codemods: Codemods, names: list[str]) -> Check:
    try:
        changed = codemods.run(names, root, write=False)
    except AnchorNotFound as missing:
        return Check(
            "codemods are no-ops", False, f"codemod {missing.codemod}: {missing}", [str(missing)]
        )
    return Check.of(
        "codemods are no-ops",
        [f"{path} would change" for path in changed],
        ok=f"{counted(len(names), 'codemod')} change nothing" if names else "no codemods run",
        failed="codemods would change {count} file{s}",
    )
