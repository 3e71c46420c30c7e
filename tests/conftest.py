"""Fixtures for rebaser's tests: an isolated cache per test (wheels shared through pytest's
cache), small synthetic upstream repositories, and series built from real commits."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_pypi import FakeIndex, serve
from synthetic import CALC, SyntheticUpstream, git

from rebaser.cli import main
from rebaser.upstream import pypi_cache

PROJECT = Path(__file__).resolve().parents[1]
SERIES = PROJECT / "patches" / "series"
sys.path.append(str(PROJECT / "ci"))  # the CI kit's scripts, e.g. matrix.py


@pytest.fixture(scope="session")
def wheel_dir(request) -> Path:
    """megatron-core wheels, downloaded once into pytest's cache and reused across runs."""
    return Path(request.config.cache.mkdir("megatron-core-wheels"))


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch, wheel_dir) -> Path:
    cache = tmp_path / "forkkit-cache"
    monkeypatch.setenv("DSA_FORKKIT_CACHE", str(cache))
    monkeypatch.setenv("DSA_FORKKIT_WHEELS", str(wheel_dir))
    return cache


# The overlay's Triton-interpreter tests take about 3.5 of its CPU suite's 4 minutes and check
# kernel code that no base changes. They run in one apply of the series
# (test_embedded_default_applies_and_runs_the_cpu_suite), not again in each of the other
# applies here that run the CPU suite on another base or drift.
INTERPRETER_TESTS_LEFT_OUT = "-m 'not triton_interpreter'"


@pytest.fixture(autouse=True)
def interpreter_tests_once(monkeypatch) -> None:
    monkeypatch.setenv("PYTEST_ADDOPTS", INTERPRETER_TESTS_LEFT_OUT)


@pytest.fixture
def fake_pypi(tmp_path, monkeypatch) -> FakeIndex:
    """A local PyPI (JSON API over HTTP) with release 9.9.0; wheels go to a private folder."""
    index = FakeIndex()
    index.add("9.9.0")
    server = serve(index)
    monkeypatch.setenv("DSA_FORKKIT_PYPI_URL", index.url)
    monkeypatch.setenv("DSA_FORKKIT_WHEELS", str(tmp_path / "fake-wheels"))
    yield index
    server.shutdown()


@dataclass
class RunResult:
    code: int
    out: str
    err: str

    def report(self, path: Path) -> dict:
        return json.loads(path.read_text())


@pytest.fixture
def rebaser(capsys):
    """Run the rebaser CLI in-process; returns exit code and captured output."""

    def _run(*args: str) -> RunResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return RunResult(code, captured.out, captured.err)

    return _run


@pytest.fixture
def upstream(tmp_path) -> SyntheticUpstream:
    path = tmp_path / "upstream"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    repo = SyntheticUpstream(path)
    repo.commit({"pkg/calc.py": CALC, "pkg/__init__.py": ""}, "v1", tag="v1")
    return repo


@pytest.fixture
def release_clone(tmp_path):
    """A non-bare clone of a PyPI release, as a user's Megatron-LM checkout would be."""

    def _clone(version: str) -> SyntheticUpstream:
        cache = pypi_cache("megatron-core")
        cache.materialise(version)
        path = tmp_path / f"megatron-{version}"
        git(tmp_path, "init", "-q", "-b", "main", str(path))
        git(
            path,
            "fetch",
            "-q",
            str(cache.repo_dir),
            f"refs/tags/{cache.tag(version)}:refs/tags/v{version}",
        )
        git(path, "checkout", "-q", "-B", "main", f"v{version}")
        return SyntheticUpstream(path)

    return _clone
