"""Exit codes mean what the README says: PyPI unreachable is 5 (not "no wheel", 2); a bug
exits 6 with one line and a traceback log; Ctrl-C is 130; a failing git command shows its
command, stdout and stderr; a read-only cache is exit 5 before anything is created."""

from __future__ import annotations

import socket

import pytest
from faults import read_only
from synthetic import apply, git, two_patch_series

from rebaser.sequencer import machine
from rebaser.errors import ExitCode, RebaserError
from rebaser.repo.git import Git


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_pypi_is_an_environment_failure(rebaser, tmp_path, monkeypatch):
    monkeypatch.setenv("DSA_FORKKIT_PYPI_URL", f"http://127.0.0.1:{closed_port()}/pypi")
    monkeypatch.setenv("DSA_FORKKIT_WHEELS", str(tmp_path / "no-wheels-yet"))
    result = rebaser("apply", "--upstream", "pypi:megatron-core==0.19.2", "--test", "none")
    assert result.code == ExitCode.ENVIRONMENT, result.err
    assert "could not reach PyPI" in result.err and "no wheel" not in result.err


def test_unknown_release_is_still_a_usage_error(rebaser, fake_pypi):
    result = rebaser("apply", "--upstream", "pypi:megatron-core==0.0.42", "--test", "none")
    assert result.code == ExitCode.USAGE
    assert "PyPI has no release megatron-core==0.0.42" in result.err and "9.9.0" in result.err


def test_an_unexpected_exception_exits_6_with_one_line_and_a_log(
    rebaser, tmp_path, upstream, monkeypatch, isolated_cache
):
    def broken_verify(*args, **kwargs):
        raise ZeroDivisionError("division by zero in a check")

    monkeypatch.setattr(machine, "verify", broken_verify)
    result = apply(rebaser, two_patch_series(tmp_path, upstream), upstream, "v1")
    assert result.code == ExitCode.INTERNAL == 6
    (line,) = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert "ZeroDivisionError: division by zero in a check" in line
    assert "(at rebaser/sequencer/machine.py:" in line  # where it failed
    (log,) = (isolated_cache / "logs").glob("crash-*.log")
    assert str(log) in line
    assert "Traceback (most recent call last)" in log.read_text()
    assert "in broken_verify" in log.read_text()


def test_ctrl_c_exits_130(rebaser, tmp_path, upstream, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(machine, "verify", interrupted)
    result = apply(rebaser, two_patch_series(tmp_path, upstream), upstream, "v1")
    assert result.code == ExitCode.INTERRUPTED == 130
    assert "interrupted" in result.err


def test_a_failing_git_command_reports_its_stdout_and_stderr(upstream):
    with pytest.raises(RebaserError) as failed:
        Git(upstream.path).commit("nothing here\n", author="A <a@b>", date="1700000000 +0000")
    message = str(failed.value)
    assert "git commit" in message and "failed (1)" in message
    assert "stdout: " in message and "nothing to commit" in message
    assert "stderr: (empty)" in message


@pytest.fixture
def read_only_folder(tmp_path):
    folder = tmp_path / "read-only-cache"
    folder.mkdir()
    with read_only(folder):
        yield folder


def test_read_only_cache_fails_before_anything_is_created(
    rebaser, tmp_path, upstream, monkeypatch, read_only_folder
):
    series = two_patch_series(tmp_path, upstream)
    monkeypatch.setenv("DSA_FORKKIT_CACHE", str(read_only_folder))
    refs_before = git(upstream.path, "for-each-ref")
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.ENVIRONMENT, result.err
    assert f"the cache folder {read_only_folder} is not writable" in result.err
    assert "Read-only file system" in result.err
    assert git(upstream.path, "for-each-ref") == refs_before  # no branch, no backup
    assert len(git(upstream.path, "worktree", "list").splitlines()) == 1
    assert not (upstream.path / ".git" / "forkkit" / "state.json").exists()
