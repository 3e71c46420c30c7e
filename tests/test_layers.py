"""The house's contracts (docs/architecture.md, "The house, folder by folder"): imports only
go down the layers, and only commands/output.py draws on the terminal. An AST walk over
rebaser/, so a new import that runs back up fails here, with the file and the line."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rebaser"

# Top to bottom. A module may import its own layer and any layer below it, never above.
# `cli` dispatches to the commands; the top-level helpers (config, errors, crash, wording) and the
# frameworks a series plugs into (codemods, testing) sit at the bottom.
LAYERS = [
    {"cli", "__main__"},
    {"commands"},
    {"sequencer"},
    {"steps"},
    {"carry"},
    {"series"},
    {"upstream"},
    {"repo"},
    {"codemods", "crash", "config", "errors", "testing", "wording", "__init__"},
]


def layer_of(module: str) -> int:
    """The layer of `rebaser.<part>...` (its first part names the folder or module; a name
    that is neither, like `__version__`, lives in rebaser/__init__.py)."""
    part = module.split(".")[1] if "." in module else "__init__"
    if not ((PACKAGE / part).is_dir() or (PACKAGE / f"{part}.py").is_file()):
        part = "__init__"
    return next(number for number, names in enumerate(LAYERS) if part in names)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every rebaser module the file imports, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            # `from rebaser import config` imports rebaser.config; `from rebaser.x import y`
            # imports rebaser.x (and y may be a module of it: the same layer either way).
            found += [
                (node.lineno, name if node.module == "rebaser" else node.module) for name in names
            ]
    return [
        (line, name) for line, name in found if name == "rebaser" or name.startswith("rebaser.")
    ]


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(relative.parts).removesuffix(".__init__")


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_the_walk_sees_every_layer():
    """A guard on the test itself: each layer holds modules, and every module has a layer."""
    seen = {layer_of(module_name(path)) for path in SOURCES}
    assert seen == set(range(len(LAYERS)))


def test_imports_only_go_down():
    upward = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for path in SOURCES
        for line, name in imports(path)
        if layer_of(name) < layer_of(module_name(path))
    ]
    assert not upward


def test_only_the_output_module_imports_rich():
    users = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for line, name in [(node.lineno, getattr(node, "module", None) or node.names[0].name)]
        if name == "rich" or name.startswith("rich.")
    ]
    assert users and all(user.startswith("rebaser/commands/output.py:") for user in users)


def test_an_upward_import_is_caught(tmp_path):
    """The walk itself: a repo module that imported the sequencer would be named."""
    module = tmp_path / "git.py"
    module.write_text("from rebaser.sequencer.state import ApplyState\nimport os\n")
    assert imports(module) == [(1, "rebaser.sequencer.state")]
    assert layer_of("rebaser.sequencer.state") < layer_of("rebaser.repo.git")
