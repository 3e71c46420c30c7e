"""Issue 18: no dead ends, and exit codes that mean what the README says. A kill at any point
of making the worktree leaves something `apply --force` replaces; failures of the machine
(a read-only repository, a full disk) are exit 5 and failures of what was asked (a folder or
a link where rebaser's files go, an output it cannot write, a name too long) exit 2, each
with what to do; exit 6 is left for rebaser's own bugs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from faults import FaultPoint, mounted, read_only, run_with_fault
from synthetic import SyntheticUpstream, apply, git, two_patch_series
from test_apply_synthetic import stopped_apply

from rebaser.errors import ExitCode
from rebaser.sequencer.state import ApplyState
from rebaser.upstream import pypi_cache


def test_a_kill_between_worktree_add_and_its_marker_is_replaced_by_force(
    rebaser, tmp_path, upstream
):
    """Case 11: killed after `git worktree add`, before rebaser's marker: `apply --force`
    called the worktree one "rebaser did not create" and nothing recovered."""
    series = two_patch_series(tmp_path, upstream)
    args = ["apply", "--series", series, "--repo", upstream.path, "--base", "v1", "--test", "none"]
    died = run_with_fault(FaultPoint("rebaser.repo.workspace:worktree_git_dir", "before"), args)
    assert died.returncode == 137, died.stdout + died.stderr
    assert len(git(upstream.path, "worktree", "list").splitlines()) == 2
    again = rebaser(*args)
    assert again.code == ExitCode.USAGE and "pass --force" in again.err, again.err
    report = tmp_path / "r.json"
    forced = rebaser(*args, "--force", "--json", report)
    assert forced.code == ExitCode.OK, forced.out + forced.err
    assert [s["status"] for s in json.loads(report.read_text())["steps"]] == [
        "laid",
        "clean",
        "clean",
    ]
    assert len(git(upstream.path, "worktree", "list").splitlines()) == 2  # the new one only


@pytest.mark.parametrize("command", ["apply", "continue", "skip", "abort"])
def test_a_read_only_repository_is_an_environment_error(rebaser, tmp_path, upstream, command):
    """Case 15: a read-only repository gave exit 6 (a crash) for apply, continue, skip and
    abort; it is the machine's doing: exit 5, saying what to make writable. (continue, once
    writable again, says the conflict is not resolved yet.)"""
    series = two_patch_series(tmp_path, upstream)
    if command == "apply":
        args = ["apply", "--series", series, "--repo", upstream.path, "--base", "v1"]
        args += ["--test", "none"]
    else:
        stopped_apply(rebaser, tmp_path, upstream, series)
        args = [command, "--repo", upstream.path]
    refs_before = git(upstream.path, "for-each-ref")
    with read_only(upstream.path):
        result = rebaser(*args)
    assert result.code == ExitCode.ENVIRONMENT, result.out + result.err
    assert "Read-only file system" in result.err and "make it writable" in result.err
    assert git(upstream.path, "for-each-ref") == refs_before
    again = rebaser(*args)  # writable again: the command does what it does
    assert again.code in (ExitCode.OK, ExitCode.NOT_APPLIED) or "not resolved yet" in again.err


def test_a_folder_at_the_lock_path_is_named(rebaser, tmp_path, upstream):
    """Case 15: a folder where rebaser's lock file goes (exit 6) is exit 2, named."""
    series = two_patch_series(tmp_path, upstream)
    lock = upstream.path / ".git" / "forkkit" / "lock"
    lock.mkdir(parents=True)
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert f"{lock} is a folder" in result.err and "remove it" in result.err


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A folder on a real 24 MB file system of its own, for a disk that fills up."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    with mounted(folder, "-t", "tmpfs", "-o", "size=24m", "tmpfs"):
        yield folder


