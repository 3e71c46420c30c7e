"""Exit codes CI can rely on, and the one error type commands raise."""

from __future__ import annotations

import enum
import errno
from pathlib import Path


class ExitCode(enum.IntEnum):
    """Process exit codes, documented in the README; never renumber them."""

    OK = 0  # applied, verified, tests green (or not asked for)
    TESTS_FAILED = 1  # applied and verified, but tests failed or could not run
    USAGE = 2  # bad arguments, malformed series, unknown base, refused precondition
    NOT_APPLIED = 3  # a patch did not apply; a resumable state was left
    VERIFY_FAILED = 4  # applied, but verification found a problem
    ENVIRONMENT = 5  # something outside the series failed: git, PyPI, the test interpreter
    INTERNAL = 6  # rebaser itself failed unexpectedly (a bug): the traceback is in a log file
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)


class RebaserError(Exception):
    """A failure the user can act on: what failed, where, and what to do next."""

    def __init__(
        self, what: str, *, where: str = "", next_step: str = "", code: ExitCode = ExitCode.USAGE
    ) -> None:
        super().__init__(what)
        self.what = what
        self.where = where
        self.next_step = next_step
        self.code = code

    def __str__(self) -> str:
        parts = [self.what]
        if self.where:
            parts.append(f"where: {self.where}")
        if self.next_step:
            parts.append(f"next: {self.next_step}")
        return "\n".join(parts)


def machine_refused(what: str, error: OSError, where: object, next_step: str) -> RebaserError:
    """The system refused rebaser a file (no room, read-only, no right): exit 5, with what
    rebaser was doing, what the system said, where, and what to do."""
    return RebaserError(
        f"{what}: {error.strerror or error}",
        where=str(where),
        next_step=next_step,
        code=ExitCode.ENVIRONMENT,
    )


def unwritable(what: str, folder: Path, error: OSError, setting: str) -> RebaserError:
    """A folder rebaser must write (the cache, the wheel folder) cannot be written: exit 5."""
    return machine_refused(
        f"{what} {folder} is not writable",
        error,
        folder,
        f"make it writable, or point {setting} at a writable folder",
    )


def unusable_git_dir(doing: str, path: Path, error: OSError) -> RebaserError:
    """rebaser cannot write into the repository's git dir (its state, lock, refs): a
    read-only or full file system, or permissions: exit 5."""
    return machine_refused(
        f"cannot {doing} in {path.parent}",
        error,
        path,
        "rebaser keeps its lock, state and refs in the repository's git dir: make it "
        "writable (or free space there), then run the command again",
    )


# What the machine says when it cannot do what rebaser asks of a file: no room, no right to
# write, a failing disk, too many open files. Any other OSError nobody handled is a bug.
MACHINE_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.EIO,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
    }
)


def machine_failure(error: OSError) -> RebaserError:
    """An OSError of MACHINE_ERRNOS no step turned into its own message: exit 5, naming the
    file and what the system said."""
    where = error.filename or "a file rebaser uses"
    return machine_refused(
        f"the system refused rebaser a file ({where})",
        error,
        where,
        "free space there or make it writable, then run the command again (an apply in "
        "progress: `rebaser status` says where it stands)",
    )