def fill(folder: Path) -> Path:
    """Fill `folder`'s file system to the last byte; the file that does it."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:  # unbuffered: nothing left to flush on close
        for size in (1 << 20, 4096, 1):
            try:
                while out.write(b"\0" * size):
                    pass
            except OSError:
                pass
    return filler


def test_a_full_disk_while_saving_the_state_is_an_environment_error(
    rebaser, tmp_path, upstream, small_disk, monkeypatch
):
    """Case 15: the disk fills up as the apply saves its state (exit 6): exit 5, what to do,
    and once there is room `continue` goes on."""
    series = two_patch_series(tmp_path, upstream)
    repo = SyntheticUpstream(small_disk / "repo")
    git(tmp_path, "clone", "-q", str(upstream.path), str(repo.path))
    original, saves = ApplyState.save, []

    def filling(state: ApplyState) -> None:
        saves.append(state.running)
        if len(saves) == 3:  # as the first patch starts: the disk is full from here on
            saves.append(fill(small_disk))
        original(state)

    monkeypatch.setattr(ApplyState, "save", filling)
    result = apply(rebaser, series, repo, "v1")
    assert result.code == ExitCode.ENVIRONMENT, result.out + result.err
    assert "No space left on device" in result.err and "rebaser continue" in result.err, result.err
    monkeypatch.setattr(ApplyState, "save", original)
    saves[-1].unlink()
    done = rebaser("continue", "--repo", repo.path)
    assert done.code == ExitCode.OK, done.out + done.err


@pytest.mark.parametrize(
    "command, option",
    [
        ("apply", "--json"),
        ("status", "--json"),
        ("verify", "--markdown"),
        ("refresh", "--range-diff-markdown"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_the_work(
    rebaser, tmp_path, upstream, command, option
):
    """Case 15: a --json or --range-diff-markdown target that cannot be written was found
    only after the work (exit 6): exit 2 at once, nothing done."""
    series = two_patch_series(tmp_path, upstream)
    target = tmp_path / "a-folder.json"
    target.mkdir()
    args = {
        "apply": ["apply", "--series", series, "--repo", upstream.path, "--base", "v1"],
        "status": ["status", "--repo", upstream.path],
        "verify": ["verify", "--series", series, "--repo", upstream.path, "--bases", "v1"],
        "refresh": ["refresh", "--series", series, "--repo", upstream.path, "--check"],
    }[command]
    refs_before = git(upstream.path, "for-each-ref")
    result = (
        rebaser(*args, "--test", "none", option, target)
        if command in ("apply", "verify")
        else rebaser(*args, option, target)
    )
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert f"{option} {target}" in result.err and "is a folder" in result.err, result.err
    assert git(upstream.path, "for-each-ref") == refs_before


def test_import_into_a_read_only_folder_is_named(rebaser, tmp_path, upstream):
    """Case 15: import into a read-only folder (exit 6) is exit 2, naming the folder."""
    git(upstream.path, "checkout", "-q", "-b", "fork", "v1")
    upstream.commit({"pkg/extra.py": "X = 1\n"}, "extra: new module")
    git(upstream.path, "checkout", "-q", "main")
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    with read_only(shelf):
        args = ["--repo", upstream.path, "--range", "v1..fork", "--series-dir", shelf / "series"]
        result = rebaser("import", *args)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert str(shelf) in result.err and "Read-only file system" in result.err


def test_a_tampered_wheel_in_a_read_only_wheel_folder(rebaser, tmp_path, fake_pypi, monkeypatch):
    """Case 15: a damaged cached wheel that cannot be removed (a read-only shared wheel
    folder) crashed (exit 6): exit 5 naming the folder, the wheel never imported."""
    wheels = tmp_path / "fake-wheels"
    pypi_cache("megatron-core").materialise("9.9.0")
    wheel = next(wheels.glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])
    monkeypatch.setenv("DSA_FORKKIT_CACHE", str(tmp_path / "fresh-cache"))
    with read_only(wheels):
        result = rebaser("apply", "--upstream", "pypi:megatron-core==9.9.0", "--test", "none")
    assert result.code == ExitCode.ENVIRONMENT, result.out + result.err
    assert f"the wheel folder {wheels} is not writable" in result.err, result.err
    assert pypi_cache("megatron-core").cached("9.9.0") is None


def test_over_long_names_are_usage_errors(rebaser, tmp_path, upstream):
    """Case 15: an @name or a --worktree folder name longer than the file system takes
    crashed (exit 6): exit 2, saying what is too long."""
    series = two_patch_series(tmp_path, upstream)
    long_name = "n" * 300
    series.write_text(series.read_text().replace("@name demo", f"@name {long_name}"))
    result = apply(rebaser, series, upstream, "v1")
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "@name" in result.err and "too long" in result.err, result.err
    series.write_text(series.read_text().replace(f"@name {long_name}", "@name demo"))
    result = apply(rebaser, series, upstream, "v1", "--worktree", tmp_path / ("w" * 300))
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "--worktree" in result.err and "too long" in result.err, result.err
    assert git(upstream.path, "branch", "--list", "forkkit/*") == ""


INTERRUPTED_IMPORT = """
import importlib.abc, importlib.metadata, runpy, sys
class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "rebaser.commands.apply":  # as if Ctrl-C came while rebaser loads
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, CtrlC())
sys.argv = ["rebaser", "status"]
if sys.argv_how == "console script":
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name="rebaser")
    sys.exit(entry.load()())
runpy.run_module("rebaser", run_name="__main__")
"""


@pytest.mark.parametrize("how", ["console script", "python -m rebaser"])
def test_ctrl_c_while_rebaser_loads_says_one_line(tmp_path, how):
    """Case 16: Ctrl-C in the first moments (module imports) printed a 30-line traceback."""
    code = INTERRUPTED_IMPORT.replace("sys.argv_how", repr(how))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == ExitCode.INTERRUPTED, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 2, done.stderr
    assert "interrupted" in done.stderr


def test_refresh_of_a_branch_that_does_not_exist_is_a_usage_error(rebaser, tmp_path, upstream):
    """Case 17: `refresh --branch nosuch` gave git's raw error, exit 5."""
    series = two_patch_series(tmp_path, upstream)
    result = rebaser("refresh", "--series", series, "--repo", upstream.path, "--branch", "nosuch")
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert "no branch nosuch" in result.err and "failed (128)" not in result.err, result.err


def test_a_fifo_where_the_wheel_goes_is_called_what_it_is(rebaser, tmp_path, fake_pypi):
    """Case 17: a FIFO where the cache expects a wheel was called "a folder"."""
    wheels = tmp_path / "fake-wheels"
    wheels.mkdir()
    os.mkfifo(wheels / "megatron_core-9.9.0-py3-none-any.whl")
    result = rebaser("apply", "--upstream", "pypi:megatron-core==9.9.0", "--test", "none")
    assert result.code == ExitCode.ENVIRONMENT, result.out + result.err
    assert "is a FIFO" in result.err and "a folder" not in result.err, result.err


def test_apply_onto_a_bare_repository_works(rebaser, tmp_path, upstream):
    """Case 18: `apply --repo <bare repository>` said "is not inside a git repository". rebaser
    works in worktrees of its own, which a bare repository can have (its PyPI cache is one)."""
    series = two_patch_series(tmp_path, upstream)
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(upstream.path), str(bare))
    report = tmp_path / "r.json"
    result = rebaser(
        "apply",
        "--series",
        series,
        "--repo",
        bare,
        "--base",
        "v1",
        "--test",
        "none",
        "--json",
        report,
    )
    assert result.code == ExitCode.OK, result.out + result.err
    assert git(bare, "rev-parse", "--verify", "forkkit/demo/v1")
    assert rebaser("status", "--repo", bare).out.strip() == "no apply in progress"


def test_an_output_that_is_a_fifo_nobody_reads_is_refused_not_waited_on(
    rebaser, tmp_path, upstream
):
    """Review: --json naming a FIFO nobody reads would block the write after the work (and
    the check, had it opened the file the usual way) forever: exit 2 at once."""
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    result = rebaser("status", "--repo", upstream.path, "--json", fifo)
    assert result.code == ExitCode.USAGE, result.out + result.err
    assert f"--json {fifo} cannot be written" in result.err, result.err


def test_output_closed_early_is_one_line_not_a_crash(tmp_path, upstream):
    """Review: `rebaser status | head -1` (the reader gone before rebaser writes) crashed as
    a bug, exit 6 with a log: one line on stderr, exit 5. Buffered, as a shell runs it:
    printed lines then reach the pipe only in Python's flush at exit (exit 120)."""
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    reading, writing = os.pipe()
    os.close(reading)  # nobody will read: every write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rebaser", "status", "--repo", str(upstream.path)],
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            env=buffered,
        )
    finally:
        os.close(writing)
    assert done.returncode == ExitCode.ENVIRONMENT, done.stderr
    assert done.stderr.strip().splitlines() == [
        "rebaser: its output was closed before it ended (broken pipe)"
    ]


@pytest.mark.parametrize("command", ["status", "continue", "skip", "abort"])
def test_a_current_folder_that_was_removed_is_named(
    rebaser, tmp_path, upstream, monkeypatch, command
):
    """A shell left in a folder of the worktree `abort` (or `apply --force`) removed: the
    next command crashed with exit 6 (FileNotFoundError from the current folder)."""
    tree = stopped_apply(rebaser, tmp_path, upstream)
    monkeypatch.chdir(tree / "pkg")
    assert rebaser("abort").code == ExitCode.OK
    result = rebaser(command)
    assert result.code == ExitCode.USAGE, result.err
    assert "the current folder no longer exists" in result.err
    assert "cd into the repository" in result.err
    # With the repository named, the current folder is not needed (a review of the above).
    assert rebaser("status", "--repo", upstream.path).code == ExitCode.OK


@pytest.mark.parametrize("command", ["continue", "skip"])
def test_a_series_moved_during_a_stop_says_how_to_go_on(rebaser, tmp_path, upstream, command):
    """continue and skip said "pass --series PATH", an option neither has."""
    series = two_patch_series(tmp_path, upstream)
    stopped_apply(rebaser, tmp_path, upstream, series)
    series.parent.rename(tmp_path / "moved")
    result = rebaser(command, "--repo", upstream.path)
    assert result.code == ExitCode.USAGE, result.err
    said = " ".join(result.err.split())
    assert f"the series this apply uses is gone: {series}" in said, said
    assert "put it back there" in said and "`rebaser abort`" in said
    assert "--series" not in said
    (tmp_path / "moved").rename(series.parent)  # put back: the apply goes on
    assert rebaser("skip", "--repo", upstream.path).code == ExitCode.NOT_APPLIED  # 0002 left off


def test_a_series_folder_for_a_series_file_is_named(rebaser, tmp_path, upstream):
    series = two_patch_series(tmp_path, upstream)
    result = apply(rebaser, series.parent, upstream, "v1")
    assert result.code == ExitCode.USAGE
    assert f"{series.parent} is a folder" in result.err and f"--series {series}" in result.err


def test_a_dash_for_an_output_file_is_refused(rebaser, tmp_path, upstream, monkeypatch):
    """`status --json -` wrote a file named "-" into the current folder (the user's
    repository, in a review): stdout carries the report, so "-" is refused."""
    monkeypatch.chdir(upstream.path)
    result = rebaser("status", "--json", "-")
    assert result.code == ExitCode.USAGE, result.out
    assert "--json - : rebaser writes it to a file" in result.err, result.err
    assert not (upstream.path / "-").exists()


ENDING = """
import atexit, pathlib, runpy, sys, tempfile, threading, time
import rebaser.cli
folder = pathlib.Path(sys.argv[1])
if sys.argv[2:] == ["handler first"]:  # as a .pth file may register one
    atexit.register(lambda: (folder / "first handler").write_text("ran"))

class TornDown:
    def __del__(self):
        (folder / "torn down").write_text("")

def main():
    def late():  # a thread still working when the command returns (a memo being written)
        time.sleep(0.3)
        (folder / "thread").write_text("done")
    threading.Thread(target=late).start()
    main.kept = (TornDown(), tempfile.TemporaryDirectory(dir=folder))
    atexit.register(lambda: (folder / "atexit").write_text("ran"))
    sys.stdout.write("x" * 1_000_000)  # still in the buffer when main returns
    return 3
rebaser.cli.main = main
sys.argv = ["rebaser"]
runpy.run_module("rebaser", run_name="__main__")
"""


@pytest.mark.parametrize("before", [[], ["handler first"]], ids=["alone", "handler first"])
def test_a_command_ends_without_tearing_the_interpreter_down(tmp_path, before):
    """Freeing a command's objects at exit (the structured merge's syntax trees, caches)
    took 0.13 s of every stop's `skip` on a real fork. The process now ends once its
    threads and exit handlers are done, its output flushed, with the command's code; with
    an exit handler registered before rebaser started, as Python would end it."""
    done = subprocess.run(
        [sys.executable, "-c", ENDING, str(tmp_path), *before], capture_output=True, text=True
    )
    assert done.returncode == 3, done.stderr
    assert len(done.stdout) == 1_000_000 and not done.stderr
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert [path.name for path in tmp_path.iterdir() if path.is_dir()] == []  # finalizers ran
    if before:
        assert (tmp_path / "first handler").read_text() == "ran"
    assert (tmp_path / "torn down").exists() == bool(before)


@pytest.mark.parametrize("closed", [">&-", "2>&-", "<&- >&- 2>&-"])
def test_a_command_with_its_output_closed_does_its_work(upstream, closed):
    """Run with stdout or stderr closed (a cron job, a service), `rebaser status` crashed
    (exit 6: Python's sys.stdout is None there) and the end of the process reported an
    exception: what it would print is dropped, the command runs and exits as it would."""
    repo = shlex.quote(str(upstream.path))
    command = f'exec "{sys.executable}" -m rebaser status --repo {repo} {closed}'
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr


@pytest.mark.parametrize("rich_there", [True, False])
def test_rich_loaded_meanwhile_is_loaded_once_and_its_failure_said_by_the_report(rich_there):
    """rich loads in a thread while a command waits on git: a report drawn meanwhile waits
    for it (one class, no second import), and an import that fails there prints nothing
    from the thread and fails again, to be said, where the report loads it."""
    script = f"""
import sys, threading
if not {rich_there}:
    sys.modules["rich.table"] = None  # an import that fails
from rebaser.commands import output
output.load_rich_meanwhile()
try:
    output._load_rich()
except ImportError:
    print("failed in the report")
for thread in threading.enumerate():
    if thread.name == "forkkit-rich":
        thread.join()
if {rich_there}:
    made = output._Console
    output._load_rich()
    print("one class" if output._Console is made else "loaded twice")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.strip() == ("one class" if rich_there else "failed in the report")
